// The real `gpunvme` binary stopped mid-deploy (SIGKILL, SIGTERM, SIGINT at many points, a write
// error like ENOSPC), onto one namespace and onto a striped set, and run twice at once: ls and verify
// must never report an unfinished deploy as a model, and a second writer (or a reader) must be
// refused while a deploy runs.
#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>
#include <chrono>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "tests/deploy/cli_run.h"
#include "tests/deploy/deploy_fixture.h"
#include "tests/deploy/read_back.h"

using namespace deploy_test;
using Catch::Matchers::ContainsSubstring;

namespace {

// The write bandwidth of the modeled drive: a 24 MiB model takes about 0.8 s to write (a striped set
// of two members at half that each: the same).
constexpr const char* kSlowDrive = ",wbw=32M";
constexpr const char* kSlowMember = ",wbw=16M";

// Where the deploys go: the --device arguments that write (creating and slowing the images) and
// those that read back, and the image files.
struct Target {
  std::string write_args, read_args;
  std::vector<const TempPath*> images;
};

Target one_namespace(const TempPath& img) {
  const std::string dev = "emu:" + img.path;
  return {dev + ",size=64M" + kSlowDrive, dev, {&img}};
}

Target striped_pair(const TempPath& a, const TempPath& b) {
  const std::string A = "emu:" + a.path, B = "emu:" + b.path;
  return {A + ",size=32M" + kSlowMember + " --device " + B + ",size=32M" + kSlowMember, A + " --device " + B, {&a, &b}};
}

// Kills timed from the start (before or while it opens the device), or from its first progress
// line (the first 8 MiB piece written: mid-write on any machine, however loaded), or long after
// (a finished deploy).
struct Stop {
  int sig;
  int after_ms;
  bool from_progress;
};

// What a reader sees after a stop, and whether the deploy had already finished (exit 0) when the
// signal came: "long after" is a guess on a loaded or sanitized build, the exit status is not.
struct Stopped {
  Outcome seen;
  bool finished = false;
};

// A deploy of `new_model` onto `t` (over `old_model` when given), stopped by `s`; what a reader sees.
Stopped stop_deploy(const Target& t, const Stop& s, const std::string& new_model, const std::string* old_model) {
  INFO("signal " << s.sig << " " << s.after_ms << " ms after " << (s.from_progress ? "the first progress line" : "spawn"));
  TempPath log;
  for (const TempPath* img : t.images) ::unlink(img->path.c_str());
  if (old_model) {
    REQUIRE(run("deploy " + *old_model + " --device " + t.write_args).rc == 0);
    REQUIRE(run("verify --device " + t.read_args).rc == 0);
  }
  Background deploy("'" + gpunvme_bin() + "' deploy " + new_model + " --device " + t.write_args + " --progress", log.path);
  if (s.from_progress) wait_for_progress(deploy, log.path);
  std::this_thread::sleep_for(std::chrono::milliseconds(s.after_ms));
  deploy.signal(s.sig);
  const int st = deploy.wait();
  if (s.sig != SIGKILL && WIFSIGNALED(st) && s.after_ms < 3000) {  // stopped mid-write: it says what it left
    CHECK(WTERMSIG(st) == s.sig);
    CHECK_THAT(read_text(log.path), ContainsSubstring("interrupted") && ContainsSubstring("run the deploy again"));
  }
  return {read_back(t.read_args), WIFEXITED(st) && WEXITSTATUS(st) == 0};
}

// Every stop in `stops` onto `t`, on fresh images or over an older model: never a half model read as
// one, and enough stops mid-write to prove it.
void check_stops(const Target& t, std::span<const Stop> stops, int min_unfinished) {
  const bool over_old = GENERATE(false, true);
  INFO((over_old ? "over an older model" : "on fresh images"));
  TempPath old_model, new_model;
  write_file(old_model.path, make_model(6u << 20, "old model", 11));
  write_file(new_model.path, make_model(24u << 20, "new model", 12));
  int unfinished = 0;
  for (const Stop& s : stops) {
    const Stopped r = stop_deploy(t, s, new_model.path, over_old ? &old_model.path : nullptr);
    const Outcome& o = r.seen;
    unfinished += o.refused_unfinished;
    if (!over_old) CHECK(o.listed != "old");
    if (r.finished) CHECK(o.listed == "new");  // the signal came after the deploy had finished
  }
  // The kills really landed mid-write (otherwise this test proves nothing).
  CHECK(unfinished >= min_unfinished);
  // Deploying again replaces the unfinished deploy.
  REQUIRE(run("deploy " + new_model.path + " --device " + t.read_args).rc == 0);
  CHECK(read_back(t.read_args).listed == "new");
}

}  // namespace

TEST_CASE("a deploy killed at any point is never listed or verified as a model", "[deploy][cli][crash]") {
  skip_without_gpunvme_bin();
  TempPath img;
  const Stop stops[] = {{SIGKILL, 5, false},   {SIGKILL, 60, false},  {SIGKILL, 0, true},
                        {SIGKILL, 100, true},  {SIGKILL, 250, true},  {SIGKILL, 400, true},
                        {SIGTERM, 150, true},  {SIGINT, 300, true},   {SIGKILL, 3000, true}};
  check_stops(one_namespace(img), stops, 5);
}

TEST_CASE("a striped deploy stopped by a signal is never listed or verified as a model", "[deploy][cli][crash][stripe]") {
  skip_without_gpunvme_bin();
  TempPath a, b;
  // SIGINT while the members are opened: test_deploy_striped.cpp (timed from spawn, a SIGINT could
  // land before main() runs, where no handler can be).
  const Stop stops[] = {{SIGKILL, 5, false},  {SIGKILL, 60, false}, {SIGINT, 0, true},
                        {SIGTERM, 150, true}, {SIGINT, 300, true},  {SIGKILL, 200, true}, {SIGINT, 3000, true}};
  check_stops(striped_pair(a, b), stops, 3);
}

TEST_CASE("a deploy that fails writing (file size limit, like ENOSPC) leaves a refused, unfinished deploy",
          "[deploy][cli][crash]") {
  skip_without_gpunvme_bin();
  const bool over_old = GENERATE(false, true);
  TempPath img, old_model, new_model;
  write_file(old_model.path, make_model(3u << 20, "old model", 13));
  write_file(new_model.path, make_model(24u << 20, "new model", 14));
  const std::string dev = "emu:" + img.path;
  REQUIRE(std::system(("truncate -s 64M " + img.path).c_str()) == 0);
  if (over_old) REQUIRE(run("deploy " + old_model.path + " --device " + dev).rc == 0);
  // Writes past 12 MiB into the image fail with EFBIG (SIGXFSZ ignored), as they would on a full disk.
  const auto r = run_shell("bash -c 'ulimit -f 12288; trap \"\" XFSZ; exec " + gpunvme_bin() + " deploy " +
                           new_model.path + " --device " + dev + "'");
  const std::string& out = r.out;
  INFO(out);
  CHECK(r.rc == 1);
  CHECK_THAT(out, ContainsSubstring("failed after") && ContainsSubstring("unfinished deploy"));
  CHECK(out.find("deployed '") == std::string::npos);
  CHECK(read_back(dev).refused_unfinished);
}

TEST_CASE("two deploys at once: the second is refused naming the first's pid; ls waits its turn", "[deploy][cli][lock]") {
  skip_without_gpunvme_bin();
  TempPath img, first, second, log;
  write_file(first.path, make_model(24u << 20, "new model", 15));
  write_file(second.path, make_model(2u << 20, "second model", 16));
  const std::string dev = "emu:" + img.path;
  REQUIRE(std::system(("truncate -s 64M " + img.path).c_str()) == 0);
  Background deploy("'" + gpunvme_bin() + "' deploy " + first.path + " --device " + dev + ",wbw=16M --progress", log.path);
  // Its first progress line: it holds the lock and has 16 MiB (about a second) left to write.
  wait_for_progress(deploy, log.path);
  REQUIRE(deploy.running());
  const std::string pid = "pid " + std::to_string(deploy.pid());
  auto r = run("deploy " + second.path + " --device " + dev);
  INFO(r.out);
  CHECK(r.rc == 1);
  CHECK_THAT(r.out, ContainsSubstring("is in use") && ContainsSubstring(pid) && ContainsSubstring("(writing)"));
  r = run("ls --device " + dev);
  INFO(r.out);
  CHECK(r.rc == 1);
  CHECK_THAT(r.out, ContainsSubstring(pid) && ContainsSubstring("a deploy is running"));
  r = run("verify --device " + dev);
  CHECK(r.rc == 1);
  CHECK_THAT(r.out, ContainsSubstring(pid));
  const int st = deploy.wait();
  CHECK(WIFEXITED(st));
  CHECK(WEXITSTATUS(st) == 0);
  CHECK(read_back(dev).listed == "new");
}
