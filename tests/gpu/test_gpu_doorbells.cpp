// Doorbells for GPUs that cannot write a PCIe BAR (device/doorbell_mode.h): with doorbell=cpu the
// kernels write a host mailbox and host::DoorbellForwarder rings BAR0; auto falls back to it when the
// BAR does not map into the GPU. The cudaHostRegisterIoMemory path (host/gpu_bar_access.h) runs on
// the emulator's host-memory BAR and on ranges that are not mapped at all, never on a PCI device.
#include <sys/mman.h>

#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "gpu_check.h"
#include "gpu_reads.h"
#include "gpu_rig.h"
#include "host/error.h"
#include "host/gpu_bar_access.h"
#include "runtime/stream/gpu_submitter.h"

using namespace gpunvme;
using Catch::Matchers::ContainsSubstring;
using device::DoorbellMode;
using test::BlockRead;
using test::GpuRig;
using test::VerifySpan;

namespace {

// Sets an environment variable for one scope (the emulator reads GPUNVME_EMU_GPU_BAR when BAR0 is mapped).
struct EnvVar {
  std::string name;
  EnvVar(const char* n, const char* value) : name(n) { ::setenv(n, value, 1); }
  ~EnvVar() { ::unsetenv(name.c_str()); }
};

device::DeviceQueueOptions with_doorbell(DoorbellMode m) {
  device::DeviceQueueOptions o;
  o.doorbell = m;
  return o;
}

// A GPU submitter over all of the rig's GPU queue pairs, with doorbell mode `m`.
stream::GpuSubmitter submitter(GpuRig& rig, DoorbellMode m) { return {*rig.ctrl, rig.raw, 1, {.doorbell = m}}; }

// Reads 6 MiB in extents of many sizes through the submitter; every byte compared on the GPU.
void read_layer_and_verify(GpuRig& rig, stream::GpuSubmitter& gpu, uint64_t seed) {
  rig.write_pattern(0, 8ull << 20, seed);
  std::vector<BlockRead> ext;
  std::vector<VerifySpan> spans;
  uint64_t dst = 0;
  const uint64_t sizes[] = {4096, 512, 128 << 10, 1 << 20, (2 << 20) + 512, 3 * 4096, 2 << 20};
  uint64_t ns = 0;
  for (uint32_t i = 0; i < 7; ++i) {
    ext.push_back(BlockRead{ns / rig.lba, uint32_t(sizes[i] / rig.lba), dst});
    spans.push_back(VerifySpan{dst, ns, sizes[i]});
    dst += sizes[i] + 8;
    ns += (sizes[i] + 4095) / 4096 * 4096;
  }
  host::DmaBuffer out = rig.gpu_buffer(dst + 4096);
  const test::ReadPlan p = test::plan_reads(rig, gpu, out, ext);
  INFO(gpu.queues().doorbell_note());
  REQUIRE_NOTHROW(test::run_plan(gpu, p));
  CHECK(test::gpu_count_mismatches(static_cast<const uint8_t*>(out.device()), spans, seed) == 0);
}

}  // namespace

TEST_CASE("doorbell=cpu: kernels write the mailbox, a host thread rings BAR0; bytes verify", "[gpu][doorbell]") {
  REQUIRE_GPU();
  GpuRig rig("emu:ram,size=64M,threads=2", 4, 128, true, {}, false);
  stream::GpuSubmitter gpu = submitter(rig, DoorbellMode::kCpu);
  CHECK(gpu.queues().doorbell_mode() == DoorbellMode::kCpu);
  REQUIRE(gpu.queues().forwarder() != nullptr);
  read_layer_and_verify(rig, gpu, 31);
  CHECK(gpu.queues().forwarder()->forwarded() > 0);
  CHECK(gpu.queues().forwarder()->refused() == 0);
}

TEST_CASE("doorbell=gpu and auto use the GPU mapping of BAR0 where it exists", "[gpu][doorbell]") {
  REQUIRE_GPU();
  for (DoorbellMode m : {DoorbellMode::kGpu, DoorbellMode::kAuto}) {
    GpuRig rig("emu:ram,size=64M,threads=2", 2, 128, true, {}, false);
    stream::GpuSubmitter gpu = submitter(rig, m);
    CHECK(gpu.queues().doorbell_mode() == DoorbellMode::kGpu);
    CHECK(gpu.queues().forwarder() == nullptr);
    read_layer_and_verify(rig, gpu, 32);
  }
}

TEST_CASE("a BAR the GPU cannot map: auto falls back to CPU doorbells and says why, gpu refuses", "[gpu][doorbell]") {
  REQUIRE_GPU();
  EnvVar refuse("GPUNVME_EMU_GPU_BAR", "refuse");
  {
    GpuRig rig("emu:ram,size=64M,threads=2", 2, 128, true, {}, false);
    stream::GpuSubmitter gpu = submitter(rig, DoorbellMode::kAuto);
    CHECK(gpu.queues().doorbell_mode() == DoorbellMode::kCpu);
    CHECK_THAT(gpu.queues().doorbell_note(), ContainsSubstring("doorbell=auto chose cpu"));
    CHECK_THAT(gpu.queues().doorbell_note(), ContainsSubstring("refuses GPU mapping"));
    read_layer_and_verify(rig, gpu, 33);
  }
  try {
    GpuRig rig("emu:ram,size=64M,threads=2", 2, 128, true, {}, false);
    stream::GpuSubmitter gpu = submitter(rig, DoorbellMode::kGpu);
    FAIL("doorbell=gpu was accepted with a BAR the GPU cannot map");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::kUnsupported);
    CHECK_THAT(e.what(), ContainsSubstring("doorbell=gpu"));
  }
}

TEST_CASE("the cudaHostRegisterIoMemory path on the emulator's host-memory BAR: works, or auto falls back cleanly",
          "[gpu][doorbell][iomemory]") {
  REQUIRE_GPU();
  EnvVar iomem("GPUNVME_EMU_GPU_BAR", "iomemory");
  GpuRig rig("emu:ram,size=64M,threads=2", 2, 128, true, {}, false);
  stream::GpuSubmitter gpu = submitter(rig, DoorbellMode::kAuto);
  // Whether the driver registers host memory as I/O memory is its choice; both outcomes must work.
  WARN("doorbells: " << gpu.queues().doorbell_note());
  if (gpu.queues().doorbell_mode() == DoorbellMode::kCpu)
    CHECK_THAT(gpu.queues().doorbell_note(), ContainsSubstring("cudaHostRegister(emulated BAR0, IoMemory|Mapped) failed"));
  read_layer_and_verify(rig, gpu, 34);
}

TEST_CASE("register_io_memory_for_gpu fails cleanly on ranges that are not a mapping", "[gpu][doorbell][iomemory]") {
  REQUIRE_GPU();
  std::string why;
  CHECK(host::register_io_memory_for_gpu(nullptr, 4096, "a null range", &why) == nullptr);
  CHECK_THAT(why, ContainsSubstring("4 KiB aligned"));
  CHECK_THAT(why, ContainsSubstring("doorbell=cpu"));
  // An address range that was mapped and given back: nothing lives there, no device behind it.
  void* p = ::mmap(nullptr, 1 << 16, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  REQUIRE(p != MAP_FAILED);
  ::munmap(p, 1 << 16);
  why.clear();
  volatile uint32_t* dev = host::register_io_memory_for_gpu(p, 1 << 16, "an unmapped range", &why);
  if (dev != nullptr) {
    host::unregister_io_memory_for_gpu(p);
    FAIL("CUDA registered an unmapped range as I/O memory");
  }
  INFO(why);
  CHECK_THAT(why, ContainsSubstring("cudaHostRegister(an unmapped range, IoMemory|Mapped) failed"));
  // No CUDA error is left behind: GPU-mapped DMA memory and a kernel still work.
  GpuRig rig("emu:ram,size=64M,threads=2", 1, 64, true, {}, false);
  stream::GpuSubmitter gpu = submitter(rig, DoorbellMode::kAuto);
  read_layer_and_verify(rig, gpu, 35);
}

TEST_CASE("doorbell=cpu serves the one-thread C device API too (gpunvme_device.cuh)", "[gpu][doorbell]") {
  REQUIRE_GPU();
  GpuRig rig("emu:ram,size=16M,threads=1", 1, 32, true, with_doorbell(DoorbellMode::kCpu));
  const uint64_t seed = 36;
  rig.write_pattern(0, 4 << 20, seed);
  std::vector<uint64_t> lbas;
  std::vector<VerifySpan> spans;
  const uint64_t stride = 8192;
  for (uint32_t i = 0; i < 300; ++i) {
    const uint64_t off = uint64_t((i * 7) % 500) * 8192;
    lbas.push_back(off / rig.lba);
    spans.push_back(VerifySpan{i * stride, off, 8192});
  }
  host::DmaBuffer out = rig.gpu_buffer(lbas.size() * stride + 8192);
  // Depth 1 and 8: one doorbell per command, then batches.
  for (uint32_t depth : {1u, 8u}) {
    std::memset(out.host(), 0, out.size());
    const test::CApiResult r = test::gpu_c_api_reads(rig.set->device(0), lbas, 8192 / rig.lba, rig.lba, out.bus(0),
                                                     stride, depth, 1'000'000'000);
    INFO("depth " << depth);
    CHECK(r.succeeded == lbas.size());
    CHECK(r.failed + r.timed_out + r.protocol_errors == 0);
    CHECK(test::gpu_count_mismatches(static_cast<const uint8_t*>(out.device()), spans, seed) == 0);
  }
  CHECK(rig.set->forwarder()->forwarded() > 0);
}
