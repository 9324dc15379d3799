// Modeled drives: the pacing model on its own (virtual time, no controller), the device-string keys,
// and the emulated controller pacing real I/O. Timing checks are lower bounds only: the model must
// never let a workload beat the modeled drive; how close the emulator gets is a benchmark's business.
#include <catch2/catch_approx.hpp>
#include <catch2/catch_test_macros.hpp>

#include <algorithm>
#include <atomic>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "host/emulator/config.h"
#include "host/emulator/drive_model.h"
#include "host/emulator/drive_profiles.h"
#include "host/io_patterns.h"
#include "tests/emulator/harness.h"

using namespace emutest;
using gpunvme::emu::DriveGrant;
using gpunvme::emu::DriveModel;
using gpunvme::emu::DriveOp;
using gpunvme::emu::DriveParams;
using gpunvme::emu::DriveRequest;
using gpunvme::emu::parse_emu_device;

namespace {

DriveParams bandwidth_only(double bytes_per_s) {
  DriveParams p;
  p.read_bytes_per_s = bytes_per_s;
  p.write_bytes_per_s = bytes_per_s;
  return p;
}

// The most commands whose [start, due) intervals overlap at any instant.
size_t max_in_service(const std::vector<DriveGrant>& grants) {
  std::map<int64_t, int> delta;  // at equal times, ends (-1) sort before starts: [start, due) is half-open
  for (const auto& g : grants) {
    ++delta[g.start_ns];
    --delta[g.due_ns];
  }
  int now = 0, most = 0;
  for (const auto& [t, d] : delta) {
    now += d;
    most = std::max(most, now);
  }
  return size_t(most);
}

std::string parse_error(const std::string& spec) {
  try {
    parse_emu_device(spec);
  } catch (const gpunvme::Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

// ---- The model in virtual time ----

TEST_CASE("drive model: a saturated channel gives strictly later due times, N bytes take >= N/B",
          "[emulator][drive]") {
  DriveModel m(bandwidth_only(1e9), 0);  // 1 byte per ns
  std::vector<DriveGrant> g(1000);
  std::vector<DriveRequest> r(1000, DriveRequest{DriveOp::kRead, 4096});
  m.admit(0, r, g);  // all arrive at once: the channel is the only limit
  for (size_t i = 0; i < g.size(); ++i) {
    CHECK(g[i].start_ns == 0);
    CHECK(g[i].due_ns >= int64_t((i + 1) * 4096));
    if (i > 0) CHECK(g[i].due_ns > g[i - 1].due_ns);
  }
  CHECK(g.back().due_ns >= 1000 * 4096);
  CHECK(m.channel_floor_ns(1000 * 4096, 1000, 0, 0) == Catch::Approx(1000 * 4096.0));
}

TEST_CASE("drive model: idle channel time is not banked", "[emulator][drive]") {
  DriveModel m(bandwidth_only(1e9), 0);
  CHECK(m.admit_one(0, {DriveOp::kRead, 1000}).due_ns >= 1000);
  // A second later the channel is idle; the next transfer still takes its full time from now.
  const auto g = m.admit_one(1'000'000'000, {DriveOp::kWrite, 1000});
  CHECK(g.start_ns == 1'000'000'000);
  CHECK(g.due_ns >= 1'000'001'000);
}

TEST_CASE("drive model: mixed sizes and arrivals under a profile never beat bytes/bandwidth",
          "[emulator][drive]") {
  DriveParams p = *gpunvme::emu::drive_profile("pcie4");
  DriveModel m(p, 0);
  gpunvme::emu::DriveRng rng(7);
  int64_t now = 0, first_start = INT64_MAX, last_due = 0;
  uint64_t read_bytes = 0, write_bytes = 0, reads = 0, writes = 0;
  for (int i = 0; i < 20000; ++i) {
    now += int64_t(rng.next() % 200);  // arrivals faster than the drive can serve them
    const bool read = rng.next() % 4 != 0;
    const uint64_t bytes = uint64_t(4096) << (rng.next() % 9);  // 4 KiB .. 1 MiB
    const auto g = m.admit_one(now, {read ? DriveOp::kRead : DriveOp::kWrite, bytes});
    CHECK(g.start_ns >= now);
    CHECK(g.due_ns >= g.start_ns + int64_t(bytes * 1e9 / (read ? p.read_bytes_per_s : p.write_bytes_per_s)));
    first_start = std::min(first_start, g.start_ns);
    last_due = std::max(last_due, g.due_ns);
    (read ? read_bytes : write_bytes) += bytes;
    ++(read ? reads : writes);
  }
  const double floor = m.channel_floor_ns(read_bytes, reads, write_bytes, writes);
  CHECK(floor >= read_bytes * 1e9 / p.read_bytes_per_s);
  CHECK(double(last_due - first_start) >= floor);
}

TEST_CASE("drive model: the IOPS cap spaces small commands", "[emulator][drive]") {
  DriveParams p;
  p.read_iops = 1e6;  // 1 µs per command
  DriveModel m(p, 0);
  std::vector<DriveRequest> r(5000, DriveRequest{DriveOp::kRead, 512});
  std::vector<DriveGrant> g(r.size());
  m.admit(0, r, g);
  CHECK(g.back().due_ns >= 5000 * 1000);
  for (size_t i = 1; i < g.size(); ++i) CHECK(g[i].due_ns - g[i - 1].due_ns >= 1000);
}

TEST_CASE("drive model: parallelism limits commands in service", "[emulator][drive]") {
  SECTION("fixed latency: waves of `par` commands") {
    DriveParams p;
    p.parallelism = 4;
    p.read_p50_ns = p.read_p99_ns = 100'000;
    DriveModel m(p, 0);
    std::vector<DriveRequest> r(100, DriveRequest{DriveOp::kRead, 4096});
    std::vector<DriveGrant> g(r.size());
    m.admit(0, r, g);
    CHECK(max_in_service(g) == 4);
    CHECK(g.back().due_ns == 25 * 100'000);  // 100 commands, 4 at a time, 100 µs each
  }
  SECTION("log-normal latency, arrivals over time, several threads") {
    DriveParams p = *gpunvme::emu::drive_profile("sn530");
    p.parallelism = 8;
    DriveModel m(p, 0);
    std::vector<std::vector<DriveGrant>> per_thread(4);
    std::atomic<int64_t> clock{0};
    std::vector<std::thread> threads;
    for (auto& out : per_thread)
      threads.emplace_back([&] {
        for (int i = 0; i < 2000; ++i) {
          const DriveRequest r[2] = {{DriveOp::kRead, 4096}, {DriveOp::kWrite, 8192}};
          DriveGrant g[2];
          m.admit(clock.fetch_add(3), r, g);
          out.insert(out.end(), g, g + 2);
        }
      });
    for (auto& t : threads) t.join();
    std::vector<DriveGrant> all;
    for (auto& v : per_thread) all.insert(all.end(), v.begin(), v.end());
    CHECK(all.size() == 16000);
    CHECK(max_in_service(all) <= 8);
    for (const auto& g : all) CHECK(g.due_ns > g.start_ns);
  }
}

TEST_CASE("drive model: latency sampler percentiles match p50 and p99", "[emulator][drive]") {
  gpunvme::emu::DriveRng rng(42);
  const gpunvme::emu::LatencySampler s(60'000, 150'000);
  std::vector<double> v(200000);
  for (double& x : v) x = s.sample_ns(rng);
  std::sort(v.begin(), v.end());
  CHECK(v[v.size() / 2] == Catch::Approx(60'000).epsilon(0.02));
  CHECK(v[v.size() * 99 / 100] == Catch::Approx(150'000).epsilon(0.04));
  CHECK(v.front() >= s.at_z(-6.0));
  CHECK(v.back() <= s.at_z(6.0));  // draws are bounded

  // The same seed draws the same latencies; a fixed latency is exactly that.
  gpunvme::emu::DriveRng a(5), b(5), c(6);
  bool differs = false;
  for (int i = 0; i < 100; ++i) {
    const double x = s.sample_ns(a);
    CHECK(x == s.sample_ns(b));
    differs |= x != s.sample_ns(c);
  }
  CHECK(differs);
  CHECK(gpunvme::emu::LatencySampler(80'000, 80'000).sample_ns(a) == 80'000);
  CHECK(gpunvme::emu::LatencySampler().zero());
}

// ---- Device-string keys ----

TEST_CASE("drive keys: profiles, overrides in any order, units", "[emulator][drive][config]") {
  CHECK_FALSE(parse_emu_device("emu:ram").drive.limits_anything());
  CHECK_FALSE(parse_emu_device("emu:ram,drive=none").drive.limits_anything());

  const auto pcie4 = parse_emu_device("emu:ram,drive=pcie4").drive;
  CHECK(pcie4.name == "pcie4");
  CHECK(pcie4.read_bytes_per_s == 7.3e9);
  CHECK(pcie4.read_iops == 1.2e6);
  CHECK(pcie4.parallelism == 112);
  CHECK(parse_emu_device("emu:ram,drive=sn530").drive.read_bytes_per_s == 2.4e9);
  CHECK(parse_emu_device("emu:ram,drive=pcie5").drive.read_bytes_per_s == 14.7e9);

  const auto a = parse_emu_device("emu:ram,drive=pcie4,bw=3G,iops=500k,lat=100us,par=32,seed=9").drive;
  const auto b = parse_emu_device("emu:ram,seed=9,par=32,lat=100us,iops=500k,bw=3G,drive=pcie4").drive;
  CHECK(a.name == "pcie4+");
  CHECK(a.read_bytes_per_s == 3e9);
  CHECK(a.write_bytes_per_s == pcie4.write_bytes_per_s);  // wbw not given: the profile's
  CHECK(a.read_iops == 5e5);
  CHECK(a.parallelism == 32);
  CHECK(a.seed == 9);
  CHECK(a.read_p50_ns == 100'000);
  CHECK(a.read_p99_ns == 250'000);  // the profile's p99/p50 of 2.5 kept
  for (const auto& d : {b}) {
    CHECK(d.read_bytes_per_s == a.read_bytes_per_s);
    CHECK(d.read_iops == a.read_iops);
    CHECK(d.read_p50_ns == a.read_p50_ns);
    CHECK(d.read_p99_ns == a.read_p99_ns);
    CHECK(d.parallelism == a.parallelism);
  }

  const auto c = parse_emu_device("emu:null,bw=6.5Gi,wbw=1.5G,wiops=2M,lat=0.5ms,lat99=2ms,wlat=900ns,wlat99=1us").drive;
  CHECK(c.name == "custom");
  CHECK(c.limits_anything());
  CHECK(c.read_bytes_per_s == 6.5 * 1073741824.0);
  CHECK(c.write_bytes_per_s == 1.5e9);
  CHECK(c.write_iops == 2e6);
  CHECK(c.read_iops == 0);
  CHECK(c.read_p50_ns == 500'000);
  CHECK(c.read_p99_ns == 2'000'000);
  CHECK(c.write_p50_ns == 900);
  CHECK(c.write_p99_ns == 1000);
  CHECK(parse_emu_device("emu:ram,lat=80us").drive.read_p99_ns == 80'000);  // no profile: fixed latency
  CHECK(parse_emu_device("emu:ram,drive=pcie4,iops=0").drive.read_iops == 0);  // 0 lifts a cap

  double r = 0;
  uint64_t ns = 0;
  CHECK((gpunvme::emu::parse_rate("370k", &r) && r == 370e3));
  CHECK((gpunvme::emu::parse_rate("1Ki", &r) && r == 1024));
  CHECK_FALSE(gpunvme::emu::parse_rate("7GB", &r));
  CHECK_FALSE(gpunvme::emu::parse_rate("-1G", &r));
  CHECK_FALSE(gpunvme::emu::parse_rate("1.2.3", &r));
  CHECK((gpunvme::emu::parse_duration_ns("2s", &ns) && ns == 2'000'000'000));
  CHECK_FALSE(gpunvme::emu::parse_duration_ns("80", &ns));
  CHECK_FALSE(gpunvme::emu::parse_duration_ns("80 us", &ns));
}

TEST_CASE("drive keys: errors name the problem and the valid choices", "[emulator][drive][config]") {
  const std::string unknown = parse_error("emu:ram,drive=sn999");
  CHECK(unknown.find("drive=sn999 is not a drive profile") != std::string::npos);
  CHECK(unknown.find(gpunvme::emu::drive_profile_names()) != std::string::npos);
  CHECK(parse_error("emu:ram,bw=fast").find("bw=fast is not a read bandwidth") != std::string::npos);
  CHECK(parse_error("emu:ram,lat=80").find("lat=80 is not a latency") != std::string::npos);
  CHECK(parse_error("emu:ram,lat=80us,lat99=50us").find("cannot be below the median") != std::string::npos);
  CHECK(parse_error("emu:ram,lat99=50us").find("lat99 needs lat") != std::string::npos);
  CHECK(parse_error("emu:ram,par=70000").find("par=70000 is not a number in 0..65536") != std::string::npos);
  // Every error lists the keys, the drive keys among them.
  const std::string other = parse_error("emu:ram,bogus=1");
  CHECK(other.find("unknown key \"bogus\"") != std::string::npos);
  CHECK(other.find("drive=sn530|pcie4|pcie5|none") != std::string::npos);
  CHECK(other.find("lat99=") != std::string::npos);
}

// ---- Through the emulated controller ----

namespace {

constexpr uint32_t kLba = 4096;
constexpr uint32_t kBlocksPerCmd = 2;  // 8 KiB: PRP1 + PRP2, no list
constexpr uint64_t kCmdBytes = uint64_t(kLba) * kBlocksPerCmd;

uint8_t pattern(uint64_t i) { return gpunvme::host::pattern_byte(0, i); }

// Issues `n` commands (command k moves 8 KiB at LBA 2k from/to buf offset 8 KiB * k), keeping up to
// `depth` in flight; returns the seconds from the first submission to the last completion. Checks
// every status, that every command completes once, and that SQHD never moves backwards.
double issue_all(Harness& h, Queue& q, DmaBuf& buf, uint32_t n, uint32_t depth, bool write) {
  std::vector<int> done(n, 0);
  std::map<uint16_t, uint32_t> by_cid;
  uint32_t submitted = 0, completed = 0;
  uint32_t last_sqhd = q.sqr.head;
  const auto t0 = std::chrono::steady_clock::now();
  while (completed < n) {
    while (submitted < n && submitted - completed < depth && !q.sqr.full()) {
      const uint64_t off = uint64_t(submitted) * kCmdBytes;
      const uint64_t slba = uint64_t(submitted) * kBlocksPerCmd;
      const auto e = write ? nvme::make_write(1, slba, kBlocksPerCmd, buf.iova(off), buf.iova(off + kLba))
                           : nvme::make_read(1, slba, kBlocksPerCmd, buf.iova(off), buf.iova(off + kLba));
      by_cid[h.submit(q, e)] = submitted++;
    }
    const auto c = h.poll(q);
    REQUIRE(c.has_value());
    REQUIRE(status_of(*c).ok());
    REQUIRE(by_cid.count(c->cid) == 1);
    ++done[by_cid[c->cid]];
    by_cid.erase(c->cid);
    // SQHD moves forward by at most the commands in flight: a backwards step would look like a huge jump.
    CHECK(nvme::ring_used(last_sqhd, c->sqhd, q.entries) <= depth);
    last_sqhd = c->sqhd;
    ++completed;
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK(std::count(done.begin(), done.end(), 1) == int(n));
  return s;
}

}  // namespace

TEST_CASE("drive model through the controller: data intact, CQ wraps, never faster than the model",
          "[emulator][drive][io]") {
  // A slow drive so the floor is measurable: 100 MB/s each way, random latency, 8 units.
  Harness h("emu:ram,size=16M,lba=4096,threads=1,drive=pcie4,bw=100M,wbw=100M,lat=50us,lat99=400us,par=8");
  REQUIRE(h.ctrl().drive_model() != nullptr);
  h.enable();
  // A CQ far smaller than the work and than the SQ: it wraps many times, and the controller must
  // hold commands in the SQ while every CQ slot is promised to a held completion.
  auto& q = h.create_pair(1, 256, 16);
  constexpr uint32_t kCmds = 512;  // 4 MiB
  constexpr uint32_t kDepth = 40;
  const uint64_t bytes = uint64_t(kCmds) * kCmdBytes;

  auto src = h.alloc(bytes);
  for (uint64_t i = 0; i < bytes; ++i) src->as()[i] = pattern(i);
  const double write_s = issue_all(h, q, *src, kCmds, kDepth, true);

  auto dst = h.alloc(bytes);
  std::memset(dst->as(), 0xEE, bytes);
  const double read_s = issue_all(h, q, *dst, kCmds, kDepth, false);
  uint64_t mismatches = 0;
  for (uint64_t i = 0; i < bytes; ++i) mismatches += dst->as()[i] != pattern(i);
  CHECK(mismatches == 0);

  // Lower bounds only: the bytes at the modeled bandwidth.
  const DriveModel& m = *h.ctrl().drive_model();
  INFO("write " << write_s << " s, read " << read_s << " s");
  CHECK(write_s * 1e9 >= m.channel_floor_ns(0, 0, bytes, kCmds));
  CHECK(read_s * 1e9 >= m.channel_floor_ns(bytes, kCmds, 0, 0));
  CHECK(read_s >= bytes / 100e6);
  CHECK(h.ctrl().stats().bytes_read == bytes);
}

TEST_CASE("drive model through the controller: held completions wait, other queues keep going",
          "[emulator][drive][io]") {
  // Writes take 300 ms, reads 1 ms (fixed): one controller thread serves both queues.
  Harness h("emu:ram,size=1M,lba=4096,threads=1,lat=1ms,wlat=300ms");
  h.enable();
  auto& qw = h.create_pair(1, 8);
  auto& qr = h.create_pair(2, 8);
  auto buf = h.alloc(2 * kLba);
  const auto t0 = std::chrono::steady_clock::now();
  const uint16_t wcid = h.submit(qw, nvme::make_write(1, 0, 1, buf->iova(), 0));
  const uint16_t rcid = h.submit(qr, nvme::make_read(1, 1, 1, buf->iova(kLba), 0));
  const auto r = h.poll(qr, 5000ms);
  REQUIRE(r.has_value());
  CHECK(r->cid == rcid);
  const double read_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK(read_s >= 0.001);
  // The thread did not wait for the write to serve the read: the write cannot be due yet. (Checked
  // only when the read came back well inside the write's latency; no speed is asserted.)
  if (read_s < 0.25) CHECK_FALSE(h.poll(qw, 0ms, false).has_value());
  // The write's completion is held for its latency even though its data moved long ago.
  const auto w = h.poll(qw, 5000ms);
  REQUIRE(w.has_value());
  CHECK(w->cid == wcid);
  CHECK(status_of(*w).ok());
  const double write_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK(write_s >= 0.300);
}
