// Striped sets (several --device) against a hostile or unlucky user, through the real `gpunvme`
// binary: a new set laid over members that already hold a model (another member order, another
// stripe unit, a one-namespace model) is refused before any byte changes unless --force; a deploy
// stopped at any write leaves members that ls and verify read honestly; two processes at once, or
// one namespace given twice, get a clear refusal at once; a member saved before a re-deploy is
// refused by name (set generations); members of two block sizes, or living in RAM, are refused
// before anything is written; the size check counts what the members give the set.
#include <unistd.h>

#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>
#include <chrono>
#include <cstdlib>
#include <string>
#include <vector>

#include "host/device_lock.h"
#include "runtime/model/stripe.h"
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

namespace {

// The stripe record at LBA 0 of a member image (512-byte blocks).
model::StripeRecord stripe_record(const std::string& image) {
  return model::parse_stripe_record(read_file(image, 0, 512), image);
}

}  // namespace

TEST_CASE("every deploy writes a new set generation; a member saved before one is refused by name", "[deploy][stripe][generation]") {
  skip_without_gpunvme_bin();
  TwoMembers t;
  TempPath saved;
  REQUIRE(t.lay_old_set() == 0);
  const model::StripeRecord first = stripe_record(t.b.path);
  CHECK(first.generation.number == 1);
  REQUIRE(run_shell("cp " + t.b.path + " " + saved.path).rc == 0);  // a backup of member 2
  // The same model onto the same set, the same layout: the set keeps its id, every member moves on.
  REQUIRE(run("deploy " + t.old_model.path + " --device " + t.A + " --device " + t.B).rc == 0);
  const model::StripeRecord a2 = stripe_record(t.a.path), b2 = stripe_record(t.b.path);
  CHECK(a2.geometry.set_id == first.geometry.set_id);
  CHECK(a2.generation.number == 2);
  CHECK(a2.generation.deploy_id != first.generation.deploy_id);
  CHECK(b2.generation == a2.generation);
  // Another model, then the backup put back: ls and verify refuse, naming the member, both generations, the fix.
  REQUIRE(run("deploy " + t.new_model.path + " --device " + t.A + " --device " + t.B).rc == 0);
  REQUIRE(run_shell("cp " + saved.path + " " + t.b.path).rc == 0);
  for (const char* cmd : {"ls", "verify"}) {
    const auto r = run(std::string(cmd) + " --device " + t.A + " --device " + t.B);
    INFO(cmd << ": " << r.out);
    CHECK(r.rc == 1);
    CHECK_THAT(r.out, ContainsSubstring(t.b.path + " namespace 1 (member 2) holds generation 1") &&
                          ContainsSubstring("older than generation 3 that " + t.A + " namespace 1 (member 1)") &&
                          ContainsSubstring("saved before the set's latest deploy") && ContainsSubstring("Re-deploy"));
    CHECK(r.out.find("'new model'") == std::string::npos);
    CHECK(r.out.find("'old model'") == std::string::npos);
  }
  // The member alone names its generation, so a user can tell which backup it is.
  CHECK_THAT(run("ls --device " + t.B).out, ContainsSubstring("is member 2 of striped set") && ContainsSubstring("generation 1"));
  // The fix the message names: a re-deploy onto the whole set, no --force needed.
  const auto redeploy = run("deploy " + t.new_model.path + " --device " + t.A + " --device " + t.B);
  INFO(redeploy.out);
  REQUIRE(redeploy.rc == 0);
  CHECK(stripe_record(t.b.path).generation.number == 4);
  CHECK(run("verify --device " + t.A + " --device " + t.B).rc == 0);
}

TEST_CASE("members of 512- and 4096-byte blocks are refused naming both, with nothing written", "[deploy][stripe][safety]") {
  skip_without_gpunvme_bin();
  TwoMembers t;
  for (const bool over_old : {false, true}) {
    INFO((over_old ? "over a set" : "on empty images"));
    if (over_old) {
      REQUIRE(t.lay_old_set() == 0);
    } else {
      REQUIRE(run_shell("rm -f " + t.a.path + " " + t.b.path + " && truncate -s 16M " + t.a.path + " " + t.b.path).rc == 0);
    }
    const auto before = t.images();
    // It used to die of SIGSEGV here (member handles used after the members were destroyed).
    const auto r = run("deploy " + t.new_model.path + " --device " + t.A + " --device " + t.B + ",lba=4096");
    INFO(r.out);
    CHECK(r.rc == 1);
    CHECK_THAT(r.out, ContainsSubstring("must share one block size") &&
                          ContainsSubstring(t.A + " namespace 1 has 512-byte blocks") &&
                          ContainsSubstring(t.B + ",lba=4096 namespace 1 4096-byte blocks") &&
                          ContainsSubstring("Nothing was written"));
    CHECK(t.unchanged_since(before));
  }
}

TEST_CASE("the size check counts what every member gives the set, and names the set", "[deploy][stripe][fit]") {
  skip_without_gpunvme_bin();
  TwoMembers t;  // old_model: 3.13 MiB
  // Two members of 3 MiB give the set 2 x 2 MiB after their 1 MiB record areas: the model fits (it was
  // refused: the set's logical volume kept a second MiB in front of the model).
  const std::string a = t.A + ",size=3M", b = t.B + ",size=3M";
  const auto fits = run("deploy " + t.old_model.path + " --device " + a + " --device " + b);
  INFO(fits.out);
  CHECK(fits.rc == 0);
  CHECK(run("verify --device " + t.A + " --device " + t.B).rc == 0);
  // Members of 2 MiB give 2 x 1 MiB: refused, naming the set and what each member gives, not "namespace 1".
  TempPath c, d;
  const auto small = run("deploy " + t.old_model.path + " --device emu:" + c.path + ",size=2M --device emu:" + d.path + ",size=2M");
  INFO(small.out);
  CHECK(small.rc == 1);
  CHECK_THAT(small.out, ContainsSubstring("model is 3.13 MiB but the striped set of 2 members (1.00 MiB from each") &&
                            ContainsSubstring("use larger members, or more of them"));
  CHECK(small.out.find("namespace 1 has") == std::string::npos);
}

TEST_CASE("an emu:ram or emu:null member is refused before any member image is created", "[deploy][stripe][safety]") {
  skip_without_gpunvme_bin();
  TwoMembers t;
  for (const std::string& volatile_member : {std::string("emu:ram,size=16M"), std::string("emu:null,size=16M")}) {
    const auto r = run("deploy " + t.new_model.path + " --device " + t.A + ",size=16M --device " + volatile_member);
    INFO(r.out);
    CHECK(r.rc == 1);
    CHECK_THAT(r.out, ContainsSubstring(volatile_member) &&
                          ContainsSubstring(volatile_member.starts_with("emu:ram") ? "gone when it exits" : "stores nothing"));
    CHECK(::access(t.a.path.c_str(), F_OK) != 0);  // no image made for a set that could never be read
  }
}
