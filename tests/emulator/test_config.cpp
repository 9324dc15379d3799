// The "emu:" device-string parser.
#include <catch2/catch_test_macros.hpp>

#include <cstdio>
#include <string>
#include <unistd.h>

#include "host/emulator/config.h"
#include "host/error.h"

using namespace gpunvme;
using gpunvme::emu::parse_emu_device;

TEST_CASE("device strings: RAM and null backings with options", "[emulator][config]") {
  auto c = parse_emu_device("emu:ram,size=256M,lba=4096");
  REQUIRE(c.namespaces.size() == 1);
  CHECK(c.namespaces[0].backing == emu::Backing::kRam);
  CHECK(c.namespaces[0].size_bytes == 256ull << 20);
  CHECK(c.namespaces[0].lba_bytes == 4096);
  CHECK(c.name == "emu:ram,size=256M,lba=4096");

  auto n = parse_emu_device("null,mdts=5,queues=8,mqes=255,dstrd=2,namespaces=3,threads=4,poll=spin,to=2,ready_ms=7");
  REQUIRE(n.namespaces.size() == 3);
  CHECK(n.namespaces[2].backing == emu::Backing::kNull);
  CHECK(n.mdts == 5);
  CHECK(n.max_io_queues == 8);
  CHECK(n.mqes == 255);
  CHECK(n.dstrd == 2);
  CHECK(n.io_threads == 4);
  CHECK(n.poll == emu::PollPolicy::kSpin);
  CHECK(n.to_500ms == 2);
  CHECK(n.ready_delay == std::chrono::milliseconds(7));
  CHECK(n.name == "emu:null,mdts=5,queues=8,mqes=255,dstrd=2,namespaces=3,threads=4,poll=spin,to=2,ready_ms=7");

  auto d = parse_emu_device("emu:ram");
  CHECK(d.namespaces[0].size_bytes == 1ull << 30);
  CHECK(d.namespaces[0].lba_bytes == 512);
}

TEST_CASE("device strings: file backing", "[emulator][config]") {
  char tmpl[] = "/tmp/gpunvme-emu-cfg-XXXXXX";
  const int fd = mkstemp(tmpl);
  REQUIRE(fd >= 0);
  close(fd);
  const std::string path = tmpl;
  auto c = parse_emu_device("emu:" + path);  // exists: its size is used when opening
  CHECK(c.namespaces[0].backing == emu::Backing::kFile);
  CHECK(c.namespaces[0].path == path);
  CHECK(c.namespaces[0].size_bytes == 0);
  auto two = parse_emu_device("emu:" + path + ",size=1M,namespaces=2");
  CHECK(two.namespaces[1].path == path + ".2");
  std::remove(tmpl);

  try {
    parse_emu_device("emu:/nonexistent/dir/x.img");
    FAIL("expected an error");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::kNotFound);
    CHECK(std::string(e.what()).find("does not exist; pass size=") != std::string::npos);
  }
}

TEST_CASE("device strings: bad keys and values list the valid keys", "[emulator][config]") {
  const char* bad[] = {
      "emu:",           "emu:ram,lba=1024", "emu:ram,size=0",   "emu:ram,size=12Q", "emu:ram,mdts=16",
      "emu:ram,queues=0", "emu:ram,mqes=0",   "emu:ram,dstrd=9",  "emu:ram,namespaces=0", "emu:ram,threads=0",
      "emu:ram,poll=busy", "emu:ram,bogus=1",  "emu:ram,size",     "emu:ram,,lba=512", "emu:ram,size=1000",
      "emu:ram,to=0",   "emu:ram,queues=abc",
      // strict numbers: no sign, no hex, no octal-looking leading zeros
      "emu:ram,size=-1", "emu:ram,size=0x100000", "emu:ram,size=0100M", "emu:ram,queues=010", "emu:ram,mdts=-1",
      "emu:ram,queues=+4",
      // a key given twice is refused (the last one used to win silently)
      "emu:ram,size=1G,size=2G", "emu:ram,lba=512,threads=2,lba=4096", "emu:ram,drive=pcie4,drive=pcie5",
  };
  for (const char* s : bad) {
    INFO(s);
    try {
      parse_emu_device(s);
      FAIL("expected an error");
    } catch (const Error& e) {
      CHECK(e.kind() == ErrorKind::kInvalidArgument);
      CHECK(std::string(e.what()).find("valid keys: lba=512|4096, size=") != std::string::npos);
    }
  }
}

TEST_CASE("device strings: a repeated key and a bad number say what is wrong", "[emulator][config]") {
  auto message = [](const std::string& spec) {
    try {
      parse_emu_device(spec);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  CHECK(message("emu:ram,size=1G,threads=2,size=2G").find("key \"size\" is given twice") != std::string::npos);
  CHECK(message("emu:ram,size=0100M").find("size: '0100M' has a leading zero") != std::string::npos);
  CHECK(message("emu:ram,size=-1").find("size: '-1' is not a size") != std::string::npos);
  CHECK(message("emu:ram,queues=0x10").find("queues: '0x10' is not a number") != std::string::npos);
  CHECK(parse_emu_device("emu:ram,size=100M,queues=10").namespaces[0].size_bytes == 100ull << 20);
}

TEST_CASE("device strings: a backing that is neither a file nor a block device is named", "[emulator][config]") {
  // emu:/dev/null,size=1G used to fail later with "...: Success".
  for (const char* spec : {"emu:/dev/null,size=1G", "emu:/dev/null", "emu:/tmp,size=1M"}) {
    INFO(spec);
    try {
      parse_emu_device(spec);
      FAIL("expected an error");
    } catch (const Error& e) {
      const std::string what = e.what();
      CHECK(e.kind() == ErrorKind::kInvalidArgument);
      CHECK((what.find("is a character device") != std::string::npos || what.find("is a directory") != std::string::npos));
      CHECK(what.find("regular file or a block device") != std::string::npos);
      CHECK(what.find("Success") == std::string::npos);
    }
  }
}
