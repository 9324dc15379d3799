// The engine on the GPU reading a generated namespace (emu:gen, examples/llm/tools/emu_gen.h): layers
// streamed and experts fetched by GPU-issued reads from the emulator's computed-on-read bytes, paced as a
// pcie4 drive, give the logits of the same model deployed onto an image file, to the bit; so does a
// striped set of two generated members. tiny-moe: 8 experts, 2 routed, none resident; tiny-gpt-oss:
// MXFP4 experts (8, 4 routed) with their bias rows between the expert stacks (the dense part in pieces),
// sliding-window and global layers, finite logits.
#include <catch2/catch_test_macros.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "examples/llm/engine/executor.h"
#include "examples/llm/tools/emu_gen.h"
#include "gpu_rig.h"
#include "llm_fixtures.h"
#include "runtime/deploy/deploy.h"

using namespace gpunvme;

namespace {

// The GPU executor on `gen` (one layer's dense part in VRAM: the rest streams, every expert is fetched)
// against the same model deployed onto an image file.
void check_against_image(const std::string& gen) {
  INFO(gen);
  const auto image = llm::gen::generated_image(gen);
  REQUIRE(image);
  // The same model, as llm_make_model --device writes it, on an image file of the namespace's size.
  char path[] = "/tmp/gpunvme-emu-gen-XXXXXX";
  const int fd = mkstemp(path);
  REQUIRE(fd >= 0);
  close(fd);
  const std::string file = std::string("emu:") + path;
  {
    llm::gen::GeneratedModel model(image->model());
    deploy::Device dev(file + ",size=" + std::to_string(image->bytes()));
    deploy::deploy_source(dev, model, image->record().name);
  }
  test::Opened from_file(file), from_gen(gen + ",drive=pcie4,threads=4");
  uint64_t widest = 0;
  for (const llm::LayerBytes& b : llm::layer_bytes(from_gen.m)) widest = std::max(widest, b.dense);
  llm::GpuExecOptions o;
  o.vram_budget = widest + test::run_kv_bytes(from_gen.m);  // one layer's dense part (and the KV cache): the rest streams, every expert is fetched
  llm::ExecStats sf, sg;
  const auto want = test::run(*from_file.ctrl, from_file.m, o, &sf);
  const auto got = test::run(*from_gen.ctrl, from_gen.m, o, &sg);
  CHECK(sg.streamed_layers > 0);
  CHECK(sg.has_experts);
  CHECK(sg.experts.faults > 0);
  CHECK(got == want);
  for (const std::vector<float>& step : got)
    CHECK(std::all_of(step.begin(), step.end(), [](float x) { return std::isfinite(x); }));
  std::remove(path);
}

}  // namespace

TEST_CASE("llm on emu:gen: streamed layers and fetched experts give the image's logits, to the bit") {
  REQUIRE_GPU();
  check_against_image("emu:gen,shape=tiny-moe,type=q4_k");
  check_against_image("emu:gen,shape=tiny-gpt-oss,type=mxfp4");
}
