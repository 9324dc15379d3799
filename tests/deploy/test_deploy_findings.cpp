// The raw-device safety findings (issue #14), each reproduced: unfinished deploys are refused by
// every reader, the signature scan sees what libblkid sees and any unknown data, --print-dd
// refuses what deploy refuses and quotes what it prints, --against and the model are checked as
// files, devices are locked, readers change nothing, start-LBA hints are not silently ignored.
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "host/device_lock.h"
#include "runtime/deploy/deploy.h"
#include "runtime/deploy/listing.h"
#include "runtime/deploy/safety.h"
#include "runtime/deploy/shell_quote.h"
#include "runtime/deploy/verify.h"
#include "runtime/gguf/gguf_error.h"
#include "runtime/model/detect.h"
#include "runtime/model/model_error.h"
#include "tests/deploy/cli_run.h"
#include "tests/deploy/deploy_fixture.h"

using namespace gpunvme;
using namespace deploy_test;
using Catch::Matchers::ContainsSubstring;

namespace {

void put_le(std::vector<uint8_t>& b, size_t off, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) b[off + i] = uint8_t(v >> (8 * i));
}

// Whether verify printed an OK verdict: its verdicts ("OK: n/n chunks match", the old "OK (header
// only)") start a line. Not a bare find("OK"): the random temp-file names in the output can hold "OK".
bool says_ok(const std::string& out) {
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);)
    if (line.rfind("OK", 0) == 0) return true;
  return false;
}

bool have_tool(const std::string& name) { return std::system(("command -v " + name + " >/dev/null 2>&1").c_str()) == 0; }

uint64_t file_size(const std::string& path) {
  struct stat st{};
  return ::stat(path.c_str(), &st) == 0 ? uint64_t(st.st_size) : 0;
}

// A child process holding `device`'s lock (DeviceLock, as a deploy or ls takes it) until this object dies.
struct LockHolder {
  pid_t pid = -1;
  LockHolder(const std::string& device, host::LockMode mode) {
    int ready[2];
    REQUIRE(::pipe(ready) == 0);
    pid = ::fork();
    if (pid == 0) {
      const host::DeviceLock lock = host::DeviceLock::acquire(device, 1, mode);
      const char held = lock.held() ? 'y' : 'n';
      if (::write(ready[1], &held, 1) != 1) ::_exit(1);
      ::pause();  // until killed: the kernel drops the lock with the process
      ::_exit(0);
    }
    char held = 0;
    REQUIRE(::read(ready[0], &held, 1) == 1);
    ::close(ready[0]);
    ::close(ready[1]);
    REQUIRE(held == 'y');
  }
  ~LockHolder() {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
  }
  LockHolder(const LockHolder&) = delete;
  LockHolder& operator=(const LockHolder&) = delete;
};

bool exists(const std::string& path) {
  struct stat st{};
  return ::lstat(path.c_str(), &st) == 0;
}

}  // namespace

TEST_CASE("#14.1 while a deploy writes, every reader sees an unfinished deploy, never a model", "[deploy][atomic]") {
  const uint32_t lba = GENERATE(512u, 4096u);
  TempPath old_path, new_path;
  write_file(old_path.path, make_model(1u << 20, "old model", 21));
  const auto model = make_model(3u << 20, "new model", 22);
  write_file(new_path.path, model);
  deploy::Device dev("emu:ram,size=32M,lba=" + std::to_string(lba));
  deploy::deploy_model(dev, old_path.path);
  const uint64_t start = (1u << 20) / lba;
  int seen = 0;
  deploy::DeployOptions opt;
  opt.piece_bytes = 1u << 20;
  opt.progress = [&](uint64_t, uint64_t) {
    // The old record is gone, the new one says "in progress", the start block holds no magic.
    CHECK_THROWS_AS(model::detect_model(dev.block_io()), model::UnfinishedDeployError);
    CHECK_THROWS_WITH(deploy::list_model(dev.block_io()), ContainsSubstring("did not finish") &&
                                                              ContainsSubstring("new model") &&
                                                              ContainsSubstring("Re-run `gpunvme deploy"));
    CHECK_THROWS_WITH(deploy::verify_device(dev), ContainsSubstring("did not finish"));
    CHECK_THROWS_AS(model::detect_model(dev.block_io(), start), model::UnfinishedDeployError);
    std::vector<uint8_t> blk(lba);
    dev.block_io().read(start, 1, blk.data());
    CHECK(std::memcmp(blk.data(), "GGUF", 4) != 0);
    ++seen;
  };
  const auto res = deploy::deploy_model(dev, new_path.path, opt);
  CHECK(seen == 4);  // 3 MiB + the header, in 1 MiB pieces
  CHECK_FALSE(res.record.in_progress);
  const auto det = model::detect_model(dev.block_io());
  REQUIRE(det.record);
  CHECK_FALSE(det.record->in_progress);
  CHECK(det.record->name == "new model");
  CHECK(deploy::verify_device(dev).ok());
}

TEST_CASE("#14.1 an in-progress record round-trips and unknown flags are refused", "[deploy][atomic][record]") {
  model::DeployRecord r;
  r.model_start_lba = 2048;
  r.model_bytes = 5000;
  r.chunk_crcs = {0};
  r.in_progress = true;
  auto block = model::serialize_record(r);
  CHECK(model::parse_record(block, 0).in_progress);
  r.in_progress = false;
  CHECK_FALSE(model::parse_record(model::serialize_record(r), 0).in_progress);
}

TEST_CASE("#14.4 libblkid formats and unknown data are refused unless forced", "[deploy][safety]") {
  TempPath img, model_path;
  write_file(model_path.path, make_model(1u << 20, "safe", 23));
  const uint64_t window = 1u << 20;
  struct Case {
    std::string what;
    uint64_t at;  // byte offset on the device
    std::vector<uint8_t> bytes;
  };
  std::vector<Case> cases;
  {
    std::vector<uint8_t> b(64, 0);
    std::memcpy(b.data(), "bluestore block device\n0a1b2c3d-0000-4000-8000-000000000001\n", 60);
    cases.push_back({"ceph_bluestore", 0, b});
  }
  for (uint64_t at : {uint64_t{0}, window}) {  // a ZFS member on the whole device, and in a partition at 1 MiB
    std::vector<uint8_t> b(512u << 10, 0);
    for (uint64_t label : {uint64_t{0}, uint64_t{256} << 10})
      for (uint64_t i = 0; i < 128; ++i) {
        put_le(b, label + (128u << 10) + i * 1024, 0x00bab10c, 8);
        put_le(b, label + (128u << 10) + i * 1024 + 8, 5000, 8);
      }
    cases.push_back({"zfs_member", at, b});
  }
  {
    std::vector<uint8_t> b(96, 0);
    put_le(b, 0, 0x73717368, 4);  // "hsqs"
    put_le(b, 4, 1, 4);
    put_le(b, 12, 131072, 4);
    put_le(b, 20, 1, 2);
    put_le(b, 22, 17, 2);
    put_le(b, 26, 4, 2);
    put_le(b, 40, 4096, 8);
    cases.push_back({"squashfs", 0, b});
  }
  {
    std::vector<uint8_t> b(1024 + 64, 0);
    put_le(b, 1024, 0xF2F52010, 4);
    put_le(b, 1028, 1, 2);
    put_le(b, 1030, 15, 2);
    cases.push_back({"f2fs", 0, b});
  }
  // Filesystems made by the real tools, where they are installed.
  for (const auto& [tool, type] : std::vector<std::pair<std::string, std::string>>{
           {"mkfs.minix", "minix"}, {"mkfs.bfs", "bfs"}, {"mkfs.cramfs", "cramfs"}}) {
    if (!have_tool(tool)) continue;
    TempPath fs;
    std::string cmd = "truncate -s 8M " + fs.path + " && " + tool + " " + fs.path + " >/dev/null 2>&1";
    if (tool == "mkfs.cramfs") cmd = "d=$(mktemp -d) && echo x > $d/f && mkfs.cramfs $d " + fs.path + " >/dev/null 2>&1; rm -rf $d";
    REQUIRE(std::system(cmd.c_str()) == 0);
    auto b = read_file(fs.path);
    b.resize(std::min<size_t>(b.size(), 512u << 10));
    cases.push_back({type, 0, b});
  }
  cases.push_back({"non-zero data of unknown origin", window + 12345, {0x42}});
  for (const auto& c : cases) {
    INFO(c.what << " at byte " << c.at);
    ::unlink(img.path.c_str());
    { deploy::Device create("emu:" + img.path + ",size=80M"); }
    pwrite_file(img.path, c.at, c.bytes.data(), c.bytes.size());
    deploy::Device dev("emu:" + img.path);
    try {
      deploy::deploy_model(dev, model_path.path);
      FAIL("deploy wrote over " << c.what);
    } catch (const deploy::RefusedError& e) {
      CHECK_THAT(e.what(), ContainsSubstring(c.what) && ContainsSubstring("--force"));
      REQUIRE(!e.found().empty());
      CHECK(e.found()[0].lba * 512 >= c.at - c.at % window);
    }
    CHECK(read_file(img.path, c.at, c.bytes.size()) == c.bytes);  // nothing written
    const auto res = deploy::deploy_model(dev, model_path.path, {.force = true});
    CHECK_THAT(res.overridden.at(0).what, ContainsSubstring(c.what));
    CHECK(deploy::verify_device(dev).ok());
  }
}

TEST_CASE("#14.4 leftovers behind our own record are not refused again; signatures at a new start are", "[deploy][safety]") {
  TempPath model_path;
  write_file(model_path.path, make_model(1u << 20, "m", 24));
  deploy::Device dev("emu:ram,size=16M");
  const uint8_t junk[3] = {1, 2, 3};
  std::vector<uint8_t> blk(512, 0);
  std::memcpy(blk.data() + 7, junk, 3);
  dev.block_io().write(5, 1, blk.data());
  CHECK_THROWS_WITH(deploy::deploy_model(dev, model_path.path), ContainsSubstring("unknown origin") && ContainsSubstring("byte 2567"));
  deploy::deploy_model(dev, model_path.path, {.force = true});
  CHECK(deploy::deploy_model(dev, model_path.path).overridden.empty());  // LBA 0 holds our record now
  // An ext4 superblock left at LBA 2 by what --force replaced: the device is ours now.
  std::vector<uint8_t> sb(512, 0);
  sb[56] = 0x53;
  sb[57] = 0xEF;  // ext4 magic at byte 1080 = LBA 2 + 56
  dev.block_io().write(2, 1, sb.data());
  CHECK(deploy::deploy_model(dev, model_path.path).overridden.empty());
  // A filesystem where a new start LBA points is still refused.
  dev.block_io().write(8192 + 2, 1, sb.data());
  CHECK_THROWS_WITH(deploy::deploy_model(dev, model_path.path, {.start_lba = 8192}),
                    ContainsSubstring("ext2/3/4 filesystem at LBA 8194"));
}

TEST_CASE("#14.5 one writer per device: a second writer or a reader is refused naming the pid", "[deploy][lock]") {
  TempPath img;
  { deploy::Device create("emu:" + img.path + ",size=8M"); }
  // Another process holds the image's lock as a writer, then as a reader.
  for (const bool writer : {true, false}) {
    const LockHolder holder("emu:" + img.path, writer ? host::LockMode::kExclusive : host::LockMode::kShared);
    const std::string pid = "pid " + std::to_string(holder.pid);
    CHECK_THROWS_AS(deploy::Device("emu:" + img.path), host::DeviceBusyError);
    CHECK_THROWS_WITH(deploy::Device("emu:" + img.path), ContainsSubstring(pid + (writer ? " (writing)" : " (reading)")));
    if (writer)
      CHECK_THROWS_WITH(deploy::Device("emu:" + img.path, 1, host::Access::kReadOnly),
                        ContainsSubstring(pid) && ContainsSubstring("a deploy is running"));
    else
      deploy::Device reader("emu:" + img.path, 1, host::Access::kReadOnly);  // readers share
  }
  {
    // Within one process: the device opened twice, said as such (not "busy, pid <this one>").
    deploy::Device writer("emu:" + img.path);
    CHECK_THROWS_WITH(deploy::Device("emu:" + img.path, 1, host::Access::kReadOnly),
                      ContainsSubstring("is open already in this process") && ContainsSubstring("given twice"));
  }
  {
    deploy::Device r1("emu:" + img.path, 1, host::Access::kReadOnly);
    deploy::Device r2("emu:" + img.path, 1, host::Access::kReadOnly);  // readers share
    CHECK_THROWS_AS(deploy::Device("emu:" + img.path), host::DeviceBusyError);
  }
  deploy::Device again("emu:" + img.path);  // released with the devices
  // emu:ram lives in one process: no lock.
  deploy::Device a("emu:ram,size=1M"), b("emu:ram,size=1M");
}

TEST_CASE("#14.5 ls cross-checks the record against the GGUF header it finds", "[deploy][lock]") {
  TempPath img, a_path, b_path;
  const auto a = make_model(2u << 20, "alpha", 25);
  const auto b = make_model(1u << 20, "bravo", 26);
  write_file(a_path.path, a);
  write_file(b_path.path, b);
  deploy::Device dev("emu:" + img.path + ",size=16M");
  deploy::deploy_model(dev, a_path.path);
  std::vector<uint8_t> padded(b);
  padded.resize((padded.size() + 511) / 512 * 512);
  dev.block_io().write(2048, uint32_t(padded.size() / 512), padded.data());  // the chimera: a's record, b's bytes
  CHECK_THROWS_WITH(deploy::list_model(dev.block_io()),
                    ContainsSubstring("does not match") && ContainsSubstring("'alpha'") && ContainsSubstring("'bravo'"));
}

TEST_CASE("#14.small a start-LBA hint that finds no model is an error naming it", "[deploy][detect]") {
  TempPath model_path;
  write_file(model_path.path, make_model(1u << 20, "hinted", 27));
  deploy::Device dev("emu:ram,size=16M");
  CHECK_THROWS_WITH(model::detect_model(dev.block_io(), 4096), ContainsSubstring("start LBA 4096"));
  deploy::deploy_model(dev, model_path.path);
  CHECK(model::detect_model(dev.block_io(), 2048).start_lba == 2048);
  CHECK_THROWS_WITH(model::detect_model(dev.block_io(), 4096),
                    ContainsSubstring("start LBA 4096") && ContainsSubstring("puts the model at LBA 2048"));
  // A GGUF written by dd at the 1 MiB default, no record, and a wrong hint: named, and where it is.
  std::vector<uint8_t> zero(512, 0);
  dev.block_io().write(0, 1, zero.data());
  CHECK_THROWS_WITH(model::detect_model(dev.block_io(), 100),
                    ContainsSubstring("start LBA 100") && ContainsSubstring("there is one at the 1 MiB default LBA 2048"));
}

TEST_CASE("#14.small deploy to emu:null is refused: the data would be thrown away", "[deploy][safety]") {
  TempPath model_path;
  write_file(model_path.path, make_model(1u << 20, "void", 28));
  deploy::Device dev("emu:null,size=1G");
  CHECK_THROWS_WITH(deploy::deploy_model(dev, model_path.path), ContainsSubstring("stores nothing"));
}

TEST_CASE("#14.small commands that only read change nothing; a failed create leaves nothing", "[deploy][cli][readonly]") {
  if (!std::getenv("GPUNVME_BIN")) SKIP("GPUNVME_BIN is not set (meson sets it to the built gpunvme)");
  TempPath img, model_path, missing;
  write_file(model_path.path, make_model(1u << 20, "ro", 29));
  REQUIRE(run("deploy " + model_path.path + " --device emu:" + img.path + ",size=4M").rc == 0);
  const auto before = read_file(img.path);
  auto r = run("identify --device emu:" + img.path + ",size=1G");
  INFO(r.out);
  CHECK(r.rc == 0);
  CHECK(run("ls --device emu:" + img.path + ",size=1G").rc == 0);
  CHECK(run("verify --device emu:" + img.path + ",size=1G").rc == 0);
  CHECK(file_size(img.path) == 4u << 20);
  CHECK(read_file(img.path) == before);
  r = run("ls --device emu:" + missing.path + ",size=1G");
  CHECK(r.rc == 1);
  CHECK_FALSE(exists(missing.path));
  // A read-only image (root passes file modes, so as root the readers run as nobody).
  REQUIRE(::chmod(img.path.c_str(), 0444) == 0);
  std::string as_reader;
  if (::geteuid() == 0 && have_tool("setpriv")) as_reader = "--reuid=65534 --regid=65534 --clear-groups ";
  if (::geteuid() != 0 || !as_reader.empty()) {
    for (const char* cmd : {"ls", "verify", "identify"}) {
      const std::string line = (as_reader.empty() ? "" : "setpriv " + as_reader) + gpunvme_bin() + " " + cmd +
                               " --device emu:" + img.path + " 2>&1";
      INFO(line);
      CHECK(std::system(line.c_str()) == 0);
    }
    // Writing still needs write access.
    CHECK(std::system(((as_reader.empty() ? "" : "setpriv " + as_reader) + gpunvme_bin() + " deploy " + model_path.path +
                       " --device emu:" + img.path + " >/dev/null 2>&1").c_str()) != 0);
  }
  CHECK(read_file(img.path) == before);
  // The image cannot be made (writes past 1 MiB fail with EFBIG): nothing is left behind.
  r = run("deploy " + model_path.path + " --device emu:" + missing.path + ",size=16M");  // sanity: this one works
  CHECK(r.rc == 0);
  ::unlink(missing.path.c_str());
  const std::string limited = "bash -c 'ulimit -f 1024; trap \"\" XFSZ; exec " + gpunvme_bin() + " deploy " +
                              model_path.path + " --device emu:" + missing.path + ",size=200G' >/dev/null 2>&1";
  CHECK(std::system(limited.c_str()) != 0);
  CHECK_FALSE(exists(missing.path));
}

TEST_CASE("#14.1 verify without a record and without --against exits 3, not OK", "[deploy][cli]") {
  if (!std::getenv("GPUNVME_BIN")) SKIP("GPUNVME_BIN is not set (meson sets it to the built gpunvme)");
  TempPath img, model_path;
  const auto model = make_model(1u << 20, "raw", 30);
  write_file(model_path.path, model);
  REQUIRE(std::system(("truncate -s 8M " + img.path).c_str()) == 0);
  pwrite_file(img.path, 1u << 20, model.data(), model.size());
  auto r = run("verify --device emu:" + img.path);
  INFO(r.out);
  CHECK(r.rc == 3);
  CHECK_THAT(r.out, ContainsSubstring("UNVERIFIED (header only)"));
  CHECK_FALSE(says_ok(r.out));
  r = run("verify --device emu:" + img.path + " --against " + model_path.path);
  CHECK(r.rc == 0);
}

TEST_CASE("#14.7 verify --against checks the file first: a truncated download does not match", "[deploy][cli]") {
  if (!std::getenv("GPUNVME_BIN")) SKIP("GPUNVME_BIN is not set (meson sets it to the built gpunvme)");
  TempPath img, model_path, cut;
  const auto model = make_model(2u << 20, "cut", 31);
  write_file(model_path.path, model);
  write_file(cut.path, std::vector<uint8_t>(model.begin(), model.begin() + model.size() / 2));
  // The truncated file, dd'ed onto the device without a record (as in the finding).
  REQUIRE(std::system(("truncate -s 8M " + img.path).c_str()) == 0);
  pwrite_file(img.path, 1u << 20, model.data(), model.size() / 2);
  auto r = run("verify --device emu:" + img.path + " --against " + cut.path);
  INFO(r.out);
  CHECK(r.rc == 1);
  CHECK_THAT(r.out, ContainsSubstring(cut.path));
  CHECK_FALSE(says_ok(r.out));
  r = run("deploy " + cut.path + " --device emu:" + img.path);
  CHECK(r.rc == 1);  // deploy rejects the same file
  deploy::Device dev("emu:" + img.path, 1, host::Access::kReadOnly);
  CHECK_THROWS_AS(deploy::verify_device(dev, {.against = cut.path}), gguf::GgufError);
}

TEST_CASE("#14.9 a FIFO or a device as the model or --against is refused at once", "[deploy][cli]") {
  if (!std::getenv("GPUNVME_BIN")) SKIP("GPUNVME_BIN is not set (meson sets it to the built gpunvme)");
  TempPath img, fifo, model_path;
  write_file(model_path.path, make_model(1u << 20, "f", 32));
  REQUIRE(::mkfifo(fifo.path.c_str(), 0644) == 0);
  REQUIRE(run("deploy " + model_path.path + " --device emu:" + img.path + ",size=8M").rc == 0);
  // `timeout` bounds the old behaviour (blocking forever in open()).
  const std::string t = "timeout 20 " + gpunvme_bin() + " ";
  auto r = run_shell(t + "deploy " + fifo.path + " --device emu:" + img.path);
  INFO(r.out);
  CHECK(r.rc == 1);
  CHECK_THAT(r.out, ContainsSubstring("is a FIFO (named pipe), not a regular file"));
  r = run_shell(t + "verify --device emu:" + img.path + " --against " + fifo.path);
  CHECK(r.rc == 1);
  CHECK_THAT(r.out, ContainsSubstring("FIFO") && ContainsSubstring("--against"));
  r = run_shell(t + "deploy /dev/zero --device emu:" + img.path);
  CHECK(r.rc == 1);
  CHECK_THAT(r.out, ContainsSubstring("/dev/zero is a character device"));
}

TEST_CASE("#14.3 --print-dd refuses what deploy refuses (ext4 here), and --force says what it overwrites",
          "[deploy][cli][dd]") {
  if (!std::getenv("GPUNVME_BIN")) SKIP("GPUNVME_BIN is not set (meson sets it to the built gpunvme)");
  if (!have_tool("mkfs.ext4")) SKIP("no mkfs.ext4 on this machine");
  TempPath img, model_path;
  write_file(model_path.path, make_model(1u << 20, "m", 33));
  REQUIRE(std::system(("truncate -s 16M " + img.path + " && mkfs.ext4 -q -F " + img.path + " >/dev/null 2>&1").c_str()) == 0);
  const auto before = read_file(img.path);
  auto r = run("deploy " + model_path.path + " --device emu:" + img.path + " --print-dd");
  INFO(r.out);
  CHECK(r.rc == 1);
  CHECK_THAT(r.out, ContainsSubstring("ext2/3/4 filesystem") && ContainsSubstring("--force"));
  CHECK(r.out.find("dd if=") == std::string::npos);
  CHECK(run("deploy " + model_path.path + " --device emu:" + img.path).rc == 1);  // the same refusal
  r = run("deploy " + model_path.path + " --device emu:" + img.path + " --print-dd --force");
  CHECK(r.rc == 0);
  CHECK_THAT(r.out, ContainsSubstring("# --force: these commands write over 'ext2/3/4 filesystem'"));
  CHECK_THAT(r.out, ContainsSubstring("--record-only --force"));
  CHECK(read_file(img.path) == before);
}

TEST_CASE("#14.6 --print-dd quotes every argument: a hostile file name runs nothing", "[deploy][cli][dd]") {
  if (!std::getenv("GPUNVME_BIN")) SKIP("GPUNVME_BIN is not set (meson sets it to the built gpunvme)");
  if (!have_tool("dd")) SKIP("no dd on this machine");
  char dir_t[] = "/tmp/gpunvme-quote-XXXXXX";
  REQUIRE(::mkdtemp(dir_t));
  const std::string dir = dir_t;
  const std::string name = "m;touch PWNED;$(touch PWNED2) 'x' \"y\".gguf";
  const std::string model = dir + "/" + name;
  write_file(model, make_model(1u << 20, "evil\ntouch PWNED3\n$(touch PWNED4)", 34));
  const std::string img = dir + "/disk image.img";
  const std::string dev = "emu:" + img + ",size=8M";
  REQUIRE(std::system(("truncate -s 8M '" + img + "'").c_str()) == 0);
  auto r = run("deploy " + deploy::shell_quote(model) + " --device " + deploy::shell_quote(dev) + " --print-dd");
  INFO(r.out);
  REQUIRE(r.rc == 0);
  // Run the printed lines as printed, with bash, `gpunvme` on the PATH.
  write_file(dir + "/steps.sh", std::vector<uint8_t>(r.out.begin(), r.out.end()));
  REQUIRE(std::system(("mkdir -p " + dir + "/bin && ln -sf " + gpunvme_bin() + " " + dir + "/bin/gpunvme").c_str()) == 0);
  const int rc = std::system(("cd " + dir + " && PATH=" + dir + "/bin:$PATH bash steps.sh >steps.log 2>&1").c_str());
  INFO(read_file(dir + "/steps.log").size());
  CHECK(rc == 0);
  for (const char* f : {"PWNED", "PWNED2", "PWNED3", "PWNED4"}) CHECK_FALSE(exists(dir + "/" + f));
  r = run("verify --device " + deploy::shell_quote("emu:" + img));
  CHECK(r.rc == 0);
  CHECK_THAT(r.out, ContainsSubstring("OK: 1/1 chunks match"));
  std::system(("rm -rf '" + dir + "'").c_str());
}

TEST_CASE("shell_quote: words bash reads back unchanged", "[deploy][dd]") {
  CHECK(deploy::shell_quote("/tmp/a-b_c.gguf") == "/tmp/a-b_c.gguf");
  CHECK(deploy::shell_quote("a b") == "'a b'");
  CHECK(deploy::shell_quote("it's") == "'it'\\''s'");
  CHECK(deploy::shell_quote("a\nb") == "$'a\\x0ab'");
  CHECK(deploy::shell_quote("") == "''");
}

TEST_CASE("#14.4 a model dd wrote at a small start LBA is replaced without --force", "[deploy][safety]") {
  TempPath model_path;
  const auto model = make_model(1u << 20, "dd at LBA 1", 35);
  write_file(model_path.path, model);
  deploy::Device dev("emu:ram,size=16M");
  std::vector<uint8_t> padded(model);
  padded.resize((padded.size() + 511) / 512 * 512);
  dev.block_io().write(1, uint32_t(padded.size() / 512), padded.data());  // dd, no record
  CHECK(deploy::deploy_model(dev, model_path.path, {.start_lba = 1}).overridden.empty());
  CHECK(deploy::verify_device(dev).ok());
}
