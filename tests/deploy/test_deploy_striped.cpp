// Striped sets (several --device) against a hostile or unlucky user, through the real `gpunvme`
// binary: a new set laid over members that already hold a model (another member order, another
// stripe unit, a one-namespace model) is refused before any byte changes unless --force.
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>
#include <string>
#include <vector>

#include "tests/deploy/cli_run.h"
#include "tests/deploy/deploy_fixture.h"

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
