// The engine's NVMe tier on a striped set (runtime/model/stripe.h) on the GPU: every layer streamed
// by GPU-issued reads from 2 and 4 emulated controllers at once (one GPU submitter and I/O stream per
// member, runtime/stream/striped_submitter.h) gives logits equal to the bit to the same model streamed
// from one namespace, over several tokens (every slot refilled across token boundaries), and reads
// the same bytes. Models from the generator, deployed as llm_make_model does.
#include <catch2/catch_test_macros.hpp>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include <cuda_runtime.h>

#include <random>

#include "examples/llm/engine/executor.h"
#include "gpu_rig.h"
#include "runtime/io/cpu_block_io.h"
#include "runtime/model/stripe.h"
#include "runtime/stream/gpu_submitter.h"
#include "runtime/stream/layer_streamer.h"
#include "tests/llm/striped_fixture.h"

using namespace gpunvme;

namespace {

using striped_test::Images;

// A 3-layer model of its own shape (streamed layers large enough to span several stripe units).
void write_model(const std::vector<std::string>& devices, uint64_t unit) {
  striped_test::write_model(devices, unit, llm::gen::Shape{"striped-test", 3, 256, 4, 2, 512, 512, 512, 0, 0, 10000.0f}, 5);
}

std::vector<float> run(const std::vector<std::string>& devices, uint32_t slots, llm::ExecStats* stats) {
  llm::DeviceSet set(devices);
  const llm::ModelOnDevice m = llm::open_model(set.namespaces());
  REQUIRE(m.stripe.has_value() == (devices.size() > 1));
  llm::GpuExecOptions o;
  o.resident_layers = 0;  // every layer streamed, every token
  o.slots = slots;
  const std::vector<host::Controller*> ctrls = set.controllers();
  auto ex = llm::make_gpu_executor(ctrls, m, 8, o);
  std::vector<float> all;
  uint32_t tok = 3;
  for (uint32_t pos = 0; pos < 6; ++pos) {
    const std::span<const float> logits = ex->step(tok, pos);
    all.insert(all.end(), logits.begin(), logits.end());
    tok = uint32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
  }
  ex->finish();
  *stats = ex->stats();
  return all;
}

}  // namespace

TEST_CASE("llm striped: 2 and 4 members streamed by the GPU give the one-namespace logits, to the bit", "[stripe]") {
  REQUIRE_GPU();
  Images img;
  write_model(img.devices("one", 1, ",size=32M"), 0);
  llm::ExecStats one_stats;
  const std::vector<float> one = run(img.devices("one", 1), 2, &one_stats);
  REQUIRE(one_stats.streamed_layers == 3);
  for (const uint32_t n : {2u, 4u})
    for (const uint64_t unit : {uint64_t(4096), uint64_t(64 * 1024)})
      for (const uint32_t slots : {1u, 2u, 3u}) {
        INFO(n << " members, unit " << unit << ", " << slots << " slots");
        const std::string prefix = "s" + std::to_string(n) + "u" + std::to_string(unit) + "-";
        if (slots == 1) write_model(img.devices(prefix, n, ",size=16M"), unit);
        llm::ExecStats st;
        const std::vector<float> got = run(img.devices(prefix, n), slots, &st);
        REQUIRE(got.size() == one.size());
        CHECK(std::memcmp(got.data(), one.data(), one.size() * sizeof(float)) == 0);
        CHECK(st.streamed_layers == 3);
        CHECK(st.bytes_per_step == one_stats.bytes_per_step);
        CHECK(st.streamed_bytes >= st.bytes_per_step * 6);
      }
}

// The streamer alone, GPU-ordered, on 3 members: one GPU submitter and stream per member, extents at
// odd byte offsets crossing stripe units, two slots refilled in turn; every piece's bytes checked.
TEST_CASE("striped streamer on the GPU: every member's reads land in the slot where one drive's would", "[stripe]") {
  REQUIRE_GPU();
  constexpr uint32_t kMembers = 3, kLba = 512, kLayers = 5;
  std::vector<std::unique_ptr<test::GpuRig>> rigs;
  std::vector<model::BlockIo> ios;
  for (uint32_t i = 0; i < kMembers; ++i) {
    rigs.push_back(std::make_unique<test::GpuRig>("emu:ram,size=16M,lba=512", 2, 64, true, device::DeviceQueueOptions{}, false));
    ios.push_back(model::cpu_block_io(*rigs[i]->ctrl, *rigs[i]->cpu, "member " + std::to_string(i)));
  }
  model::write_stripe_records(ios, model::make_stripe_geometry(kMembers, kLba, rigs[0]->ctrl->namespace_info(1).blocks, 8192, 5), {1, 5});
  const model::StripeSet set(ios);
  std::vector<uint8_t> data(4u << 20);
  std::mt19937 rng(3);
  for (auto& b : data) b = uint8_t(rng());
  set.logical().write(0, uint32_t(data.size() / kLba), data.data());
  std::vector<std::vector<model::Extent>> layers;
  for (uint64_t l = 0; l < kLayers; ++l)
    layers.push_back({model::byte_range_to_extent(l * 700000 + 13, 300001, kLba, 0),
                      model::byte_range_to_extent(l * 700000 + 400007, 123457, kLba, 0)});
  std::vector<std::unique_ptr<stream::GpuSubmitter>> subs;
  std::vector<cudaStream_t> streams(kMembers + 1, nullptr);  // [0]: io and member 0, [k]: member k, [kMembers]: compute
  for (auto& st : streams) REQUIRE(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking) == cudaSuccess);
  std::vector<stream::StripedMember> members;
  for (uint32_t i = 0; i < kMembers; ++i) {
    subs.push_back(std::make_unique<stream::GpuSubmitter>(*rigs[i]->ctrl, rigs[i]->raw, 1));
    members.push_back({rigs[i]->ctrl.get(), subs.back().get(), i ? reinterpret_cast<stream::cuda_stream_t>(streams[i]) : nullptr});
  }
  auto cs = [](cudaStream_t s) { return reinterpret_cast<stream::cuda_stream_t>(s); };
  const cudaStream_t io = streams[0], compute = streams[kMembers];
  {
    stream::LayerStreamer s(members, set.geometry(), layers, {.slots = 2});
    std::vector<uint8_t> got(s.slot_bytes());
    for (uint32_t round = 0; round < 2; ++round) {
      s.begin(0, 0, cs(io));
      for (uint32_t l = 0; l < kLayers; ++l) {
        if (l + 1 < kLayers) s.begin(l + 1, (l + 1) % 2, cs(io));
        const stream::SlotView v = s.wait(l % 2, cs(compute));
        REQUIRE(v.device != nullptr);
        REQUIRE(cudaMemcpyAsync(got.data(), v.device, v.bytes, cudaMemcpyDefault, compute) == cudaSuccess);
        REQUIRE(cudaStreamSynchronize(compute) == cudaSuccess);
        INFO("round " << round << " layer " << l);
        for (const plan::Piece& p : v.plan->pieces) {
          const uint64_t at = p.source.first_lba * kLba + p.source.byte_in_first;
          CHECK(std::memcmp(got.data() + p.data_offset, data.data() + at, p.source.byte_length) == 0);
        }
        s.release(l % 2, cs(compute));
      }
      s.sync();
    }
    CHECK(s.stats().layers == 2 * kLayers);
  }
  subs.clear();
  for (auto& st : streams) cudaStreamDestroy(st);
}
