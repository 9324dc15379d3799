// `gpunvme deploy` onto a striped set without --stripe-unit (through the real binary): a new set gets
// the model's unit (model::default_stripe_unit: 128 KiB for make_model's 2304-byte expert slices, 1 MiB
// for a model without experts), said on stdout; a re-deploy onto a set laid in that order keeps the
// set's unit and id whatever the model's would be, and says so; an explicit other unit is refused as
// before, naming the unit that keeps the set, and re-lays the set with --force.
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>
#include <span>
#include <string>
#include <vector>

#include "host/io_patterns.h"
#include "runtime/model/stripe.h"
#include "tests/deploy/cli_run.h"
#include "tests/deploy/deploy_fixture.h"

using namespace gpunvme;
using namespace deploy_test;
using Catch::Matchers::ContainsSubstring;

namespace {

constexpr uint64_t KiB = 1024, MiB = 1024 * KiB;

// A model without routed experts: token_embd sized to about `bytes`, one layer's attention. F32.
std::vector<uint8_t> make_dense_model(uint64_t bytes, const std::string& name) {
  using namespace gguf_test;
  Spec s;
  s.kvs = {kv_str("general.architecture", "llama"), kv_str("general.name", name), kv_u32("llama.block_count", 1)};
  const uint64_t rows = std::max<uint64_t>(1, bytes / (4 * 1024));
  s.tensors.push_back({"token_embd.weight", {1024, rows}, 0, 4 * 1024 * rows});
  s.tensors.push_back({"blk.0.attn_q.weight", {96, 37}, 0, 4 * 96 * 37});
  auto built = build(s);
  host::fill_pattern(built.bytes.data() + built.data_offset, built.bytes.size() - built.data_offset, 5);
  return built.bytes;
}

// The stripe record at LBA 0 of a member image (512-byte blocks).
model::StripeRecord record_on(const std::string& image) {
  const std::vector<uint8_t> bytes = read_file(image, 0, 512);
  REQUIRE(bytes.size() == 512);
  return model::parse_stripe_record(std::span(bytes).first(512), image);
}

}  // namespace

TEST_CASE("without --stripe-unit a new set gets the model's unit, a laid set keeps its own", "[deploy][stripe][unit]") {
  skip_without_gpunvme_bin();
  TempPath a, b, moe, dense;
  const std::string A = "emu:" + a.path, B = "emu:" + b.path;
  write_file(moe.path, make_model(3u << 20, "moe model", 31));  // 4 experts of 2304-byte slices: 128 KiB
  write_file(dense.path, make_dense_model(3u << 20, "dense model"));  // no experts: 1 MiB

  // A new set of the MoE model: 128 KiB units on both members, said on stdout.
  const auto fresh = run("deploy " + moe.path + " --device " + A + ",size=16M --device " + B + ",size=16M");
  INFO(fresh.out);
  REQUIRE(fresh.rc == 0);
  CHECK_THAT(fresh.out, ContainsSubstring("striped set of 2 members, stripe unit 128K (the model's default)"));
  const model::StripeRecord first = record_on(a.path);
  CHECK(first.geometry.unit_bytes() == 128 * KiB);
  CHECK(record_on(b.path).geometry.unit_bytes() == 128 * KiB);

  // The dense model onto that set, no --stripe-unit, no --force: the set keeps 128 KiB and its id.
  const auto kept = run("deploy " + dense.path + " --device " + A + " --device " + B);
  INFO(kept.out);
  REQUIRE(kept.rc == 0);
  CHECK_THAT(kept.out, ContainsSubstring("stripe unit 128K (the set's, kept; the model's default is 1M: --stripe-unit 1M "
                                         "--force re-lays the set)"));
  const model::StripeRecord second = record_on(b.path);
  CHECK(second.geometry == first.geometry);
  CHECK(second.generation.number == first.generation.number + 1);
  CHECK(run("verify --device " + A + " --device " + B).rc == 0);
  CHECK_THAT(run("ls --device " + A + " --device " + B).out, ContainsSubstring("'dense model'"));

  // --stripe-unit 1M over it: refused as before, nothing written, naming what keeps the set.
  const auto before = std::vector{read_file(a.path), read_file(b.path)};
  const auto other = run("deploy " + moe.path + " --device " + A + " --device " + B + " --stripe-unit 1M");
  INFO(other.out);
  CHECK(other.rc == 1);
  CHECK_THAT(other.out, ContainsSubstring("its stripe unit is 131072 bytes, not 1048576; --stripe-unit 131072, or none, "
                                          "keeps it") &&
                            ContainsSubstring("--force"));
  CHECK((std::vector{read_file(a.path), read_file(b.path)}) == before);
  // ... and with --force it re-lays the set: another set id, 1 MiB units, the model readable.
  const auto relaid = run("deploy " + moe.path + " --device " + A + " --device " + B + " --stripe-unit 1M --force");
  INFO(relaid.out);
  REQUIRE(relaid.rc == 0);
  CHECK_THAT(relaid.out, ContainsSubstring("stripe unit 1M (--stripe-unit)"));
  CHECK(record_on(a.path).geometry.unit_bytes() == 1 * MiB);
  CHECK(record_on(a.path).geometry.set_id != first.geometry.set_id);
  CHECK(run("verify --device " + A + " --device " + B).rc == 0);

  // A new set of the dense model: 1 MiB.
  TempPath c, d;
  const auto dense_set = run("deploy " + dense.path + " --device emu:" + c.path + ",size=16M --device emu:" + d.path + ",size=16M");
  INFO(dense_set.out);
  REQUIRE(dense_set.rc == 0);
  CHECK_THAT(dense_set.out, ContainsSubstring("stripe unit 1M (the model's default)"));
  CHECK(record_on(c.path).geometry.unit_bytes() == 1 * MiB);
}
