// The named drive profiles. Numbers are the vendors' rated figures (sequential MB/s are decimal,
// 4 KiB random IOPS at high queue depth); latencies are typical 4 KiB QD1 values for TLC drives of the
// class. docs/drives.md gives the source of each value and how `par` was derived.
#include "host/emulator/drive_profiles.h"

namespace gpunvme::emu {
namespace {

constexpr uint64_t us(uint64_t n) { return n * 1000; }

// par = the smallest multiple of 16 >= 1.4 x read IOPS x mean read latency: by Little's law the
// rated IOPS is then reached (and capped by `iops`) a little before the drive runs out of units,
// as drives reach their rated IOPS at high queue depth rather than exactly at one.
DriveParams sn530() {
  DriveParams p;
  p.name = "sn530";  // WD PC SN530 1 TB: PCIe 3.0 x4, DRAM-less (HMB), 96-layer TLC
  p.read_bytes_per_s = 2.4e9;
  p.write_bytes_per_s = 1.95e9;
  p.read_iops = 370e3;
  p.write_iops = 370e3;
  p.read_p50_ns = us(85);
  p.read_p99_ns = us(220);
  p.write_p50_ns = us(30);
  p.write_p99_ns = us(100);
  p.parallelism = 48;
  return p;
}

DriveParams pcie4() {
  DriveParams p;
  p.name = "pcie4";  // WD_BLACK SN850X 2 TB: PCIe 4.0 x4, DRAM, 112-layer TLC
  p.read_bytes_per_s = 7.3e9;
  p.write_bytes_per_s = 6.6e9;
  p.read_iops = 1.2e6;
  p.write_iops = 1.1e6;
  p.read_p50_ns = us(60);
  p.read_p99_ns = us(150);
  p.write_p50_ns = us(20);
  p.write_p99_ns = us(60);
  p.parallelism = 112;
  return p;
}

DriveParams pcie5() {
  DriveParams p;
  p.name = "pcie5";  // Samsung 9100 PRO 2 TB: PCIe 5.0 x4, DRAM, 236-layer TLC
  p.read_bytes_per_s = 14.7e9;
  p.write_bytes_per_s = 13.4e9;
  p.read_iops = 1.85e6;
  p.write_iops = 2.6e6;
  p.read_p50_ns = us(50);
  p.read_p99_ns = us(120);
  p.write_p50_ns = us(15);
  p.write_p99_ns = us(45);
  p.parallelism = 144;
  return p;
}

}  // namespace

std::optional<DriveParams> drive_profile(std::string_view name) {
  if (name == "none") return DriveParams{};
  if (name == "sn530") return sn530();
  if (name == "pcie4") return pcie4();
  if (name == "pcie5") return pcie5();
  return std::nullopt;
}

const char* drive_profile_names() { return "sn530|pcie4|pcie5|none"; }

}  // namespace gpunvme::emu
