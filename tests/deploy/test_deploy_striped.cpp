// Striped sets (several --device) against a hostile or unlucky user, through the real `gpunvme`
// binary: a new set laid over members that already hold a model (another member order, another
// stripe unit, a one-namespace model) is refused before any byte changes unless --force; a deploy
// stopped at any write leaves members that ls and verify read honestly.
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/deploy/cli_run.h"
#include "tests/deploy/deploy_fixture.h"
#include "tests/deploy/read_back.h"

using namespace deploy_test;
using Catch::Matchers::ContainsSubstring;

namespace {

// Two member images and two models for every test here.
struct TwoMembers {
  TempPath a, b, old_model, new_model;
  std::string A = "emu:" + a.path, B = "emu:" + b.path;
  TwoMembers() {
    write_file(old_model.path, make_model(3u << 20, "old model", 21));
    write_file(new_model.path, make_model(2u << 20, "new model", 22));
  }
  // Both images, byte for byte.
  std::vector<std::vector<uint8_t>> images() const { return {read_file(a.path), read_file(b.path)}; }
  bool unchanged_since(const std::vector<std::vector<uint8_t>>& before) const { return images() == before; }
};

// Until `child` holds a flock (it has begun opening its devices: host/device_lock.h), from
// /proc/locks without taking one (a probe lock could make the child's own attempt fail); at most a minute.
bool wait_for_lock(Background& child) {
  const std::string pid = " " + std::to_string(child.pid()) + " ";
  const auto limit = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (child.running() && std::chrono::steady_clock::now() < limit) {
    std::ifstream locks("/proc/locks");
    for (std::string line; std::getline(locks, line);)
      if (line.find("FLOCK") != std::string::npos && line.find(pid) != std::string::npos) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return false;
}

}  // namespace

TEST_CASE("a striped set in another order or stripe unit is refused before anything is written", "[deploy][stripe][safety]") {
  if (!std::getenv("GPUNVME_BIN")) SKIP("GPUNVME_BIN is not set (meson sets it to the built gpunvme)");
  TwoMembers t;
  TempPath c;
  REQUIRE(run("deploy " + t.old_model.path + " --device " + t.A + ",size=16M --device " + t.B + ",size=16M").rc == 0);
  const auto before = t.images();
  const std::string other_layouts[] = {
      "--device " + t.B + " --device " + t.A,                           // the members swapped
      "--device " + t.A + " --device " + t.B + " --stripe-unit 64K",    // another stripe unit
      "--device " + t.A + " --device " + t.B + " --device emu:" + c.path + ",size=16M",  // a third member
      "--device " + t.A,                                                // member 1 alone
  };
  for (const std::string& devices : other_layouts) {
    const auto r = run("deploy " + t.new_model.path + " " + devices);
    INFO(devices << "\n" << r.out);
    CHECK(r.rc == 1);
    CHECK_THAT(r.out, ContainsSubstring("striped set") && ContainsSubstring("--force"));
    CHECK(t.unchanged_since(before));  // not one byte changed: every check ran before the first write
    const auto v = run("verify --device " + t.A + " --device " + t.B);
    INFO(v.out);
    CHECK(v.rc == 0);
  }
  // The set as it was laid: the normal re-deploy, no --force.
  REQUIRE(run("deploy " + t.new_model.path + " --device " + t.A + " --device " + t.B).rc == 0);
  CHECK_THAT(run("ls --device " + t.A + " --device " + t.B).out, ContainsSubstring("'new model'"));
  // --force re-lays the members: the new order reads, the old one is refused.
  REQUIRE(run("deploy " + t.old_model.path + " --device " + t.B + " --device " + t.A + " --force").rc == 0);
  CHECK(run("verify --device " + t.B + " --device " + t.A).rc == 0);
  CHECK(run("verify --device " + t.A + " --device " + t.B).rc == 1);
}

TEST_CASE("a striped set over a one-namespace model is refused before anything is written", "[deploy][stripe][safety]") {
  if (!std::getenv("GPUNVME_BIN")) SKIP("GPUNVME_BIN is not set (meson sets it to the built gpunvme)");
  TwoMembers t;
  REQUIRE(run("deploy " + t.old_model.path + " --device " + t.A + ",size=16M").rc == 0);
  REQUIRE(run_shell("truncate -s 16M " + t.b.path).rc == 0);
  const auto before = t.images();
  const auto r = run("deploy " + t.new_model.path + " --device " + t.A + " --device " + t.B);
  INFO(r.out);
  CHECK(r.rc == 1);
  CHECK_THAT(r.out, ContainsSubstring("'old model'") && ContainsSubstring("--force"));
  CHECK(t.unchanged_since(before));
  CHECK(run("verify --device " + t.A).rc == 0);
  REQUIRE(run("deploy " + t.new_model.path + " --device " + t.A + " --device " + t.B + " --force").rc == 0);
  CHECK(run("verify --device " + t.A + " --device " + t.B).rc == 0);
}

TEST_CASE("a striped deploy stopped at any write leaves members that read honestly", "[deploy][stripe][crash]") {
  if (!std::getenv("GPUNVME_BIN")) SKIP("GPUNVME_BIN is not set (meson sets it to the built gpunvme)");
  // Set A,B re-laid as B,A (--force), stopped at each write of either member in turn (the member's
  // Nth write fails, as a signal there would stop it): whatever is on the images then, the old order
  // and the new one either read a model that verifies or are refused, by ls and verify alike.
  TwoMembers t;
  for (const bool fail_b : {true, false}) {
    for (int nth = 1;; ++nth) {
      INFO("write " << nth << " to " << (fail_b ? "B" : "A") << " fails");
      ::unlink(t.a.path.c_str());
      ::unlink(t.b.path.c_str());
      REQUIRE(run("deploy " + t.old_model.path + " --device " + t.A + ",size=16M --device " + t.B + ",size=16M").rc == 0);
      const std::string fault = ",fault=error:op=write:nth=" + std::to_string(nth) + ":dnr=1";
      const auto r = run("deploy " + t.new_model.path + " --device " + t.B + (fail_b ? fault : "") + " --device " + t.A +
                         (fail_b ? "" : fault) + " --force");
      INFO(r.out);
      CHECK(reads_honestly(t.B + " --device " + t.A));
      CHECK(reads_honestly(t.A + " --device " + t.B));
      if (r.rc == 0) break;  // past this member's last write
      REQUIRE(nth < 64);
    }
  }
}

TEST_CASE("SIGINT while the members are being opened: the line, the signal's exit, nothing written", "[deploy][stripe][crash]") {
  if (!std::getenv("GPUNVME_BIN")) SKIP("GPUNVME_BIN is not set (meson sets it to the built gpunvme)");
  TwoMembers t;
  TempPath log;
  REQUIRE(run("deploy " + t.old_model.path + " --device " + t.A + ",size=16M --device " + t.B + ",size=16M").rc == 0);
  const auto before = t.images();
  // Each member's controller takes a second to come up: the deploy is opening them, nothing else.
  Background deploy("'" + gpunvme_bin() + "' deploy " + t.new_model.path + " --device " + t.A + ",ready_ms=1000 --device " +
                        t.B + ",ready_ms=1000",
                    log.path);
  REQUIRE(wait_for_lock(deploy));
  deploy.signal(SIGINT);
  const int st = deploy.wait();
  const auto out = read_file(log.path);
  INFO(std::string(out.begin(), out.end()));
  CHECK(WIFSIGNALED(st));
  CHECK((WIFSIGNALED(st) && WTERMSIG(st) == SIGINT));
  CHECK_THAT(std::string(out.begin(), out.end()), ContainsSubstring("interrupted") && ContainsSubstring("run the deploy again"));
  CHECK(t.unchanged_since(before));
  CHECK(run("verify --device " + t.A + " --device " + t.B).rc == 0);
}
