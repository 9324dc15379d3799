// GPU-initiated I/O against the emulated controller: data written through the CPU path is read back
// by GPU kernels (the GPU writes the SQEs, rings the doorbells, reaps the CQEs) and every byte is
// compared on the GPU. Skips, with the reason, where no CUDA GPU is present.
#include <catch2/catch_test_macros.hpp>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "device/read.h"
#include "driver/commands.h"
#include "driver/status.h"
#include "gpu_check.h"
#include "gpu_rig.h"
#include "host/cpu_io.h"
#include "host/emulator/controller.h"
#include "host/open_device.h"

using namespace gpunvme;
using device::Extent;
using test::GpuRig;
using test::VerifySpan;
using test::gpu_memory;


TEST_CASE("GPU reads a transformer layer written by the CPU path; every byte checked on the GPU", "[gpu][read]") {
  REQUIRE_GPU();
  GpuRig rig("emu:ram,size=64M,threads=2", 4, 256);
  const uint64_t seed = 11;
  rig.write_pattern(0, 48ull << 20, seed);
  // Tensors of very different sizes, some larger than MDTS (1 MiB), some a single block, destinations
  // not page aligned (8-byte aligned: PRP1 carries an offset, PRP2 a list or a second page).
  const std::vector<std::pair<uint64_t, uint64_t>> tensors = {  // (ns offset, bytes)
      {0, 4096}, {1 << 20, 128 << 10}, {3 << 20, 5 << 20}, {9 << 20, 512}, {10 << 20, 7 * 512},
      {11 << 20, (2 << 20) + 1536}, {20 << 20, 12 << 20}, {40 << 20, 8192}, {41 << 20, 3 * 4096 + 512}};
  std::vector<Extent> ext;
  std::vector<VerifySpan> spans;
  uint64_t dst = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    dst += (i % 3) * 8 + 8;  // 8-byte aligned, rarely page aligned
    ext.push_back(Extent{tensors[i].first / rig.lba, uint32_t(tensors[i].second / rig.lba), uint32_t(i), dst});
    spans.push_back(VerifySpan{dst, tensors[i].first, tensors[i].second});
    dst += tensors[i].second;
  }
  host::DmaBuffer out = rig.gpu_buffer(dst + 4096);
  device::DeviceBufferMap map(out, rig.ctrl->page_bytes());
  test::DeviceBlob dext(ext.data(), ext.size() * sizeof(Extent));
  const device::ReadResult r = device::read_extents(*rig.set, dext.as<Extent>(), uint32_t(ext.size()), map.get());
  INFO(r.describe());
  CHECK(r.ok());
  CHECK(r.commands > ext.size());  // the large tensors were split by MDTS
  CHECK(test::gpu_count_mismatches(map.get().gpu, spans, seed) == 0);
  // Same data through one queue (the whole layer on one warp) matches too.
  std::memset(out.host(), 0, out.size());
  device::ReadOptions one;
  one.queues = 1;
  const device::ReadResult r1 = device::read_extents(*rig.set, dext.as<Extent>(), uint32_t(ext.size()), map.get(), one);
  INFO(r1.describe());
  CHECK(r1.ok());
  CHECK(test::gpu_count_mismatches(map.get().gpu, spans, seed) == 0);
}

TEST_CASE("GPU gathers MoE experts chosen by indices that live in GPU memory", "[gpu][gather]") {
  REQUIRE_GPU();
  GpuRig rig("emu:ram,size=64M,threads=2", 8, 128);
  const uint64_t seed = 12;
  const uint64_t expert_bytes = 384 << 10;
  const uint32_t experts = 64;
  rig.write_pattern(0, experts * expert_bytes, seed);
  std::vector<Extent> table;
  for (uint32_t e = 0; e < experts; ++e) table.push_back(Extent{e * expert_bytes / rig.lba, uint32_t(expert_bytes / rig.lba), e, 0});
  const std::vector<uint32_t> picked = {5, 63, 0, 17, 17, 42, 8, 31, 2, 60};  // a router's choice, repeats allowed
  test::DeviceBlob dtable(table.data(), table.size() * sizeof(Extent));
  test::DeviceBlob didx(picked.data(), picked.size() * 4);
  host::DmaBuffer out = rig.gpu_buffer(picked.size() * expert_bytes);
  device::DeviceBufferMap map(out, rig.ctrl->page_bytes());
  const device::ReadResult r = device::gather_extents(*rig.set, dtable.as<Extent>(), experts, didx.as<uint32_t>(),
                                                      uint32_t(picked.size()), expert_bytes, map.get());
  INFO(r.describe());
  CHECK(r.ok());
  std::vector<VerifySpan> spans;
  for (size_t i = 0; i < picked.size(); ++i) spans.push_back(VerifySpan{i * expert_bytes, picked[i] * expert_bytes, expert_bytes});
  CHECK(test::gpu_count_mismatches(map.get().gpu, spans, seed) == 0);

  // An index past the table is refused before any command is sent.
  const std::vector<uint32_t> wrong = {1, experts};
  test::DeviceBlob dwrong(wrong.data(), wrong.size() * 4);
  CHECK_THROWS(device::gather_extents(*rig.set, dtable.as<Extent>(), experts, dwrong.as<uint32_t>(), 2, expert_bytes, map.get()));
}

TEST_CASE("many queues at once: 48 warps each own a queue, 8 controller threads", "[gpu][queues]") {
  REQUIRE_GPU();
  GpuRig rig("emu:ram,size=128M,threads=8,poll=spin", 48, 512);
  const uint64_t seed = 13;
  const uint64_t bytes = 96ull << 20;
  rig.write_pattern(0, bytes, seed);
  // 6000 random 4 KiB reads plus some 64 KiB ones, spread over all queues.
  std::mt19937_64 rng(7);
  std::vector<Extent> ext;
  std::vector<VerifySpan> spans;
  uint64_t dst = 0;
  for (uint32_t i = 0; i < 6000; ++i) {
    const uint64_t len = (i % 10 == 0) ? (64 << 10) : 4096;
    const uint64_t off = (rng() % ((bytes - len) / 4096)) * 4096;
    ext.push_back(Extent{off / rig.lba, uint32_t(len / rig.lba), i, dst});
    spans.push_back(VerifySpan{dst, off, len});
    dst += len;
  }
  host::DmaBuffer out = rig.gpu_buffer(dst);
  device::DeviceBufferMap map(out, rig.ctrl->page_bytes());
  test::DeviceBlob dext(ext.data(), ext.size() * sizeof(Extent));
  const device::ReadResult r = device::read_extents(*rig.set, dext.as<Extent>(), uint32_t(ext.size()), map.get());
  INFO(r.describe());
  CHECK(r.ok());
  uint32_t busy_queues = 0;
  for (const auto& q : r.per_queue) busy_queues += q.completed > 0;
  CHECK(busy_queues == 48);
  CHECK(test::gpu_count_mismatches(map.get().gpu, spans, seed) == 0);
  for (const device::DeviceQueue& q : rig.set->snapshot()) {
    CHECK(q.in_flight == 0);
    CHECK(q.owner == device::kNoOwner);
  }
}

TEST_CASE("every ring and the command-id table wrap many times", "[gpu][wrap]") {
  REQUIRE_GPU();
  for (const uint32_t entries : {2u, 3u, 8u, 64u}) {
    DYNAMIC_SECTION("queues of " << entries << " entries") {
      GpuRig rig("emu:ram,size=16M,threads=2", 3, entries);
      const uint64_t seed = 14 + entries;
      rig.write_pattern(0, 8 << 20, seed);
      std::vector<Extent> ext;
      std::vector<VerifySpan> spans;
      const uint32_t n = 1500;
      for (uint32_t i = 0; i < n; ++i) {
        const uint64_t off = uint64_t((i * 37) % 2000) * 4096;
        ext.push_back(Extent{off / rig.lba, 4096 / rig.lba, i, uint64_t(i) * 4096});
        spans.push_back(VerifySpan{uint64_t(i) * 4096, off, 4096});
      }
      host::DmaBuffer out = rig.gpu_buffer(uint64_t(n) * 4096);
      device::DeviceBufferMap map(out, rig.ctrl->page_bytes());
      test::DeviceBlob dext(ext.data(), ext.size() * sizeof(Extent));
      // Twice: the second run starts from wrapped ring, phase and id state left by the first.
      for (int pass = 0; pass < 2; ++pass) {
        std::memset(out.host(), 0, out.size());
        const device::ReadResult r = device::read_extents(*rig.set, dext.as<Extent>(), n, map.get());
        INFO(r.describe());
        CHECK(r.ok());
        CHECK(test::gpu_count_mismatches(map.get().gpu, spans, seed) == 0);
      }
      for (const device::DeviceQueue& q : rig.set->snapshot()) {
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
  GpuRig rig("emu:ram,size=16M,threads=1", 1, 64);
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
  std::vector<Extent> ext;
  for (uint32_t i = 0; i < 100; ++i) ext.push_back(Extent{uint64_t(i) * 8, 8, 1000 + i, uint64_t(i) * 4096});
  host::DmaBuffer out = rig.gpu_buffer(100 * 4096);
  device::DeviceBufferMap map(out, rig.ctrl->page_bytes());
  test::DeviceBlob dext(ext.data(), ext.size() * sizeof(Extent));
  const device::ReadResult r = device::read_extents(*rig.set, dext.as<Extent>(), 100, map.get());
  INFO(r.describe());
  CHECK(rig.emu->faults().fired(id) == 1);
  CHECK(r.completed == 100);
  CHECK(r.failed == 1);
  CHECK(r.faults == 0);
  CHECK(r.first_error.type() == nvme::sct::kMediaError);
  CHECK(r.first_error.code() == nvme::sc::kUnrecoveredReadError);
  CHECK(r.first_error.dnr());
  CHECK(r.first_error_tag == 1036);  // the 37th read is extent 36
  CHECK_FALSE(r.ok());

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
  GpuRig rig("emu:ram,size=16M,threads=1", 2, 64);
  emu::Fault f;
  f.kind = emu::FaultKind::kDropCompletion;
  f.qid = 3;  // the second GPU queue
  f.nth = 10;
  rig.emu->faults().add(f);
  std::vector<Extent> ext;
  for (uint32_t i = 0; i < 200; ++i) ext.push_back(Extent{uint64_t(i) * 8, 8, i, uint64_t(i) * 4096});
  host::DmaBuffer out = rig.gpu_buffer(200 * 4096);
  device::DeviceBufferMap map(out, rig.ctrl->page_bytes());
  test::DeviceBlob dext(ext.data(), ext.size() * sizeof(Extent));
  device::ReadOptions o;
  o.timeout_ns = 100'000'000;  // 100 ms
  const auto t0 = std::chrono::steady_clock::now();
  const device::ReadResult r = device::read_extents(*rig.set, dext.as<Extent>(), 200, map.get(), o);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  INFO(r.describe());
  CHECK((r.faults & device::fault::kTimedOut) != 0);
  CHECK(r.per_queue[0].faults == 0);  // the healthy queue finished its share
  CHECK(r.per_queue[0].completed == 100);
  CHECK((r.per_queue[1].faults & device::fault::kTimedOut) != 0);
  CHECK(r.per_queue[1].completed == 99);
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
  GpuRig rig("emu:ram,size=16M,threads=1", 1, 64);
  emu::Fault f;
  f.kind = emu::FaultKind::kWrongCid;
  f.qid = 2;
  f.nth = 20;
  f.cid_xor = 0x0001;  // names a neighbour id: in flight or not, the duplicate/unknown check must catch it
  rig.emu->faults().add(f);
  std::vector<Extent> ext;
  for (uint32_t i = 0; i < 100; ++i) ext.push_back(Extent{uint64_t(i) * 8, 8, i, uint64_t(i) * 4096});
  host::DmaBuffer out = rig.gpu_buffer(100 * 4096);
  device::DeviceBufferMap map(out, rig.ctrl->page_bytes());
  test::DeviceBlob dext(ext.data(), ext.size() * sizeof(Extent));
  device::ReadOptions o;
  o.timeout_ns = 200'000'000;
  const device::ReadResult r = device::read_extents(*rig.set, dext.as<Extent>(), 100, map.get(), o);
  INFO(r.describe());
  CHECK((r.faults & (device::fault::kWrongCid | device::fault::kTimedOut)) != 0);
  CHECK_FALSE(r.ok());
}

TEST_CASE("stress: 10^8 null-namespace commands on 64 queues, none lost or duplicated", "[gpu][stress]") {
  REQUIRE_GPU();
  GpuRig rig("emu:null,size=1T,queues=64,threads=8,poll=spin", 64, 4096, false,
             device::DeviceQueueOptions{.max_command_bytes = 4096});
  const uint64_t before = rig.emu->stats().io_commands;
  host::DmaBuffer page = rig.gpu_buffer(4096);
  device::DeviceBufferMap map(page, rig.ctrl->page_bytes());
  device::StreamSpec s;
  s.per_queue = 1'562'500;  // x 64 = 10^8
  s.blocks = 4096 / rig.lba;
  s.span_blocks = rig.ctrl->namespace_info(1).blocks;
  s.slot_bytes = 4096;
  s.slots = 1;
  s.shared_dst = true;
  const device::ReadResult r = device::read_stream(*rig.set, s, map.get());
  INFO(r.describe());
  CHECK(r.commands == 100'000'000);
  CHECK(r.submitted == 100'000'000);
  CHECK(r.completed == 100'000'000);
  CHECK(r.failed == 0);
  CHECK(r.faults == 0);
  CHECK(rig.emu->stats().io_commands - before == 100'000'000);
  uint64_t sum = 0;
  for (const device::DeviceQueue& q : rig.set->snapshot()) {
    CHECK(q.in_flight == 0);
    CHECK(q.completed == s.per_queue);
    sum += q.completed;
    CHECK(q.faults == 0);
  }
  CHECK(sum == 100'000'000);
  WARN("stress: " << r.completed << " commands in " << r.seconds << " s = " << r.completed / r.seconds / 1e6
                  << " M cmds/s (64 queues, 8 controller threads)");
}
