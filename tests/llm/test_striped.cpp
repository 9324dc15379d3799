// A model on a striped set (runtime/model/stripe.h) through the engine (CPU executor): written by the
// same writer as llm_make_model (a generated model, deploy_source) onto 2 and 3 emulated namespaces,
// found from the members alone, and decoded with logits equal to the bit to the same model on one
// namespace. Members given wrongly, or one saved before the set was written again, are refused with the fix.
#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "examples/llm/engine/executor.h"
#include "tests/llm/greedy_steps.h"
#include "tests/llm/striped_fixture.h"

using namespace gpunvme;
using Catch::Matchers::ContainsSubstring;
using striped_test::Images;

namespace {

// The generated tiny model (llm_make_model --shape tiny --type q4_k), written onto `devices`.
void write_model(const std::vector<std::string>& devices, uint64_t unit, uint64_t seed = 7) {
  striped_test::write_model(devices, unit, llm::gen::shape_named("tiny"), seed);
}

// Greedy decoding of a few tokens; every step's logits, concatenated.
std::vector<float> decode(const std::vector<std::string>& devices) {
  llm::DeviceSet set(devices);
  const llm::ModelOnDevice m = llm::open_model(set.namespaces());
  CHECK(m.stripe.has_value() == (devices.size() > 1));
  auto ex = llm::make_cpu_executor(m, 16);
  return test::greedy_logits(*ex, 6);
}

std::string open_error(const std::vector<std::string>& devices) {
  try {
    llm::DeviceSet set(devices);
    llm::open_model(set.namespaces());
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("striped set: the engine's logits equal the one-namespace model's to the bit", "[llm][stripe]") {
  const uint32_t members = GENERATE(2u, 3u);
  const uint64_t unit = GENERATE(uint64_t(4096), uint64_t(64 * 1024));
  const std::string lba = GENERATE(std::string("512"), std::string("4096"));
  INFO(members << " members, unit " << unit << ", lba " << lba);
  Images dir;
  const std::string keys = ",size=16M,lba=" + lba;
  write_model({dir.image("one.img", keys)}, 0);
  std::vector<std::string> set;
  for (uint32_t i = 0; i < members; ++i) set.push_back(dir.image("m" + std::to_string(i) + ".img", keys));
  write_model(set, unit);
  const std::vector<float> one = decode({dir.image("one.img", ",lba=" + lba)});  // the emulator's LBA size is a key
  std::vector<std::string> open;
  for (uint32_t i = 0; i < members; ++i) open.push_back(dir.image("m" + std::to_string(i) + ".img", ",lba=" + lba));
  const std::vector<float> striped = decode(open);
  REQUIRE(one.size() == striped.size());
  CHECK(std::memcmp(one.data(), striped.data(), one.size() * sizeof(float)) == 0);
}

TEST_CASE("striped set: members given wrongly are refused, naming the fix", "[llm][stripe]") {
  Images dir;
  const std::string keys = ",size=8M";
  write_model({dir.image("a.img", keys), dir.image("b.img", keys)}, 64 * 1024);
  write_model({dir.image("x.img", keys), dir.image("y.img", keys)}, 64 * 1024);  // another set, same model
  write_model({dir.image("one.img", keys)}, 0);
  const std::string a = dir.image("a.img"), b = dir.image("b.img"), y = dir.image("y.img"), one = dir.image("one.img");
  CHECK(open_error({a, b}).empty());
  CHECK_THAT(open_error({b, a}), ContainsSubstring("is given as member 1 but is member 2") &&
                                     ContainsSubstring("--device " + a + " --device " + b));
  CHECK_THAT(open_error({a}), ContainsSubstring("is member 1 of striped set") && ContainsSubstring("give all 2 members"));
  CHECK_THAT(open_error({b}), ContainsSubstring("is member 2 of striped set"));
  CHECK_THAT(open_error({a, a}), ContainsSubstring("given twice"));
  CHECK_THAT(open_error({a, y}), ContainsSubstring("different sets"));
  CHECK_THAT(open_error({a, b, one}), ContainsSubstring("not a member of a striped set"));
  CHECK_THAT(open_error({one, a}), ContainsSubstring("single-drive deploy"));
  // A stripe unit that is not a multiple of the LBA size is refused before anything is written.
  CHECK_THROWS_WITH(write_model({dir.image("c.img", ",size=8M,lba=4096"), dir.image("d.img", ",size=8M,lba=4096")}, 6144),
                    ContainsSubstring("not a multiple of the 4096-byte LBA size"));
  // A striped write refuses members holding something not ours, unless forced.
  std::FILE* f = std::fopen(dir.path("junk.img").c_str(), "wb");
  REQUIRE(f);
  std::vector<char> junk(8u << 20, 'j');
  std::fwrite(junk.data(), 1, junk.size(), f);
  std::fclose(f);
  CHECK_THROWS_WITH(write_model({dir.image("junk.img"), dir.image("e.img", keys)}, 4096),
                    ContainsSubstring("refusing to make") && ContainsSubstring("--force"));
}

TEST_CASE("striped set: a member saved before a re-write is refused by the engine, naming it", "[llm][stripe]") {
  Images dir;
  const std::vector<std::string> set = {dir.image("a.img", ",size=8M"), dir.image("b.img", ",size=8M")};
  write_model(set, 64 * 1024, 7);
  std::filesystem::copy_file(dir.path("b.img"), dir.path("b.saved"));
  write_model({dir.image("a.img"), dir.image("b.img")}, 64 * 1024, 8);  // another model, the same layout
  const std::vector<float> second = decode({dir.image("a.img"), dir.image("b.img")});
  std::filesystem::rename(dir.path("b.saved"), dir.path("b.img"));
  CHECK_THAT(open_error({dir.image("a.img"), dir.image("b.img")}),
             ContainsSubstring(dir.image("b.img") + " (member 2) holds generation 1") &&
                 ContainsSubstring("older than generation 2 that " + dir.image("a.img") + " (member 1) holds") &&
                 ContainsSubstring("Re-deploy"));
  // Written again, the set opens and decodes as the second model did.
  write_model({dir.image("a.img"), dir.image("b.img")}, 64 * 1024, 8);
  const std::vector<float> again = decode({dir.image("a.img"), dir.image("b.img")});
  REQUIRE(again.size() == second.size());
  CHECK(std::memcmp(again.data(), second.data(), again.size() * sizeof(float)) == 0);
}
