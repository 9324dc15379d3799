// gpunvme doctor's checks on fabricated sysfs/procfs/dev trees: a ready machine, then one thing
// broken at a time, each time the right check fails or warns and names the right fix.
#include <unistd.h>

#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include "runtime/doctor/doctor.h"
#include "runtime/doctor/tree.h"
#include "tests/doctor/fake_tree.h"

using namespace gpunvme;
using namespace doctor_test;
using Catch::Matchers::ContainsSubstring;
using doctor::Severity;

namespace {

doctor::Environment env_for(const FakeTree& t, const std::string& device = std::string("vfio:") + kDrive) {
  doctor::Environment e;
  e.root = t.root();
  e.device = device;
  e.euid = 0;
  e.gpu = h100();
  return e;
}

const doctor::Check& get(const doctor::Report& r, const std::string& id) {
  const doctor::Check* c = r.find(id);
  INFO("check " << id << " in:\n" << doctor::render_text(r));
  REQUIRE(c != nullptr);
  return *c;
}

}  // namespace

TEST_CASE("a ready machine passes every check with exit status 0", "[doctor]") {
  FakeTree t;
  t.healthy();
  const auto r = doctor::run_checks(env_for(t));
  INFO(doctor::render_text(r));
  for (const auto& c : r.checks) {
    INFO(c.id << ": " << c.summary);
    CHECK((c.severity == Severity::kOk || c.severity == Severity::kInfo));
    CHECK(!c.summary.empty());
  }
  CHECK(r.exit_status() == doctor::kExitReady);
  CHECK_THAT(get(r, "iommu").summary, ContainsSubstring("IOMMU on"));
  CHECK_THAT(get(r, "iommu").summary, ContainsSubstring("iommu=pt"));
  CHECK_THAT(get(r, "iommu_group").summary, ContainsSubstring("group 14"));
  CHECK_THAT(get(r, "gpu").summary, ContainsSubstring("H100"));
  CHECK_THAT(get(r, "gpu").summary, ContainsSubstring("BAR1 96 GiB"));
  CHECK_THAT(get(r, "gpu").summary, ContainsSubstring("570.124.06 open"));
  const std::string json = doctor::render_json(r, env_for(t));
  CHECK_THAT(json, ContainsSubstring("\"result\": \"ready\""));
  CHECK_THAT(json, ContainsSubstring("\"exit_status\": 0"));
  CHECK_THAT(json, ContainsSubstring("\"id\": \"gpu_bar_map\", \"status\": \"ok\""));
}

TEST_CASE("IOMMU off: the iommu check fails with the vendor's kernel argument", "[doctor]") {
  FakeTree t;
  t.healthy();
  t.remove("/sys/class/iommu/dmar0");
  t.remove("/sys/kernel/iommu_groups");
  t.remove(std::string("/sys/bus/pci/devices/") + kDrive + "/iommu_group");
  t.file("/proc/cmdline", "BOOT_IMAGE=/vmlinuz ro quiet");
  SECTION("Intel") {
    const auto r = doctor::run_checks(env_for(t));
    const auto& c = get(r, "iommu");
    CHECK(c.severity == Severity::kFail);
    CHECK_THAT(c.fix, ContainsSubstring("VT-d"));
    CHECK_THAT(c.fix, ContainsSubstring("intel_iommu=on iommu=pt"));
    CHECK(get(r, "iommu_group").severity == Severity::kFail);
    CHECK(get(r, "dev_vfio").severity == Severity::kFail);
    CHECK(r.exit_status() == doctor::kExitBlocked);
  }
  SECTION("AMD") {
    t.file("/proc/cpuinfo", "processor\t: 0\nvendor_id\t: AuthenticAMD");
    const auto report_c = doctor::run_checks(env_for(t));
    const auto& c = get(report_c, "iommu");
    CHECK_THAT(c.fix, ContainsSubstring("amd_iommu=on"));
    CHECK_THAT(c.fix, ContainsSubstring("AMD-Vi"));
  }
  SECTION("asked for on the command line but absent: firmware or VM") {
    t.file("/proc/cmdline", "ro intel_iommu=on");
    CHECK_THAT(get(doctor::run_checks(env_for(t)), "iommu").summary, ContainsSubstring("firmware"));
  }
  SECTION("no-IOMMU mode enabled: a warning, and hugepages become a requirement") {
    t.file("/sys/module/vfio/parameters/enable_unsafe_noiommu_mode", "Y");
    t.hugepages(8, 8);  // 16 MiB, far below the 256 MiB of buffers
    const auto r = doctor::run_checks(env_for(t));
    CHECK(get(r, "iommu").severity == Severity::kWarn);
    CHECK(get(r, "noiommu").severity == Severity::kWarn);
    const auto& h = get(r, "hugepages");
    CHECK(h.severity == Severity::kFail);
    CHECK_THAT(h.fix, ContainsSubstring("scripts/setup_vfio.sh hugepages"));
  }
}

TEST_CASE("no-IOMMU availability is reported from the vfio module parameter", "[doctor]") {
  FakeTree t;
  t.healthy();
  CHECK(get(doctor::run_checks(env_for(t)), "noiommu").facts.front().second == "available");
  t.remove("/sys/module/vfio/parameters");
  CHECK(get(doctor::run_checks(env_for(t)), "noiommu").facts.front().second == "absent");
  t.remove("/sys/module/vfio");
  CHECK(get(doctor::run_checks(env_for(t)), "noiommu").facts.front().second == "unknown");
}

TEST_CASE("an IOMMU group shared with a device on a host driver blocks, naming it", "[doctor]") {
  FakeTree t;
  t.healthy();
  t.pci("0000:0b:00.1", "0x040300", "snd_hda_intel", 14);
  t.pci("0000:00:01.0", "0x060400", "pcieport", 14);  // a bridge on pcieport keeps the group viable
  const auto r = doctor::run_checks(env_for(t));
  const auto& c = get(r, "iommu_group");
  CHECK(c.severity == Severity::kFail);
  CHECK_THAT(c.summary, ContainsSubstring("0000:0b:00.1 (snd_hda_intel)"));
  CHECK_THAT(c.summary, !ContainsSubstring("0000:00:01.0 (pcieport);"));
  CHECK_THAT(c.fix, ContainsSubstring("sudo scripts/setup_vfio.sh bind 0000:0b:00.1"));
  CHECK_THAT(c.fix, !ContainsSubstring("bind 0000:00:01.0"));
  CHECK_THAT(c.fix, ContainsSubstring("ACS"));
  CHECK(r.exit_status() == doctor::kExitBlocked);
  t.bind("0000:0b:00.1", "vfio-pci");
  CHECK(get(doctor::run_checks(env_for(t)), "iommu_group").severity == Severity::kOk);
}

TEST_CASE("a drive not on vfio-pci fails with the bind command", "[doctor]") {
  FakeTree t;
  t.healthy();
  t.remove("/dev/vfio/14");
  SECTION("on the kernel nvme driver") {
    t.bind(kDrive, "nvme");
    const auto report_c = doctor::run_checks(env_for(t));
    const auto& c = get(report_c, "vfio_driver");
    CHECK(c.severity == Severity::kFail);
    CHECK_THAT(c.summary, ContainsSubstring("kernel nvme driver"));
    CHECK_THAT(c.fix, ContainsSubstring("unmount"));
    CHECK_THAT(c.fix, ContainsSubstring("sudo scripts/setup_vfio.sh bind 0000:0b:00.0"));
  }
  SECTION("on no driver") {
    t.bind(kDrive, "");
    const auto r = doctor::run_checks(env_for(t));
    CHECK_THAT(get(r, "vfio_driver").summary, ContainsSubstring("no driver"));
    CHECK_THAT(get(r, "dev_vfio").summary, ContainsSubstring("/dev/vfio/14 is missing"));
  }
  SECTION("not an NVMe function, or not there") {
    t.file(std::string("/sys/bus/pci/devices/") + kDrive + "/class", "0x020000");
    CHECK_THAT(get(doctor::run_checks(env_for(t)), "device").summary, ContainsSubstring("not an NVMe controller"));
    const auto r = doctor::run_checks(env_for(t, "vfio:0000:0c:00.0"));
    CHECK(get(r, "device").severity == Severity::kFail);
    CHECK(r.find("vfio_driver") == nullptr);
  }
}

TEST_CASE("/dev/vfio access is judged for the running user", "[doctor]") {
  FakeTree t;
  t.healthy();
  auto e = env_for(t);
  uint32_t me = uint32_t(::getuid());
  if (me == 0) {  // root can hand the fake nodes to someone else
    me = 4242;
    REQUIRE(::chown((t.root() + "/dev/vfio/14").c_str(), me, me) == 0);
    REQUIRE(::chown((t.root() + "/dev/vfio/vfio").c_str(), me, me) == 0);
  }
  e.euid = me;
  CHECK(get(doctor::run_checks(e), "dev_vfio").severity == Severity::kOk);
  e.euid = me + 1;  // someone else: 0600 keeps them out
  const auto report_c = doctor::run_checks(e);
  const auto& c = get(report_c, "dev_vfio");
  CHECK(c.severity == Severity::kFail);
  CHECK_THAT(c.fix, ContainsSubstring("sudo chown $USER /dev/vfio/14"));
  e.euid = 0;
  CHECK(get(doctor::run_checks(e), "dev_vfio").severity == Severity::kOk);
}

TEST_CASE("a memlock limit below the pinned memory fails unless root", "[doctor]") {
  FakeTree t;
  t.healthy();
  t.memlock("65536");
  auto e = env_for(t);
  e.euid = 1000;
  const auto report_c = doctor::run_checks(e);
  const auto& c = get(report_c, "memlock");
  CHECK(c.severity == Severity::kFail);
  CHECK_THAT(c.summary, ContainsSubstring("64 KiB"));
  CHECK_THAT(c.fix, ContainsSubstring("ulimit -l unlimited"));
  CHECK_THAT(c.fix, ContainsSubstring("/etc/security/limits.conf"));
  e.buffer_bytes = 0;
  e.queues = 1;
  e.entries = 2;
  t.memlock(std::to_string(doctor::pinned_bytes_needed(e)));
  CHECK(get(doctor::run_checks(e), "memlock").severity == Severity::kOk);
  t.memlock(std::to_string(doctor::pinned_bytes_needed(e) - 1));
  CHECK(get(doctor::run_checks(e), "memlock").severity == Severity::kFail);
  e.euid = 0;
  CHECK(get(doctor::run_checks(e), "memlock").severity == Severity::kOk);
}

TEST_CASE("pinned memory budget grows with queues, entries and buffers", "[doctor]") {
  doctor::Environment e;
  e.queues = 1;
  e.entries = 1024;
  e.buffer_bytes = 0;
  const uint64_t one = doctor::pinned_bytes_needed(e);
  e.queues = 2;
  CHECK(doctor::pinned_bytes_needed(e) - one == 1024 * 80 + 1024 * 2048);
  e.buffer_bytes = 1 << 20;
  CHECK(doctor::pinned_bytes_needed(e) - one == 1024 * 80 + 1024 * 2048 + (1 << 20));
}

TEST_CASE("drive and GPU on different NUMA nodes warn with a numactl line", "[doctor]") {
  FakeTree t;
  t.healthy();
  t.file(std::string("/sys/bus/pci/devices/") + kGpu + "/numa_node", "1");
  const auto r = doctor::run_checks(env_for(t));
  const auto& c = get(r, "numa");
  CHECK(c.severity == Severity::kWarn);
  CHECK_THAT(c.fix, ContainsSubstring("numactl --cpunodebind=1 --membind=1"));
  CHECK(r.exit_status() == doctor::kExitWarnings);
}

TEST_CASE("a degraded PCIe link warns", "[doctor]") {
  FakeTree t;
  t.healthy();
  t.file(std::string("/sys/bus/pci/devices/") + kDrive + "/current_link_width", "2");
  const auto report_c = doctor::run_checks(env_for(t));
  const auto& c = get(report_c, "pcie_link");
  CHECK(c.severity == Severity::kWarn);
  CHECK_THAT(c.summary, ContainsSubstring("below its maximum x4"));
}

TEST_CASE("the GPU table: data-center expected, GeForce unlikely, GeForce Blackwell not tried", "[doctor][gpu-table]") {
  using host::BarMapVerdict;
  CHECK(host::assess_bar_mapping(h100()).verdict == BarMapVerdict::kExpected);
  CHECK(host::assess_bar_mapping(gpu("NVIDIA RTX A6000", 8, 6)).verdict == BarMapVerdict::kExpected);
  CHECK(host::assess_bar_mapping(gpu("NVIDIA RTX PRO 6000 Blackwell Workstation Edition", 12, 0)).verdict ==
        BarMapVerdict::kExpected);
  CHECK(host::assess_bar_mapping(gpu("NVIDIA GeForce RTX 4090", 8, 9)).verdict == BarMapVerdict::kUnlikely);
  CHECK(host::assess_bar_mapping(gpu("NVIDIA TITAN RTX", 7, 5)).verdict == BarMapVerdict::kUnlikely);
  const auto b = host::assess_bar_mapping(gpu("NVIDIA GeForce RTX 5090", 12, 0));
  CHECK(b.verdict == BarMapVerdict::kDoNotTry);
  CHECK_THAT(b.reason, ContainsSubstring("GPUNVME_GPU_BAR_MAP=force"));
  auto no_register = h100();
  no_register.host_register_supported = 0;
  CHECK(host::assess_bar_mapping(no_register).verdict == BarMapVerdict::kUnlikely);
  CHECK(host::assess_bar_mapping(host::GpuFacts{}).verdict == BarMapVerdict::kNoGpu);
}

TEST_CASE("GPU checks: a GeForce warns that doorbells go through the CPU; no GPU warns", "[doctor]") {
  FakeTree t;
  t.healthy();
  auto e = env_for(t);
  e.gpu = gpu("NVIDIA GeForce RTX 5090", 12, 0);
  auto r = doctor::run_checks(e);
  CHECK(get(r, "gpu_bar_map").severity == Severity::kWarn);
  CHECK_THAT(get(r, "gpu_bar_map").fix, ContainsSubstring("doorbell=auto"));
  CHECK(r.exit_status() == doctor::kExitWarnings);
  e.gpu = host::GpuFacts{};
  e.gpu.absent_why = "no CUDA GPU present";
  r = doctor::run_checks(e);
  CHECK(get(r, "gpu").severity == Severity::kWarn);
  CHECK_THAT(get(r, "gpu").summary, ContainsSubstring("no CUDA GPU present"));
  CHECK(get(r, "gpu_bar_map").severity == Severity::kInfo);
  e.gpu = gpu("Tesla P4", 6, 1);
  CHECK(get(doctor::run_checks(e), "gpu").severity == Severity::kFail);
}

TEST_CASE("doctor on this machine's real /sys and /proc runs and explains every problem", "[doctor][real]") {
  doctor::Environment e;
  e.euid = uint32_t(::geteuid());
  e.gpu = host::query_gpu(0);
  const auto r = doctor::run_checks(e);
  INFO(doctor::render_text(r));
  REQUIRE(r.find("iommu") != nullptr);
  for (const auto& c : r.checks) {
    INFO(c.id);
    CHECK(!c.summary.empty());
    if (c.severity == Severity::kFail) CHECK(!c.fix.empty());
  }
  const int s = r.exit_status();
  CHECK((s == doctor::kExitReady || s == doctor::kExitBlocked || s == doctor::kExitWarnings));
  // The machine verdict follows the IOMMU: without one (and without no-IOMMU mode) nothing can work.
  if (!r.find("iommu")->facts.empty() && r.find("iommu")->facts[0].second == "false" &&
      r.find("noiommu")->severity != Severity::kWarn)
    CHECK(s == doctor::kExitBlocked);
}

TEST_CASE("tree helpers parse limits and meminfo", "[doctor]") {
  CHECK(doctor::parse_memlock_limit("Max locked memory         8388608              8388608              bytes") ==
        8388608u);
  CHECK(doctor::parse_memlock_limit("Max locked memory         unlimited            unlimited            bytes") ==
        UINT64_MAX);
  CHECK(!doctor::parse_memlock_limit("Max open files 1024 1024 files").has_value());
  CHECK(doctor::meminfo_value("HugePages_Total:     12\nHugePages_Free:       3\n", "HugePages_Free") == 3u);
  CHECK(!doctor::meminfo_value("HugePages_Total:     12\n", "HugePages_Free").has_value());
}
