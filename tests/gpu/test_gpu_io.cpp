// GPU-initiated I/O against the emulated controller: data written through the CPU path is read back
// by GPU kernels (the GPU writes the SQEs, rings the doorbells, reaps the CQEs) and every byte is
// compared on the GPU. Reads go through the runtime's GPU path (stream::GpuSubmitter with command
// plans, the GPU expert fetcher, a ticket kernel of our own) or the one-thread device API.
// Skips, with the reason, where no CUDA GPU is present.
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "driver/commands.h"
#include "driver/status.h"
#include "gpu_check.h"
#include "gpu_reads.h"
#include "gpu_rig.h"
#include "host/cpu_io.h"
#include "host/emulator/controller.h"
#include "host/error.h"
#include "host/open_device.h"
#include "runtime/stream/gpu_expert_fetcher.h"
#include "runtime/stream/gpu_submitter.h"
#include "stream_check.h"

using namespace gpunvme;
using Catch::Matchers::ContainsSubstring;
using test::BlockRead;
using test::GpuRig;
using test::VerifySpan;
using test::gpu_memory;

namespace {

// Per queue of the submitter, from its device state (counters survive the kernels).
uint64_t total_completed(stream::GpuSubmitter& gpu) {
  uint64_t n = 0;
  for (const device::DeviceQueue& q : gpu.queues().snapshot()) n += q.completed;
  return n;
}

// One layer of `experts` one-part experts, expert e at namespace byte e * expert_bytes.
stream::ExpertCatalog one_part_experts(const GpuRig& rig, uint32_t experts, uint64_t expert_bytes) {
  stream::ExpertCatalog table;
  table.n_layers = 1;
  table.n_experts = experts;
  for (uint32_t e = 0; e < experts; ++e)
    table.parts.push_back({{model::Projection::kGate, model::byte_range_to_extent(e * expert_bytes, expert_bytes, rig.lba, 0)}});
  return table;
}

// The gather tests' set-up: a namespace of `experts` one-part experts of `expert_bytes` each, written
// with pattern `seed`, and their catalog.
struct ExpertRig {
  ExpertRig(uint64_t seed, uint64_t expert_bytes, uint32_t experts)
      : rig("emu:ram,size=64M,threads=2", 8, 128, true, {}, false), seed(seed), expert_bytes(expert_bytes), experts(experts) {
    rig.write_pattern(0, experts * expert_bytes, seed);
    table = one_part_experts(rig, experts, expert_bytes);
  }
  GpuRig rig;
  uint64_t seed, expert_bytes;
  uint32_t experts;
  stream::ExpertCatalog table;
};

// A fetch of routing ids `picked` (one_part_experts' layout, pattern `seed`): the experts `distinct`
// (picked's, in first-seen order), each one part holding its bytes, and every id's selection naming its
// expert.
void check_gathered(const stream::GpuExpertFetcher& f, const std::vector<stream::FetchedExpert>& got,
                    const std::vector<uint32_t>& picked, const std::vector<uint32_t>& distinct, uint64_t expert_bytes,
                    uint64_t seed) {
  REQUIRE(got.size() == distinct.size());
  std::vector<VerifySpan> spans;
  for (size_t d = 0; d < got.size(); ++d) {
    CHECK(got[d].expert == distinct[d]);
    REQUIRE(got[d].parts.size() == 1);
    CHECK(got[d].parts[0].bytes == expert_bytes);
    spans.push_back(VerifySpan{got[d].parts[0].offset, got[d].expert * expert_bytes, expert_bytes});
  }
  CHECK(test::gpu_count_mismatches(static_cast<const uint8_t*>(f.scratchpad().device()), spans, seed) == 0);
  std::vector<uint32_t> selection(picked.size());
  REQUIRE(cudaMemcpy(selection.data(), f.device_selection(), selection.size() * 4, cudaMemcpyDeviceToHost) ==
          cudaSuccess);
  for (size_t i = 0; i < picked.size(); ++i) {
    REQUIRE(selection[i] < got.size());
    CHECK(got[selection[i]].expert == picked[i]);
  }
}

}  // namespace

TEST_CASE("GPU reads a transformer layer written by the CPU path; every byte checked on the GPU", "[gpu][read]") {
  REQUIRE_GPU();
  GpuRig rig("emu:ram,size=64M,threads=2", 5, 256, true, {}, false);
  const uint64_t seed = 11;
  rig.write_pattern(0, 48ull << 20, seed);
  // Tensors of very different sizes, some larger than MDTS (1 MiB), some a single block, destinations
  // not page aligned (8-byte aligned: PRP1 carries an offset, PRP2 a list or a second page).
  const std::vector<std::pair<uint64_t, uint64_t>> tensors = {  // (ns offset, bytes)
      {0, 4096}, {1 << 20, 128 << 10}, {3 << 20, 5 << 20}, {9 << 20, 512}, {10 << 20, 7 * 512},
      {11 << 20, (2 << 20) + 1536}, {20 << 20, 12 << 20}, {40 << 20, 8192}, {41 << 20, 3 * 4096 + 512}};
  std::vector<BlockRead> ext;
  std::vector<VerifySpan> spans;
  uint64_t dst = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    dst += (i % 3) * 8 + 8;  // 8-byte aligned, rarely page aligned
    ext.push_back(BlockRead{tensors[i].first / rig.lba, uint32_t(tensors[i].second / rig.lba), dst});
    spans.push_back(VerifySpan{dst, tensors[i].first, tensors[i].second});
    dst += tensors[i].second;
  }
  host::DmaBuffer out = rig.gpu_buffer(dst + 4096);
  // Four queues, and (below) one queue: the whole layer on one warp.
  stream::GpuSubmitter four(*rig.ctrl, {rig.raw.begin(), rig.raw.begin() + 4}, 1);
  stream::GpuSubmitter one(*rig.ctrl, {rig.raw[4]}, 1);
  const test::ReadPlan p = test::plan_reads(rig, four, out, ext);
  CHECK(p.plan.commands.size() > ext.size());  // the large tensors were split by MDTS
  CHECK_NOTHROW(test::run_plan(four, p));
  CHECK(total_completed(four) == p.plan.commands.size());
  CHECK(test::gpu_count_mismatches(static_cast<const uint8_t*>(out.device()), spans, seed) == 0);
  // Same data through one queue matches too.
  std::memset(out.host(), 0, out.size());
  const test::ReadPlan p1 = test::plan_reads(rig, one, out, ext);
  CHECK_NOTHROW(test::run_plan(one, p1));
  CHECK(total_completed(one) == p1.plan.commands.size());
  CHECK(test::gpu_count_mismatches(static_cast<const uint8_t*>(out.device()), spans, seed) == 0);
}

TEST_CASE("GPU gathers MoE experts chosen by indices that live in GPU memory", "[gpu][gather]") {
  REQUIRE_GPU();
  ExpertRig x(12, 384 << 10, 64);
  GpuRig& rig = x.rig;
  const uint64_t seed = x.seed, expert_bytes = x.expert_bytes;
  const uint32_t experts = x.experts;
  const stream::ExpertCatalog& table = x.table;
  const std::vector<uint32_t> picked = {5, 63, 0, 17, 17, 42, 8, 31, 2, 60};  // a router's choice, repeats allowed
  const std::vector<uint32_t> distinct = {5, 63, 0, 17, 42, 8, 31, 2, 60};     // first-seen order
  test::DeviceBlob didx(picked.data(), picked.size() * 4);
  stream::GpuSubmitter gpu(*rig.ctrl, rig.raw, 1);
  stream::GpuExpertFetcher fetcher(*rig.ctrl, gpu, table, {.max_experts_per_fetch = uint32_t(distinct.size())});
  fetcher.fetch(0, didx.as<uint32_t>(), uint32_t(picked.size()), nullptr);
  // Selection i (a repeat too) names the distinct expert that holds table[picked[i]].
  check_gathered(fetcher, fetcher.wait(), picked, distinct, expert_bytes, seed);

  // An index past the table is refused before any command is sent.
  const std::vector<uint32_t> wrong = {1, experts};
  test::DeviceBlob dwrong(wrong.data(), wrong.size() * 4);
  const uint64_t read_before = fetcher.metrics().bytes_read;
  const uint64_t completed_before = gpu.commands_completed();
  fetcher.fetch(0, dwrong.as<uint32_t>(), 2, nullptr);
  CHECK_THROWS(fetcher.wait());
  CHECK(fetcher.metrics().bytes_read == read_before);
  CHECK(gpu.commands_completed() == completed_before);
}

// The place kernel selects 32 routing ids at a time (a warp): a batched pass's ids span several groups of
// 32, and an id first seen in one group repeats in later ones. The distinct experts are still in
// first-seen order, every id's selection names its expert, and of several errors the first in id order
// is the one reported (as a scan in id order would stop there).
TEST_CASE("GPU expert selection across groups of 32 routing ids, and the first error in id order", "[gpu][gather]") {
  REQUIRE_GPU();
  ExpertRig x(14, 64 << 10, 64);
  GpuRig& rig = x.rig;
  const uint64_t seed = x.seed, expert_bytes = x.expert_bytes;
  const uint32_t experts = x.experts;
  const stream::ExpertCatalog& table = x.table;
  std::mt19937 rng(5);
  std::vector<uint32_t> picked(100);
  for (uint32_t& id : picked) id = rng() % 40;  // 100 ids over 40 experts: repeats within and across groups
  picked[70] = picked[3];                        // group 2 repeats an id first seen in group 0
  std::vector<uint32_t> distinct;
  for (uint32_t id : picked)
    if (std::find(distinct.begin(), distinct.end(), id) == distinct.end()) distinct.push_back(id);
  REQUIRE(distinct.size() > 32);
  stream::GpuSubmitter gpu(*rig.ctrl, rig.raw, 1);
  auto fetcher = [&](uint32_t max) {
    return std::make_unique<stream::GpuExpertFetcher>(*rig.ctrl, gpu, table,
                                                      stream::FetcherOptions{.max_experts_per_fetch = max});
  };
  auto f = fetcher(uint32_t(distinct.size()));
  test::DeviceBlob dids(picked.data(), picked.size() * 4);
  f->fetch(0, dids.as<uint32_t>(), uint32_t(picked.size()), nullptr);
  check_gathered(*f, f->wait(), picked, distinct, expert_bytes, seed);

  // Errors: ids 0, 1, ..., 44, then 0..4 again, one of them replaced by an id past the table. With 42 per
  // fetch the bad id at position 40 comes before the one-too-many expert (id 43 at position 43); with 40
  // per fetch the one-too-many (id 40 at position 40) comes before the bad id at 47.
  auto first_error = [&](uint32_t max, uint32_t bad_at) {
    std::vector<uint32_t> ids(50);
    for (uint32_t i = 0; i < ids.size(); ++i) ids[i] = i % 45;
    ids[bad_at] = experts + 3;
    test::DeviceBlob d(ids.data(), ids.size() * 4);
    auto g = fetcher(max);
    g->fetch(0, d.as<uint32_t>(), uint32_t(ids.size()), nullptr);
    try {
      g->wait();
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const std::string bad_first = first_error(42, 40);
  CHECK_THAT(bad_first, Catch::Matchers::ContainsSubstring("routing id 67 of layer 0 is not an expert"));
  const std::string many_first = first_error(40, 47);
  CHECK_THAT(many_first, Catch::Matchers::ContainsSubstring("routing id 40 of layer 0 is one distinct expert more"));
}

TEST_CASE("many queues at once: 48 warps each own a queue, 8 controller threads", "[gpu][queues]") {
  REQUIRE_GPU();
  GpuRig rig("emu:ram,size=128M,threads=8,poll=spin", 48, 512, true, {}, false);
  const uint64_t seed = 13;
  const uint64_t bytes = 96ull << 20;
  rig.write_pattern(0, bytes, seed);
  // 6000 random 4 KiB reads plus some 64 KiB ones, spread over all queues.
  std::mt19937_64 rng(7);
  std::vector<BlockRead> ext;
  std::vector<VerifySpan> spans;
  uint64_t dst = 0;
  for (uint32_t i = 0; i < 6000; ++i) {
    const uint64_t len = (i % 10 == 0) ? (64 << 10) : 4096;
    const uint64_t off = (rng() % ((bytes - len) / 4096)) * 4096;
    ext.push_back(BlockRead{off / rig.lba, uint32_t(len / rig.lba), dst});
    spans.push_back(VerifySpan{dst, off, len});
    dst += len;
  }
  host::DmaBuffer out = rig.gpu_buffer(dst);
  stream::GpuSubmitter gpu(*rig.ctrl, rig.raw, 1);
  const test::ReadPlan p = test::plan_reads(rig, gpu, out, ext);
  CHECK_NOTHROW(test::run_plan(gpu, p));
  const std::vector<device::DeviceQueue> queues = gpu.queues().snapshot();
  uint32_t busy_queues = 0;
  for (const device::DeviceQueue& q : queues) busy_queues += q.completed > 0;
  CHECK(busy_queues == 48);
  CHECK(total_completed(gpu) == p.plan.commands.size());
  CHECK(test::gpu_count_mismatches(static_cast<const uint8_t*>(out.device()), spans, seed) == 0);
  for (const device::DeviceQueue& q : queues) {
    CHECK(q.in_flight == 0);
    CHECK(q.owner == device::kNoOwner);
  }
}

TEST_CASE("every ring and the command-id table wrap many times", "[gpu][wrap]") {
  REQUIRE_GPU();
  for (const uint32_t entries : {2u, 3u, 8u, 64u}) {
    DYNAMIC_SECTION("queues of " << entries << " entries") {
      GpuRig rig("emu:ram,size=16M,threads=2", 3, entries, true, {}, false);
      const uint64_t seed = 14 + entries;
      rig.write_pattern(0, 8 << 20, seed);
      std::vector<BlockRead> ext;
      std::vector<VerifySpan> spans;
      const uint32_t n = 1500;
      for (uint32_t i = 0; i < n; ++i) {
        const uint64_t off = uint64_t((i * 37) % 2000) * 4096;
        ext.push_back(BlockRead{off / rig.lba, 4096 / rig.lba, uint64_t(i) * 4096});
        spans.push_back(VerifySpan{uint64_t(i) * 4096, off, 4096});
      }
      host::DmaBuffer out = rig.gpu_buffer(uint64_t(n) * 4096);
      stream::GpuSubmitter gpu(*rig.ctrl, rig.raw, 1);
      const test::ReadPlan p = test::plan_reads(rig, gpu, out, ext);
      REQUIRE(p.plan.commands.size() == n);
      // Twice: the second run starts from wrapped ring, phase and id state left by the first.
      for (int pass = 0; pass < 2; ++pass) {
        std::memset(out.host(), 0, out.size());
        CHECK_NOTHROW(test::run_plan(gpu, p));
        CHECK(test::gpu_count_mismatches(static_cast<const uint8_t*>(out.device()), spans, seed) == 0);
      }
      for (const device::DeviceQueue& q : gpu.queues().snapshot()) {
        CHECK(q.completed == 1000);                 // 2 x 500 per queue
        CHECK(q.submitted >= 3 * entries);  // 1000 commands through `entries` slots: many wraps
        CHECK(q.sq_ring.tail == 1000 % entries);
        CHECK(q.cq_ring.head == 1000 % entries);
        CHECK(q.cq_ring.phase == ((1000 / entries) % 2 == 0 ? 1u : 0u));
        CHECK(q.in_flight == 0);
      }
    }
  }
}

TEST_CASE("the device API: gpunvme_sq_submit_read / gpunvme_cq_poll_completion from one GPU thread", "[gpu][capi]") {
  REQUIRE_GPU();
  GpuRig rig("emu:ram,size=16M,threads=1", 1, 32);
  const uint64_t seed = 15;
  rig.write_pattern(0, 8 << 20, seed);
  const uint32_t n = 700;
  std::vector<uint64_t> lbas;
  std::vector<VerifySpan> spans;
  const uint64_t stride = 8192;  // 8 KiB reads: PRP1 and PRP2 = the second page
  for (uint32_t i = 0; i < n; ++i) {
    const uint64_t off = uint64_t((i * 13) % 1000) * 8192;
    lbas.push_back(off / rig.lba);
    spans.push_back(VerifySpan{i * stride, off, 8192});
  }
  host::DmaBuffer out = rig.gpu_buffer(n * stride + 8192);
  const test::CApiResult r = test::gpu_c_api_reads(rig.set->device(0), lbas, 8192 / rig.lba, rig.lba, out.bus(0),
                                                   stride, 16, 1'000'000'000);
  CHECK(r.submitted == n);
  CHECK(r.succeeded == n);
  CHECK(r.failed == 0);
  CHECK(r.timed_out == 0);
  CHECK(r.protocol_errors == 0);
  CHECK(test::gpu_count_mismatches(static_cast<const uint8_t*>(out.device()), spans, seed) == 0);
}

TEST_CASE("an injected error status reaches the GPU with its SCT, SC and DNR", "[gpu][faults]") {
  REQUIRE_GPU();
  GpuRig rig("emu:ram,size=16M,threads=1", 1, 64, true, {}, false);
  rig.write_pattern(0, 4 << 20, 16);
  emu::Fault f;
  f.kind = emu::FaultKind::kErrorStatus;
  f.qid = 2;  // the GPU queue
  f.opcode = nvme::nvm_op::kRead;
  f.nth = 37;
  f.sct = nvme::sct::kMediaError;
  f.sc = nvme::sc::kUnrecoveredReadError;
  f.dnr = true;
  const int id = rig.emu->faults().add(f);
  std::vector<BlockRead> ext;
  for (uint32_t i = 0; i < 100; ++i) ext.push_back(BlockRead{uint64_t(i) * 8, 8, uint64_t(i) * 4096});
  host::DmaBuffer out = rig.gpu_buffer(100 * 4096);
  stream::GpuSubmitter gpu(*rig.ctrl, rig.raw, 1);
  const test::ReadPlan p = test::plan_reads(rig, gpu, out, ext);
  REQUIRE(p.plan.commands.size() == 100);
  const std::optional<Error> e = test::failure_of(gpu, p);
  REQUIRE(e.has_value());
  INFO(e->what());
  CHECK(e->kind() == ErrorKind::kCommandFailed);
  REQUIRE(e->has_status());
  CHECK(e->status().type() == nvme::sct::kMediaError);
  CHECK(e->status().code() == nvme::sc::kUnrecoveredReadError);
  CHECK(e->status().dnr());
  // The 37th read is read 36 (LBA 288): the ticket names it, and all 100 completed, one with an error.
  CHECK_THAT(e->what(), ContainsSubstring("first failed command #36: LBA 288..295"));
  CHECK_THAT(e->what(), ContainsSubstring("100 of 100 commands completed, 1 with an error"));
  CHECK_THAT(e->what(), !ContainsSubstring("queue faults"));
  CHECK(rig.emu->faults().fired(id) == 1);
  const device::DeviceQueue q = gpu.queues().snapshot()[0];
  CHECK(q.completed == 100);
  CHECK(q.failed == 1);
  CHECK(q.faults == 0);

  // The C API reports the same status for a single failing command.
  GpuRig rig2("emu:ram,size=16M,threads=1", 1, 16);
  f.nth = 2;
  rig2.emu->faults().add(f);
  host::DmaBuffer out2 = rig2.gpu_buffer(8 * 4096);
  const test::CApiResult c = test::gpu_c_api_reads(rig2.set->device(0), {0, 8, 16, 24}, 8, rig2.lba, out2.bus(0), 4096,
                                                   4, 1'000'000'000);
  CHECK(c.succeeded == 3);
  CHECK(c.failed == 1);
  CHECK(nvme::Status{c.first_status}.code() == nvme::sc::kUnrecoveredReadError);
  CHECK(nvme::Status{c.first_status}.type() == nvme::sct::kMediaError);
}

TEST_CASE("a completion that never comes ends the kernel with timed_out, not a hang", "[gpu][faults][timeout]") {
  REQUIRE_GPU();
  GpuRig rig("emu:ram,size=16M,threads=1", 2, 64, true, {}, false);
  emu::Fault f;
  f.kind = emu::FaultKind::kDropCompletion;
  f.qid = 3;  // the second GPU queue
  f.nth = 10;
  rig.emu->faults().add(f);
  std::vector<BlockRead> ext;
  for (uint32_t i = 0; i < 200; ++i) ext.push_back(BlockRead{uint64_t(i) * 8, 8, uint64_t(i) * 4096});
  host::DmaBuffer out = rig.gpu_buffer(200 * 4096);
  stream::GpuSubmitter gpu(*rig.ctrl, rig.raw, 1, {.timeout_ns = 100'000'000});  // 100 ms
  const test::ReadPlan p = test::plan_reads(rig, gpu, out, ext);
  const auto t0 = std::chrono::steady_clock::now();
  const std::optional<Error> e = test::failure_of(gpu, p);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  REQUIRE(e.has_value());
  INFO(e->what());
  CHECK(e->kind() == ErrorKind::kCommandFailed);
  CHECK_THAT(e->what(), ContainsSubstring("timed out"));
  const std::vector<device::DeviceQueue> q = gpu.queues().snapshot();
  CHECK(q[0].faults == 0);  // the healthy queue finished its share
  CHECK(q[0].completed == 100);
  CHECK((q[1].faults & device::fault::kTimedOut) != 0);
  CHECK(q[1].completed == 99);
  CHECK(secs < 5.0);

  // The C API: one command whose completion is dropped.
  GpuRig rig2("emu:ram,size=16M,threads=1", 1, 16);
  f.qid = 2;
  f.nth = 1;
  rig2.emu->faults().add(f);
  host::DmaBuffer out2 = rig2.gpu_buffer(4096);
  const test::CApiResult c = test::gpu_c_api_reads(rig2.set->device(0), {0}, 8, rig2.lba, out2.bus(0), 4096, 1,
                                                   50'000'000);
  CHECK(c.timed_out == 1);
  CHECK(c.succeeded == 0);
  CHECK(c.elapsed_ns >= 50'000'000);
  CHECK(c.elapsed_ns < 2'000'000'000);
}

TEST_CASE("a completion with a wrong command id is detected on the GPU", "[gpu][faults][cid]") {
  REQUIRE_GPU();
  GpuRig rig("emu:ram,size=16M,threads=1", 1, 64, true, {}, false);
  emu::Fault f;
  f.kind = emu::FaultKind::kWrongCid;
  f.qid = 2;
  f.nth = 20;
  f.cid_xor = 0x0001;  // names a neighbour id: in flight or not, the duplicate/unknown check must catch it
  rig.emu->faults().add(f);
  std::vector<BlockRead> ext;
  for (uint32_t i = 0; i < 100; ++i) ext.push_back(BlockRead{uint64_t(i) * 8, 8, uint64_t(i) * 4096});
  host::DmaBuffer out = rig.gpu_buffer(100 * 4096);
  stream::GpuSubmitter gpu(*rig.ctrl, rig.raw, 1, {.timeout_ns = 200'000'000});
  const test::ReadPlan p = test::plan_reads(rig, gpu, out, ext);
  CHECK(test::failure_of(gpu, p).has_value());  // the ticket fails
  CHECK((gpu.queues().snapshot()[0].faults & (device::fault::kWrongCid | device::fault::kTimedOut)) != 0);
}

TEST_CASE("stress: 10^8 null-namespace commands on 64 queues, none lost or duplicated", "[gpu][stress]") {
  REQUIRE_GPU();
  GpuRig rig("emu:null,size=1T,queues=64,threads=8,poll=spin", 64, 4096, false, {}, false);
  const uint64_t before = rig.emu->stats().io_commands;
  host::DmaBuffer page = rig.gpu_buffer(4096);
  device::DeviceBufferMap map(page, rig.ctrl->page_bytes());
  stream::GpuSubmitter gpu(*rig.ctrl, rig.raw, 1, {.max_command_bytes = 4096});
  const uint64_t per_queue = 1'562'500;  // x 64 = 10^8
  // 10^8 reads are no template list: the ticket's kernel builds them (GpuSubmitter::issue_kernel).
  const uint64_t t = test::issue_generated_reads(gpu, 64 * per_queue, 4096 / rig.lba,
                                                 rig.ctrl->namespace_info(1).blocks, map.get());
  stream::GpuTicketTimes times;
  CHECK_NOTHROW(gpu.wait(t, &times));  // every command completed, none failed, no queue fault
  CHECK(gpu.commands_completed() == 100'000'000);
  CHECK(rig.emu->stats().io_commands - before == 100'000'000);
  uint64_t submitted = 0, completed = 0;
  for (const device::DeviceQueue& q : gpu.queues().snapshot()) {
    CHECK(q.in_flight == 0);
    CHECK(q.submitted == per_queue);
    CHECK(q.completed == per_queue);
    CHECK(q.failed == 0);
    submitted += q.submitted;
    completed += q.completed;
    CHECK(q.faults == 0);
  }
  CHECK(submitted == 100'000'000);
  CHECK(completed == 100'000'000);
  const double seconds = times.ms() / 1e3;
  WARN("stress: " << completed << " commands in " << seconds << " s = " << completed / seconds / 1e6
                  << " M cmds/s (64 queues, 8 controller threads)");
}
