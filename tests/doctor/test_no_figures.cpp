// Numbers that cannot lie, on the CPU: layer_stream must not print a speed for a run whose bytes did
// not verify. A model is deployed onto an emulated image, then one byte of a layer changes in the
// file layer_stream checks against: the device's bytes no longer match, and the mode must fail
// with the mismatch and no GB/s (before the fix it printed the figures next to "MISMATCH").
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <cstdlib>
#include <regex>
#include <string>

#include "tests/cli_run.h"
#include "tests/deploy/deploy_fixture.h"

using namespace deploy_test;
using Catch::Matchers::ContainsSubstring;

namespace {

cli_test::Run layer_stream(const std::string& args) {
  return cli_test::run_program(std::getenv("GPUNVME_LAYER_STREAM"), args);
}

}  // namespace

TEST_CASE("layer_stream prints no figure for a mode whose bytes did not verify", "[bench][no-figures]") {
  if (!std::getenv("GPUNVME_BIN") || !std::getenv("GPUNVME_LAYER_STREAM"))
    SKIP("GPUNVME_BIN / GPUNVME_LAYER_STREAM are not set (meson sets them)");
  TempPath model_path, img;
  const auto model = make_model(1u << 20, "no-figures model", 9);
  write_file(model_path.path, model);
  const std::string dev = "emu:" + img.path + ",size=8M,lba=4096";
  auto r = cli_test::run_gpunvme("deploy " + model_path.path + " --device " + dev);
  INFO(r.out);
  REQUIRE(r.rc == 0);
  const std::string args = "--modes gpunvme-cpu --drive none --gguf " + model_path.path + " --deployed --device " + dev;
  const std::regex figure("gpunvme-cpu +(read +)?[0-9]");
  r = layer_stream(args);
  INFO(r.out);
  REQUIRE(r.rc == 0);  // the same run on unchanged bytes prints its figures
  CHECK(std::regex_search(r.out, figure));

  // The last layer's last tensor (blk.2.ffn_down_exps, 9216 bytes) ends where output_norm (384 B) and
  // output (4992 B) begin: flip a byte 100 bytes before that.
  const uint64_t at = model.size() - 384 - 4992 - 100;
  const uint8_t flipped = uint8_t(model[at] ^ 0x5A);
  pwrite_file(model_path.path, at, &flipped, 1);
  r = layer_stream(args);
  INFO(r.out);
  CHECK(r.rc == 1);
  CHECK_THAT(r.out, ContainsSubstring("bytes did not verify (no figures)"));
  CHECK_THAT(r.out, ContainsSubstring("layer 2: checksum"));
  CHECK_FALSE(std::regex_search(r.out, figure));
}
