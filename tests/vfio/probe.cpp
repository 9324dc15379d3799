// gpunvme_vfio_probe: the smallest end-to-end check of a VFIO-bound NVMe function, independent of
// the host library's controller code: open it through VfioTransport, reset and enable the controller
// with a 2-entry admin queue, and run Identify Controller by DMA. Prints one parseable line:
//   PROBE OK bdf=... model="..." vs=1.4 mdts=7 mqes=2047 to_ms=7500 dstrd=0 bar0=16384 nn=1
// or PROBE FAIL <reason>. Exit code 0 on success.
#include <sys/mman.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>

#include "driver/commands.h"
#include "driver/identify.h"
#include "driver/memory_order.h"
#include "driver/registers.h"
#include "host/error.h"
#include "host/vfio/vfio_transport.h"

using namespace gpunvme;

namespace {

struct Mem {
  void* p = nullptr;
  size_t n = 0;
  explicit Mem(size_t bytes) : n(bytes) {
    p = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    if (p == MAP_FAILED) throw Error(ErrorKind::kResource, "mmap failed");
  }
  ~Mem() { munmap(p, n); }
};

void wait_csts(volatile uint32_t* bar, bool rdy, uint32_t timeout_ms, const char* what) {
  const auto t0 = std::chrono::steady_clock::now();
  for (;;) {
    const nvme::Csts c{nvme::mmio_read32(bar + nvme::reg::kCsts / 4)};
    if (c.device_gone()) throw Error(ErrorKind::kControllerFatal, std::string(what) + ": CSTS reads all ones");
    if (c.rdy() == rdy) return;
    if (c.cfs()) throw Error(ErrorKind::kControllerFatal, std::string(what) + ": CSTS.CFS set");
    if (std::chrono::steady_clock::now() - t0 > std::chrono::milliseconds(timeout_ms))
      throw Error(ErrorKind::kTimeout, std::string(what) + ": CSTS.RDY did not follow CC.EN within CAP.TO");
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: gpunvme_vfio_probe vfio:DDDD:BB:DD.F\n");
    return 2;
  }
  try {
    vfio::VfioTransport t(argv[1]);
    volatile uint32_t* bar = t.bar0();
    const nvme::Cap cap{nvme::mmio_read64(bar + nvme::reg::kCap / 4)};
    const nvme::Vs vs{nvme::mmio_read32(bar + nvme::reg::kVs / 4)};
    const uint32_t to_ms = cap.ready_timeout_ms() ? cap.ready_timeout_ms() : 500;
    // Disable, then program a 2-entry admin queue (both rings in one 4 KiB page each).
    nvme::mmio_write32(bar + nvme::reg::kCc / 4, nvme::Cc{nvme::mmio_read32(bar + nvme::reg::kCc / 4)}.with_en(false).raw);
    wait_csts(bar, false, to_ms, "disable");
    Mem sq(4096), cq(4096), data(4096);
    const auto sq_bus = t.dma_map(sq.p, 4096).bus(0);
    const auto cq_bus = t.dma_map(cq.p, 4096).bus(0);
    const auto data_bus = t.dma_map(data.p, 4096).bus(0);
    nvme::mmio_write32(bar + nvme::reg::kAqa / 4, nvme::Aqa::make(2, 2).raw);
    nvme::mmio_write64(bar + nvme::reg::kAsq / 4, sq_bus);
    nvme::mmio_write64(bar + nvme::reg::kAcq / 4, cq_bus);
    const nvme::Cc cc = nvme::Cc{}
                            .with_css(nvme::cc::kCssNvm)
                            .with_mps(0)
                            .with_iosqes(nvme::kIoSqesLog2)
                            .with_iocqes(nvme::kIoCqesLog2)
                            .with_en(true);
    nvme::mmio_write32(bar + nvme::reg::kCc / 4, cc.raw);
    wait_csts(bar, true, to_ms, "enable");
    auto* sqe = static_cast<nvme::SubmissionEntry*>(sq.p);
    auto* cqe = static_cast<volatile nvme::CompletionEntry*>(cq.p);
    sqe[0] = nvme::make_identify(nvme::cns::kController, 0, data_bus, 0);
    sqe[0].cid = 0x42;
    nvme::publish_entries_before_doorbell();
    nvme::mmio_write32(bar + nvme::sq_tail_doorbell_offset(0, cap.dstrd()) / 4, 1);
    const auto t0 = std::chrono::steady_clock::now();
    while ((cqe[0].status & 1) != 1) {
      if (std::chrono::steady_clock::now() - t0 > std::chrono::seconds(5))
        throw Error(ErrorKind::kTimeout, "Identify Controller: no completion within 5 s");
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    nvme::read_fields_after_phase();
    const nvme::Status st = nvme::Status::from_cqe_status(cqe[0].status);
    if (!st.ok() || cqe[0].cid != 0x42)
      throw Error(ErrorKind::kCommandFailed, "Identify Controller: " + nvme::describe(st));
    nvme::mmio_write32(bar + nvme::cq_head_doorbell_offset(0, cap.dstrd()) / 4, 1);
    const auto* id = static_cast<const nvme::IdentifyController*>(data.p);
    std::string mn(id->mn, sizeof(id->mn));
    mn.erase(mn.find_last_not_of(' ') + 1);
    std::printf("PROBE OK bdf=%s model=\"%s\" vs=%u.%u mdts=%u mqes=%u to_ms=%u dstrd=%u bar0=%llu nn=%u reset=%d\n",
                t.info().bdf.c_str(), mn.c_str(), vs.major(), vs.minor(), id->mdts, cap.mqes(), cap.ready_timeout_ms(),
                cap.dstrd(), static_cast<unsigned long long>(t.bar0_size()), id->nn, int(t.info().reset_done));
    nvme::mmio_write32(bar + nvme::reg::kCc / 4, cc.with_en(false).raw);
    wait_csts(bar, false, to_ms, "disable");
    t.dma_unmap(sq.p, 4096);
    t.dma_unmap(cq.p, 4096);
    t.dma_unmap(data.p, 4096);
    return 0;
  } catch (const std::exception& e) {
    std::printf("PROBE FAIL %s\n", e.what());
    return 1;
  }
}
