// `gpunvme doctor` end to end (the built binary, GPUNVME_BIN): exit statuses, --json, usage errors,
// on a fabricated tree (GPUNVME_DOCTOR_ROOT) and on this machine as it is; and `gpunvme read`, the
// read-only first contact of docs/hardware.md, against an emulated image whose bytes are known.
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "tests/cli_run.h"
#include "tests/doctor/fake_tree.h"

using namespace doctor_test;
using Catch::Matchers::ContainsSubstring;

namespace {

cli_test::Run run(const std::string& env, const std::string& args, const char* command = "doctor") {
  return cli_test::run_gpunvme(std::string(command) + " " + args, env);
}

}  // namespace

TEST_CASE("gpunvme doctor: exit status 0/3 on a ready tree, 1 when a check blocks", "[doctor][cli]") {
  if (!std::getenv("GPUNVME_BIN")) SKIP("GPUNVME_BIN is not set (meson sets it to the built gpunvme)");
  FakeTree t;
  t.healthy();
  t.file("/dev/vfio/14", "", 0666);
  const std::string env = "GPUNVME_DOCTOR_ROOT=" + t.root();
  auto r = run(env, std::string("--device vfio:") + kDrive);
  INFO(r.out);
  // This machine's GPU (or its absence) decides between ready and ready-with-warnings.
  CHECK((r.rc == 0 || r.rc == 3));
  CHECK_THAT(r.out, ContainsSubstring("IOMMU on"));
  CHECK_THAT(r.out, ContainsSubstring("bound to vfio-pci"));
  t.bind(kDrive, "nvme");
  r = run(env, std::string("--device ") + kDrive + " --json");
  INFO(r.out);
  CHECK(r.rc == 1);
  CHECK_THAT(r.out, ContainsSubstring("\"id\": \"vfio_driver\", \"status\": \"fail\""));
  CHECK_THAT(r.out, ContainsSubstring("\"exit_status\": 1"));
  CHECK_THAT(r.out, ContainsSubstring("sudo scripts/setup_vfio.sh bind 0000:0b:00.0"));
}

TEST_CASE("gpunvme doctor: usage errors exit 2, --help documents the exit statuses", "[doctor][cli]") {
  if (!std::getenv("GPUNVME_BIN")) SKIP("GPUNVME_BIN is not set (meson sets it to the built gpunvme)");
  auto r = run("", "--device emu:ram,size=1G");
  CHECK(r.rc == 2);
  CHECK_THAT(r.out, ContainsSubstring("real drives"));
  r = run("", "--device vfio:0b:00");
  CHECK(r.rc == 2);
  CHECK_THAT(r.out, ContainsSubstring("not a PCI address"));
  r = run("", "--bogus");
  CHECK(r.rc == 2);
  r = run("", "--help");
  CHECK(r.rc == 0);
  CHECK_THAT(r.out, ContainsSubstring("3  ready, with warnings"));
}

TEST_CASE("gpunvme doctor --json on this machine: one object, a documented exit status", "[doctor][cli][real]") {
  if (!std::getenv("GPUNVME_BIN")) SKIP("GPUNVME_BIN is not set (meson sets it to the built gpunvme)");
  const auto r = run("", "--json");
  INFO(r.out);
  CHECK((r.rc == 0 || r.rc == 1 || r.rc == 3));
  CHECK(r.out.rfind("{\n  \"tool\": \"gpunvme doctor\"", 0) == 0);
  CHECK_THAT(r.out, ContainsSubstring("\"exit_status\": " + std::to_string(r.rc)));
  CHECK_THAT(r.out, ContainsSubstring("\"id\": \"gpu\""));
}

TEST_CASE("gpunvme read copies blocks out byte-exact and writes nothing", "[read][cli]") {
  if (!std::getenv("GPUNVME_BIN")) SKIP("GPUNVME_BIN is not set (meson sets it to the built gpunvme)");
  FakeTree t;  // a scratch directory
  const std::string img = t.root() + "/disk.img", out = t.root() + "/out.bin";
  std::vector<char> disk(1 << 20);
  std::mt19937_64 rng(5);
  for (auto& c : disk) c = char(rng());
  std::ofstream(img, std::ios::binary).write(disk.data(), std::streamsize(disk.size()));
  const std::string dev = "--device emu:" + img + ",size=1M,lba=4096";
  auto r = run("", dev + " --lba 3 --bytes 12K --out " + out, "read");
  INFO(r.out);
  REQUIRE(r.rc == 0);
  std::ifstream f(out, std::ios::binary);
  const std::vector<char> got((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  REQUIRE(got.size() == 12288u);
  CHECK(std::equal(got.begin(), got.end(), disk.begin() + 3 * 4096));
  std::ifstream again(img, std::ios::binary);
  const std::vector<char> after((std::istreambuf_iterator<char>(again)), std::istreambuf_iterator<char>());
  CHECK(after == disk);
  r = run("", dev + " --bytes 1000", "read");
  CHECK(r.rc == 2);
  CHECK_THAT(r.out, ContainsSubstring("multiple of the 4096-byte block"));
  r = run("", dev + " --lba 255 --bytes 8K", "read");
  CHECK(r.rc == 2);
  CHECK_THAT(r.out, ContainsSubstring("past the end"));
}
