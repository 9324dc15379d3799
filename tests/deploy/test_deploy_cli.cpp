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
