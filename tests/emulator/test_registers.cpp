// BAR0 layout and the CC/CSTS handshake: enable, disable, CC validation, shutdown.
#include <sys/resource.h>

#include "tests/emulator/harness.h"

using namespace emutest;

TEST_CASE("BAR0: CAP, VS and doorbell layout", "[emulator][registers]") {
  Harness h("emu:ram,size=1M,queues=4,mqes=255,dstrd=2,to=3");
  const nvme::Cap cap = h.cap();
  CHECK(cap.mqes() == 255);
  CHECK(cap.contiguous_queues_required());
  CHECK(cap.dstrd() == 2);
  CHECK(cap.to_500ms_units() == 3);
  CHECK(cap.nvm_command_set());
  CHECK(cap.mpsmin() == 0);
  CHECK(cap.mpsmax() >= cap.mpsmin());
  const nvme::Vs vs{h.read32(nvme::reg::kVs)};
  CHECK(vs.major() == 1);
  CHECK(vs.minor() == 4);
  CHECK(h.ctrl().bar0_size() % 4096 == 0);
  CHECK(h.ctrl().bar0_size() >= nvme::bar0_bytes_for(4, 2));
  CHECK(reinterpret_cast<uintptr_t>(h.ctrl().bar0()) % 4096 == 0);
  CHECK(h.csts().raw == 0);
  // CAP is read-only: a stray write is undone.
  h.write32(nvme::reg::kCap, 0);
  CHECK(wait_until([&] { return nvme::mmio_read64(h.ctrl().bar0()) == cap.raw; }));
  std::string why;
#if !GPUNVME_HAVE_CUDA
  CHECK(h.ctrl().bar0_for_gpu(&why) == nullptr);
  CHECK_FALSE(why.empty());
#endif
}

TEST_CASE("enable / disable handshake", "[emulator][registers]") {
  Harness h("emu:ram,size=1M,ready_ms=20");
  const auto t0 = std::chrono::steady_clock::now();
  h.enable();
  CHECK(std::chrono::steady_clock::now() - t0 >= 20ms);  // the configured ready delay
  CHECK(h.csts().rdy());
  CHECK_FALSE(h.csts().cfs());
  REQUIRE(h.disable());
  CHECK(h.csts().raw == 0);
  // Re-enable after a reset works and the admin queue starts over.
  h.enable();
  auto c = h.admin_cmd(nvme::make_get_features(nvme::feature::kArbitration));
  CHECK(status_of(c).ok());
  CHECK(c.sqhd == 1);
  REQUIRE(h.disable());
}

TEST_CASE("CC validation at enable raises CSTS.CFS and never RDY", "[emulator][registers]") {
  Harness h("emu:ram,size=1M,ready_ms=0");
  struct Bad {
    const char* what;
    nvme::Cc cc;
  } cases[] = {
      {"IOSQES", Harness::good_cc().with_iosqes(5)},
      {"IOCQES", Harness::good_cc().with_iocqes(5)},
      {"MPS above MPSMAX", Harness::good_cc().with_mps(h.cap().mpsmax() + 1)},
      {"CSS", Harness::good_cc().with_css(1)},
      {"AMS", Harness::good_cc().with_ams(1)},
  };
  for (const Bad& b : cases) {
    INFO(b.what);
    CHECK_FALSE(h.try_enable(16, b.cc, 500ms));
    CHECK(h.csts().cfs());
    CHECK_FALSE(h.csts().rdy());
    CHECK_FALSE(h.ctrl().fatal_reason().empty());
    REQUIRE(h.disable());  // reset clears CFS
  }
  // Admin queue not mapped for DMA: ASQ points at memory nobody mapped.
  h.write32(nvme::reg::kAqa, nvme::Aqa::make(16, 16).raw);
  h.write64(nvme::reg::kAsq, 0x1000);
  h.write64(nvme::reg::kAcq, 0x2000);
  h.write32(nvme::reg::kCc, Harness::good_cc().raw);
  CHECK(wait_until([&] { return h.csts().cfs(); }));
  CHECK_FALSE(h.csts().rdy());
  REQUIRE(h.disable());
  // And a good configuration then comes up.
  h.enable();
}

TEST_CASE("normal shutdown: SHST occurring then complete, RDY stays", "[emulator][registers]") {
  Harness h("emu:ram,size=1M,ready_ms=10");
  h.enable();
  h.write32(nvme::reg::kCc, Harness::good_cc().with_shn(nvme::cc::kShnNormal).raw);
  CHECK(wait_until([&] { return h.csts().shst() == nvme::csts::kShstOccurring; }));
  CHECK(h.csts().rdy());
  CHECK(wait_until([&] { return h.csts().shst() == nvme::csts::kShstComplete; }));
  CHECK(h.csts().rdy());
  // After shutdown the controller processes no more commands.
  h.submit(h.admin(), nvme::make_get_features(nvme::feature::kArbitration));
  CHECK_FALSE(h.poll(h.admin(), 50ms).has_value());
  REQUIRE(h.disable());
  CHECK(h.csts().shst() == nvme::csts::kShstNormal);
  h.enable();
  CHECK(status_of(h.admin_cmd(nvme::make_get_features(nvme::feature::kArbitration))).ok());
}

TEST_CASE("abrupt shutdown completes too", "[emulator][registers]") {
  Harness h("emu:ram,size=1M,ready_ms=1");
  h.enable();
  h.write32(nvme::reg::kCc, Harness::good_cc().with_shn(nvme::cc::kShnAbrupt).raw);
  CHECK(wait_until([&] { return h.csts().shst() == nvme::csts::kShstComplete; }));
  CHECK(h.csts().rdy());
}

TEST_CASE("disable drops I/O queues", "[emulator][registers]") {
  Harness h("emu:ram,size=1M,ready_ms=1");
  h.enable();
  h.create_pair(1, 16);
  REQUIRE(h.disable());
  h.enable();
  // QID 1 no longer exists, and Number of Queues is negotiable again.
  auto c = h.admin_cmd(nvme::make_delete_io_sq(1));
  CHECK(is_status(c, nvme::sct::kCommandSpecific, nvme::sc::kInvalidQueueIdentifier));
  h.create_pair(1, 16);
}

TEST_CASE("an idle controller sleeps instead of spinning", "[emulator][registers]") {
  Harness h("emu:null,threads=2,ready_ms=0");
  h.enable();
  h.create_pair(1, 8);
  std::this_thread::sleep_for(20ms);  // past the brief spin
  rusage r0{}, r1{};
  getrusage(RUSAGE_SELF, &r0);
  const auto t0 = std::chrono::steady_clock::now();
  std::this_thread::sleep_for(300ms);
  getrusage(RUSAGE_SELF, &r1);
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const auto secs = [](const timeval& t) { return double(t.tv_sec) + double(t.tv_usec) / 1e6; };
  const double cpu = secs(r1.ru_utime) - secs(r0.ru_utime) + secs(r1.ru_stime) - secs(r0.ru_stime);
  INFO("cpu " << cpu << " s over " << wall << " s with 3 controller threads");
  CHECK(cpu < 0.25 * wall);
}
