// Striped sets (several --device) against a hostile or unlucky user, through the real `gpunvme`
// binary: a new set laid over members that already hold a model (another member order, another
// stripe unit, a one-namespace model) is refused before any byte changes unless --force; a deploy
// stopped at any write leaves members that ls and verify read honestly; two processes at once, or
// one namespace given twice, get a clear refusal at once.
#include <unistd.h>

#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>
#include <chrono>
#include <cstdlib>
#include <string>
#include <vector>

#include "host/device_lock.h"
#include "tests/deploy/cli_run.h"
#include "tests/deploy/deploy_fixture.h"
#include "tests/deploy/read_back.h"

using namespace gpunvme;
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
  // The old model as the set A,B on new 16 MiB images (any older ones removed): deploy's exit status.
  int lay_old_set() const {
    ::unlink(a.path.c_str());
    ::unlink(b.path.c_str());
    return run("deploy " + old_model.path + " --device " + A + ",size=16M --device " + B + ",size=16M").rc;
  }
};

}  // namespace

TEST_CASE("a striped set in another order or stripe unit is refused before anything is written", "[deploy][stripe][safety]") {
  skip_without_gpunvme_bin();
  TwoMembers t;
  TempPath c;
  REQUIRE(t.lay_old_set() == 0);
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
  skip_without_gpunvme_bin();
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
  skip_without_gpunvme_bin();
  // Set A,B re-laid as B,A (--force), stopped at each write of either member in turn (the member's
  // Nth write fails, as a signal there would stop it): whatever is on the images then, the old order
  // and the new one either read a model that verifies or are refused, by ls and verify alike.
  TwoMembers t;
  for (const bool fail_b : {true, false}) {
    for (int nth = 1;; ++nth) {
      INFO("write " << nth << " to " << (fail_b ? "B" : "A") << " fails");
      REQUIRE(t.lay_old_set() == 0);
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
  skip_without_gpunvme_bin();
  TwoMembers t;
  TempPath log;
  REQUIRE(t.lay_old_set() == 0);
  const auto before = t.images();
  // Each member's controller takes a second to come up: the deploy is opening them, nothing else.
  Background deploy("'" + gpunvme_bin() + "' deploy " + t.new_model.path + " --device " + t.A + ",ready_ms=1000 --device " +
                        t.B + ",ready_ms=1000",
                    log.path);
  REQUIRE(wait_for_lock(deploy));
  deploy.signal(SIGINT);
  const int st = deploy.wait();
  const std::string out = read_text(log.path);
  INFO(out);
  CHECK(WIFSIGNALED(st));
  CHECK((WIFSIGNALED(st) && WTERMSIG(st) == SIGINT));
  CHECK_THAT(out, ContainsSubstring("interrupted") && ContainsSubstring("run the deploy again"));
  CHECK(t.unchanged_since(before));
  CHECK(run("verify --device " + t.A + " --device " + t.B).rc == 0);
}

TEST_CASE("two deploys of one set in opposite orders: one writes it, the other is refused at once", "[deploy][stripe][lock]") {
  skip_without_gpunvme_bin();
  TwoMembers t;
  TempPath log_ab, log_ba;
  REQUIRE(run_shell("truncate -s 16M " + t.a.path + " " + t.b.path).rc == 0);  // no set yet: either order may lay it
  // Each member's controller takes half a second to come up, so each deploy still holds its first
  // member's lock when the other asks for it: locked in the order given, each would hold one member
  // and be refused the other, and neither would write.
  const std::string slow = ",ready_ms=500";
  const std::string deploy = "'" + gpunvme_bin() + "' deploy " + t.new_model.path;
  const auto t0 = std::chrono::steady_clock::now();
  Background ab(deploy + " --device " + t.A + slow + " --device " + t.B + slow, log_ab.path);
  Background ba(deploy + " --device " + t.B + slow + " --device " + t.A + slow, log_ba.path);
  const int st_ab = ab.wait(), st_ba = ba.wait();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const std::string both = read_text(log_ab.path) + "---\n" + read_text(log_ba.path);
  INFO(both);
  const int written = (WIFEXITED(st_ab) && WEXITSTATUS(st_ab) == 0) + (WIFEXITED(st_ba) && WEXITSTATUS(st_ba) == 0);
  CHECK(written >= 1);
  if (written == 1) CHECK_THAT(both, ContainsSubstring("is in use: pid") && ContainsSubstring("try again"));
  CHECK(seconds < 30);  // nobody waits for a lock: the refusal comes at once
  // The set, in the order of the deploy that wrote it.
  const bool ab_wrote = WIFEXITED(st_ab) && WEXITSTATUS(st_ab) == 0;
  CHECK(run("verify --device " + (ab_wrote ? t.A + " --device " + t.B : t.B + " --device " + t.A)).rc == 0);
}

TEST_CASE("one namespace given twice, under any spelling, is refused as such", "[deploy][stripe][lock]") {
  skip_without_gpunvme_bin();
  TwoMembers t;
  REQUIRE(run("deploy " + t.old_model.path + " --device " + t.A + ",size=16M").rc == 0);
  const std::string dir = t.a.path.substr(0, t.a.path.rfind('/')), base = t.a.path.substr(t.a.path.rfind('/') + 1);
  for (const std::string& again : {t.A, "emu:" + dir + "/./" + base, "emu:" + dir + "/../" + dir.substr(1) + "/" + base + ",size=16M"}) {
    const auto r = run("deploy " + t.new_model.path + " --device " + t.A + " --device " + again + " --force");
    INFO(again << "\n" << r.out);
    CHECK(r.rc == 1);
    CHECK_THAT(r.out, ContainsSubstring("given twice"));
    CHECK(r.out.find("is in use") == std::string::npos);  // not "busy", naming this very process
  }
  CHECK(run("verify --device " + t.A).rc == 0);
}

TEST_CASE("lock_order: one order for one set, whatever order its members are given in", "[deploy][stripe][lock]") {
  TwoMembers t;
  REQUIRE(run_shell("truncate -s 16M " + t.a.path + " " + t.b.path).rc == 0);
  const std::string ram = "emu:ram,size=1M";
  const bool a_first = host::DeviceLock::key(t.A, 1) < host::DeviceLock::key(t.B, 1);
  CHECK(host::lock_order({t.A, t.B}, 1) == (a_first ? std::vector<size_t>{0, 1} : std::vector<size_t>{1, 0}));
  CHECK(host::lock_order({t.B, t.A}, 1) == (a_first ? std::vector<size_t>{1, 0} : std::vector<size_t>{0, 1}));
  CHECK(host::lock_order({t.B, ram, t.A, ram}, 1).front() == 1);  // no lock to take: first, as given
  CHECK(host::DeviceLock::key(t.A + ",size=16M", 1) == t.a.path);  // keys are the lock file's path
  CHECK(host::DeviceLock::key(ram, 1).empty());
  CHECK_THROWS_WITH(host::lock_order({t.A, t.B, t.A + ",size=16M"}, 1), ContainsSubstring("given twice"));
  CHECK_NOTHROW(host::lock_order({ram, ram}, 1));  // two emu:ram are two namespaces
}
