// The output rule (runtime/guard/output_file.h): every way a path can reach a device of the run is
// refused, naming both, and the device's bytes are untouched; a file is in place only when complete
// (an uncommitted or failed run leaves the old one); every write is checked (/dev/full, a file-size
// limit). Partitions are modelled by a fake sysfs tree; the loop-device case needs root and losetup.
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "runtime/guard/device_footprint.h"
#include "runtime/guard/output_file.h"
#include "tests/cli_run.h"
#include "tests/test_files.h"

using namespace gpunvme;
using Catch::Matchers::ContainsSubstring;
namespace fs = std::filesystem;

namespace {

// A test's directory, and every name in it: a temporary file left behind shows there.
struct TempDir : test_files::TempDir {
  TempDir() : test_files::TempDir("gpunvme-output") {}
  std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(path)) out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
  }
};

std::vector<uint8_t> bytes_of(const std::string& s) { return {s.begin(), s.end()}; }
std::string text_of(const std::string& path) { return test_files::read_text(path); }

// An image with patterned bytes: a write over it shows.
std::vector<uint8_t> make_image(const std::string& path) {
  std::vector<uint8_t> b(1 << 20);
  for (size_t i = 0; i < b.size(); ++i) b[i] = uint8_t(i * 131 + 7);
  test_files::write_file(path, b);
  return b;
}

// The refusal message open() gives, "" when it opens (and then nothing is written: uncommitted).
std::string refusal(const std::string& path, const std::vector<std::string>& devices) {
  try {
    guard::OutputFile f = guard::OutputFile::open(path, devices, "--json-out");
  } catch (const guard::OutputRefusedError& e) {
    return e.what();
  }
  return "";
}

std::string error_of(auto f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("output: an emu: image of the run is refused by any name, and keeps its bytes", "[output]") {
  TempDir d;
  const std::string img = d / "disk.img";
  const std::vector<uint8_t> before = make_image(img);
  const std::string dev = "emu:" + img + ",size=1M,lba=4096";
  fs::create_hard_link(img, d / "hard.img");
  fs::create_symlink(img, d / "sym.img");
  fs::create_symlink(d / "sym.img", d / "sym2.img");  // a chain of links
  for (const std::string& path : {img, d / "./disk.img", d / ("../" + d.path.filename().string() + "/disk.img"),
                                  d / "hard.img", d / "sym.img", d / "sym2.img"}) {
    const std::string why = refusal(path, {dev});
    INFO(path);
    CHECK_THAT(why, ContainsSubstring("--json-out " + path));  // the output
    CHECK_THAT(why, ContainsSubstring(dev));                   // the device
    CHECK_THAT(why, ContainsSubstring("choose another path"));  // the fix
  }
  CHECK_THAT(refusal(d / "hard.img", {dev}), ContainsSubstring("is the same file as " + img));
  CHECK(test_files::read_file(img) == before);
  // Another file, emu:ram, or no devices at all: nothing to refuse.
  CHECK(refusal(d / "out.json", {dev}).empty());
  CHECK(refusal(img, {"emu:ram,size=1M", "emu:null"}).empty());
  CHECK(refusal(img, {}).empty());
}

TEST_CASE("output: every member of a striped set, every namespace, and an image not yet created", "[output]") {
  TempDir d;
  make_image(d / "a.img");
  make_image(d / "b.img");
  const std::vector<std::string> set = {"emu:" + d / "a.img", "emu:" + d / "b.img" + ",size=1M"};
  CHECK_THAT(refusal(d / "b.img", set), ContainsSubstring("emu:" + d / "b.img"));
  CHECK_THAT(refusal(d / "a.img", set), ContainsSubstring("emu:" + d / "a.img"));
  // namespaces=2: namespace 2 is PATH.2.
  make_image(d / "n.img");
  make_image(d / "n.img.2");
  CHECK_THAT(refusal(d / "n.img.2", {"emu:" + d / "n.img,namespaces=2"}), ContainsSubstring("n.img,namespaces=2"));
  // The emulator creates a missing image with size=: the output may not take its place first.
  CHECK_THAT(refusal(d / "new.img", {"emu:" + d / "new.img,size=1G"}), ContainsSubstring("creates its image"));
  CHECK(refusal(d / "other.json", {"emu:" + d / "new.img,size=1G"}).empty());
  // A device string the emulator would refuse still names its image.
  CHECK_THAT(refusal(d / "a.img", {"emu:" + d / "a.img,bogus=1"}), ContainsSubstring("bogus=1"));
}

TEST_CASE("output: an inherited descriptor (/dev/fd/N) on the image is refused", "[output]") {
  TempDir d;
  make_image(d / "disk.img");
  const int ro = ::open((d / "disk.img").c_str(), O_RDONLY | O_CLOEXEC);
  REQUIRE(ro >= 0);
  CHECK_THAT(error_of([&] { guard::OutputFile::open("/dev/fd/" + std::to_string(ro), {}, "--out"); }),
             ContainsSubstring("is open for reading only"));
  ::close(ro);
  const int fd = ::open((d / "disk.img").c_str(), O_RDWR | O_CLOEXEC);
  REQUIRE(fd >= 0);
  CHECK_THAT(refusal("/dev/fd/" + std::to_string(fd), {"emu:" + d / "disk.img"}), ContainsSubstring("is the same file as"));
  CHECK(refusal("/dev/fd/" + std::to_string(fd), {"emu:ram"}).empty());
  ::close(fd);
  CHECK_THAT(error_of([&] { guard::OutputFile::open("/dev/fd/" + std::to_string(fd), {}, "--out"); }),
             ContainsSubstring("is not open"));
}

TEST_CASE("output: a partition, its disk and a loop device are related through sysfs (fake tree)", "[output]") {
  TempDir d;
  const std::string sys = d / "sys";
  auto put = [&](const std::string& p, const std::string& content) {
    fs::create_directories(fs::path(sys + p).parent_path());
    test_files::write_file(sys + p, bytes_of(content + "\n"));
  };
  auto link = [&](const std::string& p, const std::string& target) {
    fs::create_directories(fs::path(sys + p).parent_path());
    fs::create_symlink(target, sys + p);
  };
  // sdz (250:0) with partition sdz1 (250:1); loop9 (7:9) backed by an image, with partition loop9p1 (259:9).
  put("/devices/virtual/block/sdz/dev", "250:0");
  put("/devices/virtual/block/sdz/sdz1/dev", "250:1");
  put("/devices/virtual/block/sdz/sdz1/partition", "1");
  link("/dev/block/250:0", "../../devices/virtual/block/sdz");
  link("/dev/block/250:1", "../../devices/virtual/block/sdz/sdz1");
  put("/devices/virtual/block/sdz/sdz2/dev", "250:2");
  put("/devices/virtual/block/sdz/sdz2/partition", "2");
  link("/dev/block/250:2", "../../devices/virtual/block/sdz/sdz2");
  const std::string img = d / "loop.img";
  make_image(img);
  put("/devices/virtual/block/loop9/dev", "7:9");
  put("/devices/virtual/block/loop9/loop/backing_file", img);
  put("/devices/virtual/block/loop9/loop9p1/dev", "259:9");
  put("/devices/virtual/block/loop9/loop9p1/partition", "1");
  link("/dev/block/7:9", "../../devices/virtual/block/loop9");
  link("/dev/block/259:9", "../../devices/virtual/block/loop9/loop9p1");

  auto block = [&](unsigned maj, unsigned min, const std::string& name) {
    struct stat st{};
    st.st_mode = S_IFBLK | 0600;
    st.st_rdev = makedev(maj, min);
    return guard::footprint_of(st, name, sys);
  };
  const guard::Footprint disk = block(250, 0, "/dev/sdz"), part = block(250, 1, "/dev/sdz1");
  const guard::Footprint loop = block(7, 9, "/dev/loop9"), loop_part = block(259, 9, "/dev/loop9p1");
  const guard::Footprint file = *guard::footprint_of(img, sys);
  CHECK(guard::shared_bytes(part, disk) == "is a partition of /dev/sdz");
  CHECK(guard::shared_bytes(disk, part) == "is the disk that holds /dev/sdz1");
  CHECK(guard::shared_bytes(disk, disk) == "is /dev/sdz");
  CHECK(guard::shared_bytes(loop, file) == "is a loop device backed by " + img);
  CHECK(guard::shared_bytes(loop_part, file) == "is a partition of loop device loop9, backed by " + img);
  CHECK(guard::shared_bytes(file, loop) == "is the file behind /dev/loop9 (a loop device)");
  CHECK(guard::shared_bytes(file, loop_part) == "is the file behind /dev/loop9p1 (a partition of loop device loop9)");
  CHECK_THAT(guard::shared_bytes(loop_part, loop), ContainsSubstring("is a partition of /dev/loop9"));
  // Two partitions of one disk share no bytes, nor does an unrelated file.
  const guard::Footprint part2 = block(250, 2, "/dev/sdz2");
  CHECK(guard::shared_bytes(part2, part).empty());
  CHECK(guard::shared_bytes(part2, disk) == "is a partition of /dev/sdz");
  make_image(d / "other.img");
  CHECK(guard::shared_bytes(*guard::footprint_of(d / "other.img", sys), loop).empty());

  // Through the rule itself, with device nodes of those numbers (mknod needs root).
  if (::mknod((d / "sdz").c_str(), S_IFBLK | 0600, makedev(250, 0)) != 0 ||
      ::mknod((d / "sdz1").c_str(), S_IFBLK | 0600, makedev(250, 1)) != 0 ||
      ::mknod((d / "loop9p1").c_str(), S_IFBLK | 0600, makedev(259, 9)) != 0)
    SKIP("mknod needs root: the rule's own use of sysfs is untested here");
  const guard::OutputOptions fake{.sysfs_root = sys};
  CHECK_THAT(guard::output_refusal(d / "sdz1", {"emu:" + d / "sdz"}, "--trace", fake),
             ContainsSubstring("--trace " + d / "sdz1" + ": it is a partition of " + d / "sdz" + ", used by this run's --device emu:"));
  CHECK_THAT(guard::output_refusal(d / "sdz", {"emu:" + d / "sdz1"}, "--trace", fake), ContainsSubstring("is the disk that holds"));
  CHECK_THAT(guard::output_refusal(d / "loop9p1", {"emu:" + img}, "--trace", fake),
             ContainsSubstring("is a partition of loop device loop9, backed by " + img));
  CHECK_THAT(guard::output_refusal(d / "sdz1", {"emu:" + img}, "--trace", fake), ContainsSubstring("it is a block device"));
}

TEST_CASE("output: block devices are refused, a loop device over the run's image naming both (root, losetup)", "[output]") {
  if (::geteuid() != 0) SKIP("needs root for losetup; the fake-sysfs case covers the logic");
  TempDir d;
  const std::string img = d / "disk.img";
  const std::vector<uint8_t> before = make_image(img);
  const cli_test::Run r = cli_test::run_shell("losetup -f --show " + img);
  if (r.rc != 0) SKIP("losetup failed (no loop device support here?): " + r.out);
  const std::string loop = r.out.substr(0, r.out.find('\n'));
  struct Detach {
    std::string dev;
    ~Detach() { cli_test::run_shell("losetup -d " + dev); }
  } detach{loop};
  std::string why = refusal(loop, {"emu:" + img});
  CHECK_THAT(why, ContainsSubstring("--json-out " + loop + ": it is a loop device backed by " + img));
  CHECK_THAT(why, ContainsSubstring("emu:" + img));
  why = refusal(img, {"emu:" + loop});  // the image behind the run's loop device
  CHECK_THAT(why, ContainsSubstring("is the file behind " + loop));
  fs::create_symlink(loop, d / "link-to-loop");
  CHECK_THAT(refusal(d / "link-to-loop", {"emu:" + img}), ContainsSubstring("loop device backed by"));
  // Any block device, whatever the run's devices: an output flag never writes a disk.
  CHECK_THAT(refusal(loop, {"emu:ram"}), ContainsSubstring("it is a block device"));
  CHECK_THAT(refusal(loop, {}), ContainsSubstring("choose the path of a file"));
  CHECK(test_files::read_file(img) == before);
}

TEST_CASE("output: written beside the target and renamed at commit; uncommitted leaves the old file", "[output]") {
  // Both ways to a temporary file: unnamed (O_TMPFILE) and named (filesystems without O_TMPFILE).
  const guard::OutputOptions how{.unnamed_temp = GENERATE(true, false)};
  INFO("unnamed temporary file: " << how.unnamed_temp);
  TempDir d;
  const std::string out = d / "out.json";
  {
    guard::OutputFile f = guard::OutputFile::open(out, {}, "--json-out", how);
    f.write("{\"new\":1}\n");
    f.flush();
    CHECK(!fs::exists(out));  // not there before commit, though flushed
    f.commit();
    CHECK(!f);
  }
  CHECK(text_of(out) == "{\"new\":1}\n");
  CHECK(d.names() == std::vector<std::string>{"out.json"});

  ::chmod(out.c_str(), 0640);
  {
    guard::OutputFile f = guard::OutputFile::open(out, {}, "--json-out", how);
    std::fprintf(f.stream(), "half of a run");
    f.flush();
  }  // a run that failed before commit: the destructor
  CHECK(text_of(out) == "{\"new\":1}\n");
  CHECK(d.names() == std::vector<std::string>{"out.json"});

  guard::OutputFile f = guard::OutputFile::open(out, {}, "--json-out", how);
  if (!how.unnamed_temp) CHECK(d.names().size() == 2);  // the named temporary file, hidden beside the target
  std::fprintf(f.stream(), "%s", "second\n");
  f.commit();
  CHECK(text_of(out) == "second\n");
  CHECK((fs::status(out).permissions() & fs::perms::all) == (fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read));
  CHECK(d.names() == std::vector<std::string>{"out.json"});
}

TEST_CASE("output: a symlink keeps pointing at the file it names, which is replaced", "[output]") {
  TempDir d;
  test_files::write_file(d / "real.json", bytes_of("old"));
  fs::create_symlink("real.json", d / "link.json");
  guard::OutputFile f = guard::OutputFile::open(d / "link.json", {});
  f.write("new");
  f.commit();
  CHECK(fs::is_symlink(d / "link.json"));
  CHECK(text_of(d / "real.json") == "new");
}

TEST_CASE("output: a write that fails (file-size limit) is an error and the old file stays", "[output]") {
  const guard::OutputOptions how{.unnamed_temp = GENERATE(true, false)};
  INFO("unnamed temporary file: " << how.unnamed_temp);
  TempDir d;
  const std::string out = d / "out.bin";
  test_files::write_file(out, bytes_of("the old file"));
  // In a child: RLIMIT_FSIZE makes the write fail with EFBIG, as a full disk would with ENOSPC.
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    std::signal(SIGXFSZ, SIG_IGN);
    const rlimit lim{4096, 4096};
    ::setrlimit(RLIMIT_FSIZE, &lim);
    int code = 3;
    try {
      guard::OutputFile f = guard::OutputFile::open(out, {}, "--logits-out", how);
      const std::vector<char> big(1 << 20, 'x');
      f.write(big.data(), big.size());
      f.commit();
      code = 1;  // no error: the test fails
    } catch (const Error& e) {
      code = std::string(e.what()).find("--logits-out " + out) != std::string::npos &&
                     std::string(e.what()).find("as it was before the run") != std::string::npos
                 ? 0
                 : 2;
    }
    ::_exit(code);
  }
  int st = 0;
  ::waitpid(pid, &st, 0);
  REQUIRE(WIFEXITED(st));
  CHECK(WEXITSTATUS(st) == 0);
  CHECK(text_of(out) == "the old file");
  CHECK(d.names() == std::vector<std::string>{"out.bin"});
}

TEST_CASE("output: character devices are written straight, every write checked", "[output]") {
  guard::OutputFile null = guard::OutputFile::open("/dev/null", {}, "--trace");
  null.write("anything");
  CHECK_NOTHROW(null.commit());

  guard::OutputFile full = guard::OutputFile::open("/dev/full", {}, "--trace");
  full.write("a line\n");
  CHECK_THAT(error_of([&] { full.flush(); }), ContainsSubstring("--trace /dev/full: writing failed: No space left on device"));
  guard::OutputFile full2 = guard::OutputFile::open("/dev/full", {}, "--trace");
  std::fprintf(full2.stream(), "unchecked fprintf\n");
  CHECK_THAT(error_of([&] { full2.commit(); }), ContainsSubstring("No space left on device"));
}

TEST_CASE("output: a missing directory, a directory and an empty path are errors naming them", "[output]") {
  TempDir d;
  CHECK_THAT(error_of([&] { guard::OutputFile::open(d / "no/such/dir/out.json", {}, "--json-out"); }),
             ContainsSubstring("the directory " + d / "no/such/dir" + " does not exist"));
  CHECK_THAT(error_of([&] { guard::OutputFile::open(d.path.string(), {}, "--json-out"); }), ContainsSubstring("is a directory"));
  CHECK_THAT(error_of([&] { guard::OutputFile::open("", {}, "--json-out"); }), ContainsSubstring("--json-out needs a file path"));
  CHECK(d.names().empty());
}

TEST_CASE("output: a FIFO nobody reads is an error at once, not a wait", "[output]") {
  TempDir d;
  REQUIRE(::mkfifo((d / "fifo").c_str(), 0600) == 0);
  CHECK_THAT(error_of([&] { guard::OutputFile::open(d / "fifo", {}, "--trace"); }), ContainsSubstring("no process reads it"));
}

TEST_CASE("output: moved-from and default outputs hold nothing; the move keeps the temporary file", "[output]") {
  TempDir d;
  guard::OutputFile none;
  CHECK(!none);
  guard::OutputFile a = guard::OutputFile::open(d / "x", {});
  a.write("moved");
  guard::OutputFile b = std::move(a);
  CHECK(!a);
  b.commit();
  CHECK(text_of(d / "x") == "moved");
}
