// The real `gpunvme` binary stopped mid-deploy (SIGKILL, SIGTERM, SIGINT at many points, a write
// error like ENOSPC), and run twice at once: ls and verify must never report an unfinished deploy
// as a model, and a second writer (or a reader) must be refused while a deploy runs.
#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>
#include <chrono>
#include <string>
#include <thread>

#include "tests/deploy/cli_run.h"
#include "tests/deploy/deploy_fixture.h"

using namespace deploy_test;
using Catch::Matchers::ContainsSubstring;

namespace {

// The write bandwidth of the modeled drive: a 24 MiB model takes about 0.8 s to write.
constexpr const char* kSlowDrive = ",wbw=32M";

// Until a deploy started with --progress prints its first progress line (its first 8 MiB piece is
// written), or exits; at most a minute.
void wait_for_progress(Background& deploy, const std::string& log) {
  const auto limit = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (read_file(log).empty() && deploy.running() && std::chrono::steady_clock::now() < limit)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
}

struct Outcome {
  bool refused_unfinished = false;  // ls and verify both said "did not finish"
  std::string listed;               // model ls listed (and verify checked every byte of)
};

// What a reader sees: either a refusal naming the unfinished deploy, or a model whose every byte
// verifies against its record. Anything else (a listing that does not verify, exit 0 on half a
// model) fails the test.
Outcome read_back(const std::string& dev) {
  const auto ls = run("ls --device " + dev);
  const auto verify = run("verify --device " + dev);
  INFO("ls:\n" << ls.out << "verify:\n" << verify.out);
  Outcome o;
  if (ls.rc == 0) {
    CHECK(verify.rc == 0);
    CHECK_THAT(verify.out, ContainsSubstring("OK: "));
    CHECK_THAT(ls.out, ContainsSubstring("found by   deploy record"));
    o.listed = ls.out.find("'new model'") != std::string::npos ? "new" : ls.out.find("'old model'") != std::string::npos ? "old" : "?";
    return o;
  }
  CHECK(ls.rc == 1);
  CHECK(verify.rc == 1);
  // Killed before anything was written: no image yet, an image not yet sized (killed between its
  // creation and ftruncate), or nothing on it.
  for (const char* nothing : {"no model on", "does not exist", "holds less than one"})
    if (ls.out.find(nothing) != std::string::npos) return o;
  CHECK_THAT(ls.out, ContainsSubstring("did not finish") && ContainsSubstring("Re-run `gpunvme deploy"));
  CHECK_THAT(verify.out, ContainsSubstring("did not finish"));
  o.refused_unfinished = true;
  return o;
}

}  // namespace

TEST_CASE("a deploy killed at any point is never listed or verified as a model", "[deploy][cli][crash]") {
  if (!std::getenv("GPUNVME_BIN")) SKIP("GPUNVME_BIN is not set (meson sets it to the built gpunvme)");
  const bool over_old = GENERATE(false, true);
  INFO((over_old ? "over an older model" : "on a fresh image"));
  TempPath img, old_model, new_model, log;
  write_file(old_model.path, make_model(6u << 20, "old model", 11));
  write_file(new_model.path, make_model(24u << 20, "new model", 12));
  const std::string dev = "emu:" + img.path;
  // Kills timed from the start (before or while it opens the device), or from its first progress
  // line (the first 8 MiB piece written: mid-write on any machine, however loaded), or long after
  // (a finished deploy).
  struct Stop {
    int sig;
    int after_ms;
    bool from_progress;
  };
  const Stop stops[] = {{SIGKILL, 5, false},   {SIGKILL, 60, false},  {SIGKILL, 0, true},
                        {SIGKILL, 100, true},  {SIGKILL, 250, true},  {SIGKILL, 400, true},
                        {SIGTERM, 150, true},  {SIGINT, 300, true},   {SIGKILL, 3000, true}};
  int unfinished = 0;
  for (const Stop& s : stops) {
    INFO("signal " << s.sig << " " << s.after_ms << " ms after " << (s.from_progress ? "the first progress line" : "spawn"));
    ::unlink(img.path.c_str());
    if (over_old) {
      REQUIRE(run("deploy " + old_model.path + " --device " + dev + ",size=64M").rc == 0);
      REQUIRE(run("verify --device " + dev).rc == 0);
    }
    {
      Background deploy("'" + gpunvme_bin() + "' deploy " + new_model.path + " --device " + dev + ",size=64M" +
                            kSlowDrive + " --progress",
                        log.path);
      if (s.from_progress) wait_for_progress(deploy, log.path);
      std::this_thread::sleep_for(std::chrono::milliseconds(s.after_ms));
      deploy.signal(s.sig);
      const int st = deploy.wait();
      if (s.sig != SIGKILL && WIFSIGNALED(st) && s.after_ms < 3000) {  // stopped mid-write: it says what it left
        CHECK(WTERMSIG(st) == s.sig);
        const auto log_bytes = read_file(log.path);
        CHECK_THAT(std::string(log_bytes.begin(), log_bytes.end()), ContainsSubstring("interrupted") &&
                                                                         ContainsSubstring("run the deploy again"));
      }
    }
    const Outcome o = read_back(dev);
    unfinished += o.refused_unfinished;
    if (!over_old) CHECK(o.listed != "old");
    if (s.after_ms >= 3000) CHECK(o.listed == "new");  // the signal came after the deploy had finished
  }
  // The kills really landed mid-write (otherwise this test proves nothing).
  CHECK(unfinished >= 5);
  // Deploying again replaces the unfinished deploy.
  REQUIRE(run("deploy " + new_model.path + " --device " + dev).rc == 0);
  CHECK(read_back(dev).listed == "new");
}

TEST_CASE("a deploy that fails writing (file size limit, like ENOSPC) leaves a refused, unfinished deploy",
          "[deploy][cli][crash]") {
  if (!std::getenv("GPUNVME_BIN")) SKIP("GPUNVME_BIN is not set (meson sets it to the built gpunvme)");
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
  if (!std::getenv("GPUNVME_BIN")) SKIP("GPUNVME_BIN is not set (meson sets it to the built gpunvme)");
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
