// The write guard (runtime/guard/write_guard.h) without a block device: which device strings are
// real, the --allow-write refusal, and the signature check on an in-memory namespace.
// test_write_guard.py runs every writing tool against a loop device.
#include <unistd.h>

#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>
#include <cstdio>
#include <cstring>
#include <string>

#include "runtime/deploy/safety.h"
#include "runtime/guard/write_guard.h"
#include "tests/model/mem_device.h"

using namespace gpunvme;
using Catch::Matchers::ContainsSubstring;

namespace {
std::string refusal(auto f) {
  try {
    f();
  } catch (const deploy::RefusedError& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST_CASE("real devices: vfio:, and emu: on a block device; RAM, null and files are not", "[guard]") {
  char tmpl[] = "/tmp/gpunvme-guard-XXXXXX";
  const int fd = mkstemp(tmpl);
  REQUIRE(fd >= 0);
  close(fd);
  CHECK(guard::real_device_reason("emu:ram,size=1M").empty());
  CHECK(guard::real_device_reason("emu:null").empty());
  CHECK(guard::real_device_reason(std::string("emu:") + tmpl + ",size=1M").empty());
  CHECK_THAT(guard::real_device_reason("vfio:0000:0b:00.0"), ContainsSubstring("real NVMe controller"));
  std::remove(tmpl);

  const guard::WritePermission none, allowed{.allow_write = true};
  const std::string why = refusal([&] { guard::check_write_allowed("vfio:0000:0b:00.0", none, "the demo writes"); });
  CHECK_THAT(why, ContainsSubstring("refusing to write to vfio:0000:0b:00.0"));
  CHECK_THAT(why, ContainsSubstring("the demo writes"));
  CHECK_THAT(why, ContainsSubstring("--allow-write"));
  CHECK(refusal([&] { guard::check_write_allowed("vfio:0000:0b:00.0", allowed, "x"); }).empty());
  CHECK(refusal([&] { guard::check_write_allowed("emu:ram", none, "x"); }).empty());
}

TEST_CASE("a filesystem or partition table needs --force, at LBA 0 or where the write starts", "[guard]") {
  model_test::MemDevice dev(512, 8192);
  const guard::WritePermission allowed{.allow_write = true}, forced{.allow_write = true, .force = true};
  CHECK(refusal([&] { guard::check_no_signatures(dev.io, 2048, allowed); }).empty());

  dev.bytes[2048 * 512 + 1080] = 0x53;  // ext4 superblock magic 0xEF53 where the write starts
  dev.bytes[2048 * 512 + 1081] = 0xEF;
  std::string why = refusal([&] { guard::check_no_signatures(dev.io, 2048, allowed); });
  CHECK_THAT(why, ContainsSubstring("ext2/3/4 filesystem at LBA 2050"));
  CHECK_THAT(why, ContainsSubstring("--force"));
  CHECK(refusal([&] { guard::check_no_signatures(dev.io, 0, allowed); }).empty());  // a write at 0 only scans 0
  CHECK(refusal([&] { guard::check_no_signatures(dev.io, 2048, forced); }).empty());

  // Bytes no prober knows (what a previous demo or nvme_perf run leaves) do not stop a tool; deploy's
  // scan still reports them.
  model_test::MemDevice used(512, 8192);
  for (size_t i = 0; i < 4096; ++i) used.bytes[i] = uint8_t(i * 7 + 1);
  CHECK(refusal([&] { guard::check_no_signatures(used.io, 0, allowed); }).empty());
  CHECK_FALSE(deploy::scan_device(used.io, 2048).empty());

  dev.bytes[510] = 0x55;  // an MBR with one partition at LBA 0
  dev.bytes[511] = 0xAA;
  dev.bytes[446 + 4] = 0x83;
  why = refusal([&] { guard::check_no_signatures(dev.io, 0, allowed); });
  CHECK_THAT(why, ContainsSubstring("MBR partition table with 1 partition at LBA 0"));
}
