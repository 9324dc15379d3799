// The host library's integration suite against a real controller through VFIO.
// Runs inside the QEMU guest of scripts/qemu/run_vfio_suite.sh (QEMU's NVMe controller behind a
// virtual Intel IOMMU) and on a real drive: gpunvme_vfio_suite --device vfio:0000:0b:00.0
// (docs/vfio.md). It also runs against the emulator (--device emu:ram,size=64M) to check the suite.
//
// DESTRUCTIVE: it writes over the first 64 MiB of every namespace it tests.
#include <catch2/catch_session.hpp>
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <sstream>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "driver/commands.h"
#include "driver/memory_order.h"
#include "driver/prp.h"
#include "driver/registers.h"
#include "host/cpu_io.h"
#include "host/error.h"
#include "host/open_device.h"
#include "host/vfio/vfio_transport.h"
#include "host/io_patterns.h"

using namespace gpunvme;
using namespace std::chrono_literals;

namespace {

struct SuiteConfig {
  std::string device;
  int expect_mdts = -1;        // Identify MDTS the controller must report
  int expect_queues = -1;      // I/O queue pairs the controller must grant
  int expect_lba = -1;         // LBA size of namespace 1
  int expect_namespaces = -1;  // active namespaces
  int expect_cmb_mb = -1;      // controller memory buffer size
  bool expect_fault_log = false;  // require the IOMMU's fault report in the kernel log (/dev/kmsg)
  uint64_t test_bytes = 64ull << 20;  // region of each namespace the suite may overwrite
};
SuiteConfig g_cfg;

// Facts worth seeing in the log of a passing run (Catch2 shows INFO only on failure).
template <class... Args>
void note(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  std::printf("# %s\n", os.str().c_str());
  std::fflush(stdout);
}

// The kernel log from now on: the IOMMU reports faults there (Intel "DMAR: ... fault addr",
// AMD "IO_PAGE_FAULT ... address="). Needs root (or CAP_SYSLOG); invalid() when not readable.
class KernelLog {
 public:
  KernelLog() {
    fd_ = ::open("/dev/kmsg", O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd_ >= 0) ::lseek(fd_, 0, SEEK_END);
  }
  ~KernelLog() {
    if (fd_ >= 0) ::close(fd_);
  }
  bool valid() const { return fd_ >= 0; }
  // Records logged since construction (each read() returns one record; EAGAIN at the end).
  std::vector<std::string> since() {
    std::vector<std::string> out;
    char buf[8192];
    for (;;) {
      const ssize_t n = ::read(fd_, buf, sizeof(buf) - 1);
      if (n < 0 && errno == EPIPE) continue;  // overwritten records: skip on
      if (n <= 0) break;
      buf[n] = 0;
      const char* msg = std::strchr(buf, ';');
      out.emplace_back(msg ? msg + 1 : buf);
    }
    return out;
  }

 private:
  int fd_ = -1;
};

std::unique_ptr<host::Transport> open_transport() {
  if (vfio::is_vfio_device_string(g_cfg.device)) return vfio::open_vfio_transport(g_cfg.device);
  return host::open_transport(g_cfg.device);
}

std::unique_ptr<host::Controller> open_controller(host::ControllerOptions options = {}) {
  options.admin_timeout = 5000ms;
  return std::make_unique<host::Controller>(open_transport(), options);
}

uint32_t read_reg(host::Controller& c, uint32_t off) { return nvme::mmio_read32(c.transport().bar0() + off / 4); }

// Blocks of namespace `nsid` the suite may use.
uint64_t usable_blocks(host::Controller& c, uint32_t nsid) {
  const auto& ns = c.namespace_info(nsid);
  return std::min<uint64_t>(ns.blocks, g_cfg.test_bytes / ns.lba_bytes);
}

// Write a pattern, read it back into a poisoned buffer, compare, check the bytes around it.
void round_trip(host::CpuIo& io, host::DmaBuffer& out, host::DmaBuffer& in, uint64_t slba, uint64_t bytes,
                uint64_t off, uint64_t seed) {
  const uint32_t lba = io.lba_bytes();
  INFO("slba " << slba << " bytes " << bytes << " buffer offset " << off << " seed " << seed);
  host::fill_pattern(out.as<uint8_t>() + off, bytes, seed);
  std::memset(in.host(), 0xEE, std::min<uint64_t>(in.size(), bytes + off + 64));
  io.write(slba, bytes / lba, out, off);
  io.read(slba, bytes / lba, in, off);
  REQUIRE(host::fnv1a(in.as<uint8_t>() + off, bytes) == host::fnv1a(out.as<uint8_t>() + off, bytes));
  if (off > 0) CHECK(in.as<uint8_t>()[off - 1] == 0xEE);
  if (off + bytes < in.size()) CHECK(in.as<uint8_t>()[off + bytes] == 0xEE);
}

}  // namespace

TEST_CASE("the VFIO transport opens the function: BAR0, reset, bus master, IOVA ranges", "[vfio][transport]") {
  auto t = open_transport();
  auto* v = dynamic_cast<vfio::VfioTransport*>(t.get());
  if (!v) SKIP("not a VFIO device: " << g_cfg.device);
  const auto& info = v->info();
  note("VFIO group ", info.group, ", BAR0 ", info.bar0_size, " bytes, ", info.num_regions, " regions, reset offered ",
       info.reset_offered, " done ", info.reset_done, ", IOVA ranges reported ", info.iova_ranges.size(),
       ", IOMMU page sizes 0x", std::hex, info.iova_pgsizes);
  CHECK(info.group >= 0);
  CHECK_FALSE(info.noiommu);
  CHECK(info.bar0_size >= 0x2000);
  CHECK(info.reset_done == info.reset_offered);
  const uint16_t cmd = v->config_read16(0x04);
  CHECK((cmd & 0x6) == 0x6);  // memory space + bus master
  CHECK(v->config_read16(0x00) != 0xFFFF);  // vendor id readable (QEMU's NVMe is 1b36:0010)
  // Type1 reports its IOVA ranges; ours must all lie inside them.
  for (int i = 0; i < 4; ++i) {
    std::vector<uint8_t> mem(4096 * 4 + 4096);
    void* p = reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(mem.data()) + 4095) & ~uintptr_t(4095));
    const auto tr = v->dma_map(p, 4096 * 4);
    const uint64_t iova = tr.bus(0);
    CHECK(iova >= vfio::IovaAllocator::kDefaultBase);
    bool inside = info.iova_ranges.empty();
    for (const auto& r : info.iova_ranges) inside |= iova >= r.start && iova + 4096 * 4 - 1 <= r.last;
    CHECK(inside);
    v->dma_unmap(p, 4096 * 4);
  }
  std::string why;
  CHECK(v->bar0_for_gpu(&why) == nullptr);  // no CUDA in this build
  CHECK_FALSE(why.empty());
}

TEST_CASE("bring-up and identify", "[vfio][bringup]") {
  auto ctrl = open_controller();
  const auto& id = ctrl->identify();
  const std::string mn(id.mn, sizeof(id.mn));
  note("model '", mn.substr(0, mn.find_last_not_of(' ') + 1), "' VS ", ctrl->version().major(), ".",
       ctrl->version().minor(), " MDTS ", int(id.mdts), " MQES ", ctrl->cap().mqes(), " I/O queues ",
       ctrl->io_queues_granted(), " namespaces ", ctrl->namespaces().size(), " LBA ",
       ctrl->namespaces().empty() ? 0u : ctrl->namespaces()[0].lba_bytes);
  CHECK(ctrl->version().major() == 1);
  const nvme::Csts csts{read_reg(*ctrl, nvme::reg::kCsts)};
  CHECK(csts.rdy());
  CHECK_FALSE(csts.cfs());
  REQUIRE_FALSE(ctrl->namespaces().empty());
  CHECK(ctrl->namespaces()[0].nsid == 1);
  if (g_cfg.expect_mdts >= 0) {
    CHECK(int(id.mdts) == g_cfg.expect_mdts);
    CHECK(ctrl->max_transfer_bytes() == (g_cfg.expect_mdts ? (ctrl->cap().min_page_bytes() << g_cfg.expect_mdts) : 0));
  }
  if (g_cfg.expect_queues >= 0) CHECK(int(ctrl->io_queues_granted()) == g_cfg.expect_queues);
  if (g_cfg.expect_lba >= 0) CHECK(int(ctrl->namespaces()[0].lba_bytes) == g_cfg.expect_lba);
  if (g_cfg.expect_namespaces >= 0) CHECK(int(ctrl->namespaces().size()) == g_cfg.expect_namespaces);
}

TEST_CASE("every granted I/O queue pair carries I/O, and one queue of CAP.MQES+1 entries fills up", "[vfio][queues]") {
  auto ctrl = open_controller();
  const uint32_t n = ctrl->io_queues_granted();
  REQUIRE(n >= 1);
  const uint32_t lba = ctrl->namespace_info(1).lba_bytes;
  host::DmaBuffer buf(ctrl->transport(), (1 << 20) + 4096), back(ctrl->transport(), (1 << 20) + 4096);
  {
    std::vector<std::unique_ptr<host::QueuePair>> qps;
    for (uint16_t q = 1; q <= n; ++q) qps.push_back(ctrl->create_io_queue_pair(q, 32));
    // One past the grant is refused by the controller.
    CHECK_THROWS_AS(ctrl->create_io_queue_pair(uint16_t(n + 1), 16), Error);
    for (auto& qp : qps) {
      host::CpuIo io(*ctrl, *qp, 1, {.queue_depth = 8});
      const uint64_t slba = (uint64_t(qp->qid()) * 8192 / lba) % (usable_blocks(*ctrl, 1) - 8);
      round_trip(io, buf, back, slba, 4096, 0, qp->qid());
    }
    for (auto& qp : qps) ctrl->delete_io_queue_pair(*qp);
  }
  // The deepest queue the controller allows, kept full of 4 KiB reads.
  const uint32_t entries = std::min<uint32_t>(ctrl->max_queue_entries(), 4096);
  auto deep = ctrl->create_io_queue_pair(1, entries);
  host::CpuIo io(*ctrl, *deep, 1, {.queue_depth = std::min<uint32_t>(entries - 1, 256)});
  const uint64_t blocks = (1u << 20) / lba;
  round_trip(io, buf, back, 0, blocks * lba, 0, 99);
  uint32_t submitted = 0;
  const uint32_t burst = std::min<uint32_t>(entries - 1, 256);
  for (uint32_t i = 0; i < burst; ++i, ++submitted)
    io.submit(host::IoRequest{nvme::nvm_op::kRead, (i * (4096 / lba)) % blocks, 4096 / lba, &back, (i % 256) * 4096ull},
              false);
  io.ring();
  std::vector<host::Completion> done(burst);
  uint32_t got = 0;
  const auto t0 = std::chrono::steady_clock::now();
  while (got < burst && std::chrono::steady_clock::now() - t0 < 20s) got += io.reap(done.data() + got, burst - got);
  REQUIRE(got == burst);
  CHECK(std::all_of(done.begin(), done.end(), [](const host::Completion& c) { return c.ok(); }));
  ctrl->delete_io_queue_pair(*deep);
}

TEST_CASE("patterns read back byte-exact at many sizes and offsets", "[vfio][io]") {
  auto ctrl = open_controller();
  auto qp = ctrl->create_io_queue_pair(1, 64);
  // 2 MiB per command at most: with MDTS 0 (no limit) a command then carries up to 513 pages, a PRP
  // list over two list pages. (QEMU refuses a command of more than 1024 segments, its IOV_MAX, with
  // Internal Error; a 4 MiB transfer at a buffer offset needs 1025.)
  host::CpuIo io(*ctrl, *qp, 1, {.queue_depth = 16, .max_command_bytes = 2u << 20});
  const uint32_t lba = io.lba_bytes();
  const uint64_t max_bytes = 4ull << 20;
  host::DmaBuffer out(ctrl->transport(), max_bytes + 8192), in(ctrl->transport(), max_bytes + 8192);
  const std::vector<uint64_t> sizes = {512, 1024, 4096, 8192, 12288, 61440, 65536, 131072, 1u << 20,
                                       (2u << 20) + 4096, 4u << 20};
  uint64_t seed = 1;
  const uint64_t usable = usable_blocks(*ctrl, 1);
  for (uint64_t size : sizes) {
    if (size % lba) continue;
    // All buffer offsets for small transfers; the expensive large ones at two.
    const std::vector<uint64_t> offs =
        size <= 131072 ? std::vector<uint64_t>{0, 4, 512, 4092} : std::vector<uint64_t>{0, 4092};
    for (uint64_t off : offs) {
      const uint64_t slba = (seed * 7919) % (usable - size / lba);
      round_trip(io, out, in, slba, size, off, seed);
      ++seed;
    }
  }
  // Last blocks of the test region and the very first block.
  round_trip(io, out, in, usable - 8, 8ull * lba, 0, 777);
  round_trip(io, out, in, 0, lba, 0, 778);
  ctrl->delete_io_queue_pair(*qp);
}

TEST_CASE("a PRP list that chains across list pages, built by hand", "[vfio][prp]") {
  auto ctrl = open_controller();
  auto qp = ctrl->create_io_queue_pair(1, 16);
  const uint32_t lba = ctrl->namespace_info(1).lba_bytes;
  const uint64_t page = ctrl->page_bytes();
  // The largest transfer one command may carry (MDTS), capped at 2 MiB, and at least 4 pages.
  uint64_t bytes = ctrl->max_transfer_bytes() == 0 ? (2u << 20) : std::min<uint64_t>(ctrl->max_transfer_bytes(), 2u << 20);
  if (bytes < 4 * page) SKIP("MDTS allows only " << bytes << " bytes per command: no PRP list chains");
  host::DmaBuffer data(ctrl->transport(), bytes), back(ctrl->transport(), bytes), lists(ctrl->transport(), 4 * page);
  // The list starts 3 entries before the end of a list page, so the third slot must hold a chain pointer.
  const uint64_t pages = bytes / page;
  auto build = [&](host::DmaBuffer& buf) {
    uint64_t* first = reinterpret_cast<uint64_t*>(lists.as<uint8_t>() + page - 24);
    uint64_t* next = reinterpret_cast<uint64_t*>(lists.as<uint8_t>() + page);
    std::memset(lists.host(), 0, lists.size());
    first[0] = buf.bus(page);
    first[1] = buf.bus(2 * page);
    first[2] = lists.bus(page);  // chain
    for (uint64_t k = 3; k < pages; ++k) next[k - 3] = buf.bus(k * page);
    return lists.bus(page - 24);
  };
  host::fill_pattern(data.as<uint8_t>(), bytes, 4242);
  auto w = nvme::make_write(1, 100, uint32_t(bytes / lba), data.bus(), build(data));
  nvme::publish_entries_before_doorbell();
  host::Completion c = qp->wait(qp->submit(w), 10s);
  REQUIRE(c.ok());
  std::memset(back.host(), 0, bytes);
  auto r = nvme::make_read(1, 100, uint32_t(bytes / lba), back.bus(), build(back));
  c = qp->wait(qp->submit(r), 10s);
  REQUIRE(c.ok());
  CHECK(host::fnv1a(back.as<uint8_t>(), bytes) == host::fnv1a(data.as<uint8_t>(), bytes));
  // The same data through CpuIo's own lists reads back equal.
  host::CpuIo io(*ctrl, *qp, 1, {.queue_depth = 4, .max_command_bytes = 8u << 20});
  std::memset(back.host(), 0, bytes);
  io.read(100, bytes / lba, back, 0);
  CHECK(host::fnv1a(back.as<uint8_t>(), bytes) == host::fnv1a(data.as<uint8_t>(), bytes));
  ctrl->delete_io_queue_pair(*qp);
}

TEST_CASE("transfers beyond MDTS are split by the host and refused by the controller when not", "[vfio][mdts]") {
  auto ctrl = open_controller();
  const uint64_t mt = ctrl->max_transfer_bytes();
  if (mt == 0) SKIP("MDTS 0: no transfer limit to split at");
  auto qp = ctrl->create_io_queue_pair(1, 64);
  host::CpuIo io(*ctrl, *qp, 1, {.queue_depth = 16, .max_command_bytes = 8u << 20});
  const uint32_t lba = io.lba_bytes();
  CHECK(uint64_t(io.max_blocks_per_command()) * lba <= mt);
  const uint64_t bytes = std::min<uint64_t>(mt * 5 + 3 * lba, 4u << 20);
  host::DmaBuffer out(ctrl->transport(), bytes + 4096), in(ctrl->transport(), bytes + 4096);
  round_trip(io, out, in, 1000, bytes / lba * lba, 4, 31337);
  // One command of MDTS + one block, sent raw: the controller must refuse it (Invalid Field).
  const uint32_t nblocks = uint32_t(mt / lba + 1);
  host::DmaBuffer big(ctrl->transport(), mt + lba + 4096), list(ctrl->transport(), 2 * 4096);
  const uint64_t page = ctrl->page_bytes();
  nvme::PrpPair prps{};
  REQUIRE(nvme::build_prps(
      0, uint64_t(nblocks) * lba, page, [&](uint64_t k) { return big.bus(k * page); },
      [&](uint32_t j) { return nvme::PrpListMemory{list.as<uint64_t>() + j * page / 8, list.bus(j * page)}; }, &prps));
  const host::Completion c = qp->wait(qp->submit(nvme::make_read(1, 0, nblocks, prps.prp1, prps.prp2)), 5s);
  INFO(nvme::describe(c.status));
  CHECK_FALSE(c.ok());
  CHECK(c.status.code() == nvme::sc::kInvalidField);
  ctrl->delete_io_queue_pair(*qp);
}

TEST_CASE("a controller reset re-initialises admin and I/O queues at the same addresses; I/O before and after",
          "[vfio][reset]") {
  auto ctrl = open_controller();
  const uint16_t nq = uint16_t(std::min<uint32_t>(3, ctrl->io_queues_granted()));
  std::vector<std::unique_ptr<host::QueuePair>> qps;
  for (uint16_t q = 1; q <= nq; ++q) qps.push_back(ctrl->create_io_queue_pair(q, 32));
  host::DmaBuffer out(ctrl->transport(), 65536 + 4096), in(ctrl->transport(), 65536 + 4096);
  const uint64_t usable = usable_blocks(*ctrl, 1);
  for (auto& qp : qps) {
    host::CpuIo io(*ctrl, *qp, 1);
    round_trip(io, out, in, (qp->qid() * 4099) % (usable - 256), 65536, 0, 900 + qp->qid());
  }
  std::vector<uint64_t> sq_bus, cq_bus;
  for (auto& qp : qps) sq_bus.push_back(qp->sq_bus()), cq_bus.push_back(qp->cq_bus());
  ctrl->reset("guest suite");
  CHECK(ctrl->resets() == 1);
  for (size_t i = 0; i < qps.size(); ++i) {
    CHECK(qps[i]->generation() == 1);
    CHECK(qps[i]->sq_bus() == sq_bus[i]);
    CHECK(qps[i]->cq_bus() == cq_bus[i]);
    // The data written before the reset reads back through every recreated queue, and new writes land.
    host::CpuIo io(*ctrl, *qps[i], 1);
    const uint64_t slba = (qps[i]->qid() * 4099) % (usable - 256);
    host::fill_pattern(out.as<uint8_t>(), 65536, 900 + qps[i]->qid());
    io.read(slba, 65536 / io.lba_bytes(), in, 0);
    CHECK(std::memcmp(in.host(), out.host(), 65536) == 0);
    round_trip(io, out, in, slba, 65536, 4, 950 + qps[i]->qid());
  }
  for (auto& qp : qps) ctrl->delete_io_queue_pair(*qp);
}

TEST_CASE("namespaces are separate address spaces", "[vfio][namespaces]") {
  auto ctrl = open_controller();
  if (ctrl->namespaces().size() < 2) SKIP("one namespace");
  auto qp = ctrl->create_io_queue_pair(1, 32);
  std::vector<std::unique_ptr<host::CpuIo>> ios;
  for (const auto& ns : ctrl->namespaces()) ios.push_back(std::make_unique<host::CpuIo>(*ctrl, *qp, ns.nsid));
  host::DmaBuffer out(ctrl->transport(), 65536), in(ctrl->transport(), 65536);
  for (size_t i = 0; i < ios.size(); ++i) {
    host::fill_pattern(out.as<uint8_t>(), 65536, 500 + i);
    ios[i]->write(0, 65536 / ios[i]->lba_bytes(), out, 0);
  }
  for (size_t i = 0; i < ios.size(); ++i) {
    host::fill_pattern(out.as<uint8_t>(), 65536, 500 + i);
    ios[i]->read(0, 65536 / ios[i]->lba_bytes(), in, 0);
    CHECK(host::fnv1a(in.as<uint8_t>(), 65536) == host::fnv1a(out.as<uint8_t>(), 65536));
  }
  ctrl->delete_io_queue_pair(*qp);
}

TEST_CASE("the controller memory buffer is advertised", "[vfio][cmb]") {
  if (g_cfg.expect_cmb_mb < 0) SKIP("no CMB expected in this configuration");
  auto ctrl = open_controller();
  REQUIRE(ctrl->cap().cmb_supported());
  // NVMe 1.4: with CAP.CMBS set, CMBLOC/CMBSZ read as 0 until CMBMSC.CRE (offset 0x50, bit 0) is set.
  volatile uint32_t* bar = ctrl->transport().bar0();
  if (nvme::mmio_read32(bar + nvme::reg::kCmbsz / 4) == 0) nvme::mmio_write32(bar + 0x50 / 4, 1);
  const nvme::Cmbsz sz{nvme::mmio_read32(bar + nvme::reg::kCmbsz / 4)};
  const nvme::Cmbloc loc{nvme::mmio_read32(bar + nvme::reg::kCmbloc / 4)};
  note("CMB ", sz.size_bytes(), " bytes in BAR", loc.bir());
  CHECK(sz.size_bytes() == uint64_t(g_cfg.expect_cmb_mb) << 20);
  CHECK(loc.bir() != 0);
}

TEST_CASE("data survives an orderly shutdown and a new bring-up", "[vfio][shutdown]") {
  if (g_cfg.device.rfind("emu:ram", 0) == 0 || g_cfg.device.rfind("emu:null", 0) == 0)
    SKIP("a RAM-backed emulator forgets its data when closed");
  {
    auto ctrl = open_controller();
    auto qp = ctrl->create_io_queue_pair(1, 16);
    host::CpuIo io(*ctrl, *qp, 1);
    host::DmaBuffer out(ctrl->transport(), 65536);
    host::fill_pattern(out.as<uint8_t>(), 65536, 2024);
    io.write(2048, 65536 / io.lba_bytes(), out, 0);
    io.flush();
    ctrl->delete_io_queue_pair(*qp);
    qp.reset();
    const auto t0 = std::chrono::steady_clock::now();
    ctrl->shutdown();
    CHECK(std::chrono::steady_clock::now() - t0 < 5s);
    const nvme::Csts csts{read_reg(*ctrl, nvme::reg::kCsts)};
    CHECK(csts.shst() == nvme::csts::kShstComplete);
  }
  auto ctrl = open_controller();
  auto qp = ctrl->create_io_queue_pair(1, 16);
  host::CpuIo io(*ctrl, *qp, 1);
  host::DmaBuffer in(ctrl->transport(), 65536), expect(ctrl->transport(), 65536);
  host::fill_pattern(expect.as<uint8_t>(), 65536, 2024);
  io.read(2048, 65536 / io.lba_bytes(), in, 0);
  CHECK(host::fnv1a(in.as<uint8_t>(), 65536) == host::fnv1a(expect.as<uint8_t>(), 65536));
  ctrl->delete_io_queue_pair(*qp);
}

TEST_CASE("a DMA to an IOVA nobody mapped is stopped by the IOMMU, in bounded time, corrupting nothing", "[vfio][iommu]") {
  auto t = open_transport();
  auto* v = dynamic_cast<vfio::VfioTransport*>(t.get());
  if (!v) SKIP("not a VFIO device: the emulator's own test covers unmapped PRPs");
  host::Controller ctrl(std::move(t), {.admin_timeout = 5000ms});
  auto qp = ctrl.create_io_queue_pair(1, 16);
  const uint32_t lba = ctrl.namespace_info(1).lba_bytes;
  // Guard buffers mapped on either side of the hole; the hole is the guard IOVA page after `before`.
  host::DmaBuffer before(ctrl.transport(), 64 * 1024, {.hugepages = host::HugePages::kNever});
  const uint64_t hole = v->unmapped_iova();
  host::DmaBuffer after(ctrl.transport(), 64 * 1024, {.hugepages = host::HugePages::kNever});
  // The hole lies in neither buffer.
  CHECK((hole + 4096 <= before.bus(0) || hole >= before.bus(before.size() - 1) + 1));
  CHECK((hole + 4096 <= after.bus(0) || hole >= after.bus(after.size() - 1) + 1));
  std::memset(before.host(), 0xA5, before.size());
  std::memset(after.host(), 0x5A, after.size());
  // Fill the source LBAs with something that is neither guard pattern.
  {
    host::CpuIo io(ctrl, *qp, 1);
    host::DmaBuffer src(ctrl.transport(), 8192);
    std::memset(src.host(), 0x33, 8192);
    io.write(0, 8192 / lba, src, 0);
  }
  // A read makes the controller write to host memory at PRP1 = the hole.
  KernelLog klog;
  const auto t0 = std::chrono::steady_clock::now();
  const uint16_t cid = qp->submit(nvme::make_read(1, 0, 4096 / lba, hole, 0));
  std::string outcome;
  bool completed = false;
  try {
    const host::Completion c = qp->wait(cid, 3s);
    completed = true;
    outcome = "completed with " + (c.ok() ? std::string("success") : nvme::describe(c.status));
  } catch (const Error& e) {
    outcome = std::string("no completion: ") + e.what();
    CHECK((e.kind() == ErrorKind::kTimeout || e.kind() == ErrorKind::kControllerFatal));
  }
  const auto took = std::chrono::steady_clock::now() - t0;
  // The IOMMU's own report of the blocked access, naming the address.
  char hole_hex[32];
  std::snprintf(hole_hex, sizeof(hole_hex), "%llx", static_cast<unsigned long long>(hole));
  std::string fault_line;
  for (int i = 0; i < 20 && fault_line.empty() && klog.valid(); ++i) {
    for (const auto& line : klog.since())
      if ((line.find("DMAR") != std::string::npos || line.find("IO_PAGE_FAULT") != std::string::npos) &&
          line.find(hole_hex) != std::string::npos)
        fault_line = line;
    if (fault_line.empty()) std::this_thread::sleep_for(50ms);
  }
  while (!fault_line.empty() && (fault_line.back() == '\n')) fault_line.pop_back();
  note("DMA to unmapped IOVA 0x", hole_hex, ": ", outcome, " after ",
       std::chrono::duration_cast<std::chrono::milliseconds>(took).count(), " ms; IOMMU log: ",
       fault_line.empty() ? std::string("(none seen)") : fault_line);
  CHECK(took < 5s);
  if (g_cfg.expect_fault_log) {
    REQUIRE(klog.valid());
    CHECK_FALSE(fault_line.empty());
  } else if (completed && fault_line.empty()) {
    WARN("the controller reported the command and no IOMMU fault was seen in the kernel log (not root?)");
  }
  // Nothing around the hole was written: the guards keep their patterns.
  CHECK(std::all_of(before.as<uint8_t>(), before.as<uint8_t>() + before.size(), [](uint8_t b) { return b == 0xA5; }));
  CHECK(std::all_of(after.as<uint8_t>(), after.as<uint8_t>() + after.size(), [](uint8_t b) { return b == 0x5A; }));
  qp->abandon_in_flight();
}

TEST_CASE("after the IOMMU fault a fresh bring-up works again", "[vfio][iommu]") {
  auto ctrl = open_controller();
  auto qp = ctrl->create_io_queue_pair(1, 16);
  host::CpuIo io(*ctrl, *qp, 1);
  host::DmaBuffer out(ctrl->transport(), 16384 + 4096), in(ctrl->transport(), 16384 + 4096);
  round_trip(io, out, in, 4096, 16384, 0, 1);
  ctrl->delete_io_queue_pair(*qp);
}

int main(int argc, char** argv) {
  Catch::Session session;
  using Catch::Clara::Opt;
  auto cli = session.cli() |
             Opt(g_cfg.device, "device")["--device"]("device string: vfio:DDDD:BB:DD.F (or emu:... to check the suite)") |
             Opt(g_cfg.expect_mdts, "n")["--expect-mdts"]("fail unless Identify reports this MDTS") |
             Opt(g_cfg.expect_queues, "n")["--expect-queues"]("fail unless this many I/O queue pairs are granted") |
             Opt(g_cfg.expect_lba, "bytes")["--expect-lba"]("fail unless namespace 1 has this LBA size") |
             Opt(g_cfg.expect_namespaces, "n")["--expect-namespaces"]("fail unless this many namespaces are active") |
             Opt(g_cfg.expect_cmb_mb, "MiB")["--expect-cmb"]("check a controller memory buffer of this size") |
             Opt(g_cfg.expect_fault_log)["--expect-fault-log"]("require the IOMMU fault report in /dev/kmsg");
  session.cli(cli);
  if (const int rc = session.applyCommandLine(argc, argv); rc != 0) return rc;
  if (g_cfg.device.empty()) {
    std::fprintf(stderr,
                 "gpunvme_vfio_suite: --device is required, e.g. --device vfio:0000:0b:00.0\n"
                 "DESTRUCTIVE: overwrites the first 64 MiB of every namespace. See docs/vfio.md.\n%s",
                 host::device_string_help());
    return 2;
  }
  return session.run();
}
