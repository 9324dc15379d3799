// End-to-end runs of the built `gpunvme` binary (path in GPUNVME_BIN, set by meson): deploy, ls,
// verify on an emulated image; the printed dd route followed literally; errors that name the fix.
#include <sys/wait.h>

#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>

#include "tests/deploy/cli_run.h"
#include "tests/deploy/deploy_fixture.h"

using namespace deploy_test;
using Catch::Matchers::ContainsSubstring;


TEST_CASE("gpunvme deploy / ls / verify on an emulated image file", "[deploy][cli]") {
  if (!std::getenv("GPUNVME_BIN")) SKIP("GPUNVME_BIN is not set (meson sets it to the built gpunvme)");
  TempPath img, model_path;
  write_file(model_path.path, make_model(2u << 20, "cli model", 5));
  const std::string dev = "--device emu:" + img.path;

  auto r = run("deploy " + model_path.path + " " + dev + ",size=16M,lba=4096 --start-lba 300");
  INFO(r.out);
  REQUIRE(r.rc == 0);
  CHECK_THAT(r.out, ContainsSubstring("deployed 'cli model'"));
  CHECK_THAT(r.out, ContainsSubstring("LBA 300.."));

  r = run("ls " + dev + ",lba=4096 --json --experts");
  INFO(r.out);
  REQUIRE(r.rc == 0);
  CHECK_THAT(r.out, ContainsSubstring("\"start_lba\": 300"));
  CHECK_THAT(r.out, ContainsSubstring("\"model\": \"cli model\""));
  CHECK_THAT(r.out, ContainsSubstring("\"projection\": \"down\""));

  r = run("verify " + dev + ",lba=4096 --against " + model_path.path);
  INFO(r.out);
  CHECK(r.rc == 0);
  CHECK_THAT(r.out, ContainsSubstring("OK: 1/1 chunks match"));

  // One flipped byte in the image: verify fails (exit 1) naming the chunk's LBA range.
  const uint8_t x = 0xA5;
  pwrite_file(img.path, 300 * 4096 + 100000, &x, 1);
  r = run("verify " + dev + ",lba=4096");
  INFO(r.out);
  CHECK(r.rc == 1);
  CHECK_THAT(r.out, ContainsSubstring("chunk 0    LBA 300.."));
  CHECK_THAT(r.out, ContainsSubstring("FAIL"));

  // Errors that name the fix.
  r = run("deploy " + model_path.path);
  CHECK(r.rc == 2);
  CHECK_THAT(r.out, ContainsSubstring("--device is required"));
  r = run("deploy /etc/hostname " + dev + ",lba=4096");
  CHECK(r.rc == 1);
  CHECK_THAT(r.out, ContainsSubstring("GGUF"));
  r = run("deploy --help");
  CHECK(r.rc == 0);
  CHECK_THAT(r.out, ContainsSubstring("--print-dd"));
  CHECK_THAT(r.out, ContainsSubstring("emu:"));
}

TEST_CASE("gpunvme deploy --print-dd: the printed commands, run as printed, give a verified model", "[deploy][cli][dd]") {
  if (!std::getenv("GPUNVME_BIN")) SKIP("GPUNVME_BIN is not set (meson sets it to the built gpunvme)");
  if (std::system("command -v dd >/dev/null 2>&1") != 0) SKIP("no dd on this machine");
  TempPath img, model_path;
  write_file(model_path.path, make_model(3u << 20, "dd route", 6));
  const std::string dev = "emu:" + img.path + ",size=16M";
  auto r = run("deploy " + model_path.path + " --device " + dev + " --print-dd");
  INFO(r.out);
  REQUIRE(r.rc == 0);
  CHECK_THAT(r.out, ContainsSubstring("bs=1M seek=1 oflag=direct conv=fsync,notrunc status=progress"));
  // Run every non-comment line (dd, then the --record-only step, then verify) as printed.
  std::istringstream lines(r.out);
  std::string line;
  int steps = 0;
  while (std::getline(lines, line)) {
    if (line.empty() || line[0] == '#') continue;
    if (line.rfind("gpunvme ", 0) == 0) {
      auto rr = run(line.substr(8));
      INFO(line << "\n" << rr.out);
      CHECK(rr.rc == 0);
      if (line.find("verify") != std::string::npos) CHECK_THAT(rr.out, ContainsSubstring("OK: 1/1 chunks match"));
    } else {
      INFO(line);
      CHECK(std::system((line + " 2>/dev/null").c_str()) == 0);
    }
    ++steps;
  }
  CHECK(steps == 3);
  r = run("ls --device " + dev);
  INFO(r.out);
  CHECK(r.rc == 0);
  CHECK_THAT(r.out, ContainsSubstring("found by   deploy record at LBA 0"));
}

TEST_CASE("gpunvme verify: a read error is the device's (re-deploy cannot help), a CRC mismatch the bytes'", "[deploy][cli]") {
  if (!std::getenv("GPUNVME_BIN")) SKIP("GPUNVME_BIN is not set (meson sets it to the built gpunvme)");
  TempPath img, model_path;
  write_file(model_path.path, make_model(2u << 20, "read errors", 6));
  REQUIRE(run("deploy " + model_path.path + " --device emu:" + img.path + ",size=16M").rc == 0);
  // Every read from the nth on fails for good (Unrecovered Read Error, DNR): wherever it lands -- the
  // record, the header, a chunk -- verify names the LBAs and the status and never advises a re-deploy.
  // Past verify's last read the fault never fires: that run is clean and ends the loop.
  bool chunk_seen = false, header_seen = false;
  for (int nth = 1;; ++nth) {
    const auto r = run("verify --device emu:" + img.path + ",fault=error:op=read:sct=2:sc=0x81:dnr=1:times=0:nth=" +
                       std::to_string(nth));
    INFO("nth=" << nth << "\n" << r.out);
    if (r.rc == 0) {
      CHECK_THAT(r.out, ContainsSubstring("OK: 1/1 chunks match"));
      break;
    }
    REQUIRE(nth < 100);
    CHECK(r.rc == 1);
    CHECK_THAT(r.out, ContainsSubstring("Unrecovered Read Error") && ContainsSubstring("read of LBA") &&
                          ContainsSubstring("re-deploying will not help until"));
    CHECK_THAT(r.out, !ContainsSubstring("to repair it"));
    chunk_seen |= r.out.find("READ ERROR") != std::string::npos;
    header_seen |= r.out.find("read error: the GGUF header") != std::string::npos;
  }
  CHECK(chunk_seen);
  CHECK(header_seen);
  // A flipped byte is the bytes': re-deploy repairs it, and no read error is claimed.
  const uint8_t x = 0x5A;
  pwrite_file(img.path, 2048 * 512 + 300000, &x, 1);
  const auto r = run("verify --device emu:" + img.path);
  INFO(r.out);
  CHECK(r.rc == 1);
  CHECK_THAT(r.out, ContainsSubstring("re-deploy the model (gpunvme deploy MODEL.gguf --device emu:") &&
                        ContainsSubstring("to repair it") && !ContainsSubstring("failed to read"));
}
