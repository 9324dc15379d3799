// NVM I/O: data integrity through every PRP shape, validation errors, phase tags, CQ back-pressure.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <thread>
#include <vector>

#include "driver/prp.h"
#include "host/io_patterns.h"
#include "tests/emulator/harness.h"

using namespace emutest;
namespace sc = gpunvme::nvme::sc;
namespace sct = gpunvme::nvme::sct;

namespace {

constexpr uint64_t kPage = 4096;

// A transfer whose pages are scattered over a pool in a random order, with its PRP list pages
// (chained when long) in a separate pool: the controller must follow the PRPs, not assume contiguity.
struct Scatter {
  std::unique_ptr<DmaBuf> pool, lists;
  std::vector<uint32_t> perm;
  uint64_t offset = 0, length = 0;
  nvme::PrpPair prp{};

  Scatter(Harness& h, uint64_t off, uint64_t len, uint32_t seed) : offset(off), length(len) {
    const uint64_t pages = nvme::prp_pages_spanned(off, len, kPage);
    pool = h.alloc(pages * kPage);
    const uint64_t entries = nvme::prp_list_entries(off, len, kPage);
    lists = h.alloc(std::max<uint64_t>(1, nvme::prp_list_pages(entries, kPage)) * kPage);
    perm.resize(pages);
    std::iota(perm.begin(), perm.end(), 0u);
    std::shuffle(perm.begin(), perm.end(), std::mt19937(seed));
    uint32_t next_list = 0;
    REQUIRE(nvme::build_prps(
        off, len, kPage, [&](uint64_t k) { return pool->iova(uint64_t(perm[k]) * kPage); },
        [&](uint32_t) {
          const uint32_t j = next_list++;
          return nvme::PrpListMemory{reinterpret_cast<uint64_t*>(lists->as() + j * kPage), lists->iova(j * kPage)};
        },
        &prp));
  }
  uint8_t& byte(uint64_t i) {
    const uint64_t at = offset + i;
    return pool->as()[uint64_t(perm[at / kPage]) * kPage + at % kPage];
  }
};

uint8_t pattern(uint64_t i, uint32_t salt) { return gpunvme::host::pattern_byte(salt, i); }

void roundtrip(Harness& h, Queue& q, uint32_t lba, uint64_t slba, uint64_t off, uint32_t blocks, uint32_t salt) {
  const uint64_t len = uint64_t(blocks) * lba;
  INFO("lba " << lba << " offset " << off << " blocks " << blocks);
  Scatter w(h, off, len, salt);
  uint64_t sum_w = 0;
  for (uint64_t i = 0; i < len; ++i) sum_w += (w.byte(i) = pattern(i, salt)) * (i % 251 + 1);
  auto c = h.run(q, nvme::make_write(1, slba, blocks, w.prp.prp1, w.prp.prp2));
  REQUIRE(status_of(c).ok());

  Scatter r(h, off, len, salt + 1);
  std::memset(r.pool->as(), 0xEE, r.pool->size());
  c = h.run(q, nvme::make_read(1, slba, blocks, r.prp.prp1, r.prp.prp2));
  REQUIRE(status_of(c).ok());
  uint64_t sum_r = 0, mismatches = 0;
  for (uint64_t i = 0; i < len; ++i) {
    sum_r += r.byte(i) * (i % 251 + 1);
    mismatches += r.byte(i) != pattern(i, salt);
  }
  CHECK(mismatches == 0);
  CHECK(sum_r == sum_w);
  // Bytes of the first page before the offset were not written by the read.
  if (off > 0) CHECK(r.pool->as()[uint64_t(r.perm[0]) * kPage] == 0xEE);
}

}  // namespace

TEST_CASE("write then read back through every PRP shape", "[emulator][io]") {
  for (uint32_t lba : {512u, 4096u}) {
    Harness h(std::string("emu:ram,size=16M,mdts=0,ready_ms=0,lba=") + std::to_string(lba));
    h.enable();
    auto& q = h.create_pair(1, 32);
    const uint32_t per_page = kPage / lba;
    roundtrip(h, q, lba, 0, 0, per_page, 1);                    // one page
    roundtrip(h, q, lba, 8, 0, 2 * per_page, 2);                // PRP2 is a data page
    roundtrip(h, q, lba, 100, 0, 7 * per_page, 3);              // PRP list
    roundtrip(h, q, lba, 1000, 0, 600 * per_page, 4);           // list chained over two pages
    if (lba == 512) {
      roundtrip(h, q, lba, 5, 512, 1, 5);                       // offset, inside one page
      roundtrip(h, q, lba, 6, 3584, 2, 6);                      // offset, crossing into PRP2
      roundtrip(h, q, lba, 20, 1024, 40, 7);                    // offset, list
      roundtrip(h, q, lba, 3000, 2048, 513 * 8 + 3, 8);         // offset, chained list
    }
  }
}

TEST_CASE("file backing is a raw image", "[emulator][io]") {
  char tmpl[] = "/tmp/gpunvme-emu-io-XXXXXX";
  const int fd = mkstemp(tmpl);
  REQUIRE(fd >= 0);
  {
    Harness h(std::string("emu:") + tmpl + ",size=1M,ready_ms=0");
    CHECK(lseek(fd, 0, SEEK_END) == 1 << 20);  // extended to the size
    h.enable();
    auto& q = h.create_pair(1, 8);
    auto buf = h.alloc(8192);
    for (int i = 0; i < 8192; ++i) buf->as()[i] = uint8_t(i * 7);
    REQUIRE(status_of(h.run(q, nvme::make_write(1, 10, 16, buf->iova(), buf->iova(4096)))).ok());
    REQUIRE(status_of(h.run(q, nvme::make_flush(1))).ok());
    std::vector<uint8_t> file(8192);
    REQUIRE(pread(fd, file.data(), 8192, 10 * 512) == 8192);
    CHECK(std::memcmp(file.data(), buf->as(), 8192) == 0);
    // And the other way: bytes put in the file (as dd would) are what the controller reads.
    std::vector<uint8_t> src(4096, 0x5A);
    REQUIRE(pwrite(fd, src.data(), 4096, 512 * 100) == 4096);
    REQUIRE(status_of(h.run(q, nvme::make_read(1, 100, 8, buf->iova(), 0))).ok());
    CHECK(std::memcmp(buf->as(), src.data(), 4096) == 0);
  }
  {  // Reopened without a size: the existing file's size gives the capacity.
    Harness h(std::string("emu:") + tmpl);
    CHECK(h.ctrl().namespace_at(1).blocks() == (1u << 20) / 512);
  }
  // A file that ends inside a block (as a GGUF does): the namespace covers it, the tail reads as zeros.
  std::vector<uint8_t> tail(300, 0xC3);
  REQUIRE(pwrite(fd, tail.data(), tail.size(), 1 << 20) == 300);
  {
    Harness h(std::string("emu:") + tmpl + ",ready_ms=0");
    CHECK(h.ctrl().namespace_at(1).blocks() == (1u << 20) / 512 + 1);
    h.enable();
    auto& q = h.create_pair(1, 8);
    auto buf = h.alloc(4096);
    std::memset(buf->as(), 0xEE, 4096);
    REQUIRE(status_of(h.run(q, nvme::make_read(1, (1u << 20) / 512, 1, buf->iova(), 0))).ok());
    CHECK(std::memcmp(buf->as(), tail.data(), 300) == 0);
    CHECK(std::all_of(buf->as() + 300, buf->as() + 512, [](uint8_t b) { return b == 0; }));
  }
  close(fd);
  std::remove(tmpl);
}

TEST_CASE("command validation: NSID, LBA range, MDTS, PSDT, opcode", "[emulator][io]") {
  Harness h("emu:ram,size=1M,mdts=1,namespaces=2,ready_ms=0");
  h.enable();
  auto& q = h.create_pair(1, 16);
  auto buf = h.alloc(3 * 4096);
  const uint64_t blocks = (1u << 20) / 512;
  const auto is = [&](const nvme::SubmissionEntry& e, uint8_t code) {
    auto c = h.run(q, e);
    INFO("status " << nvme::describe(status_of(c)));
    return is_status(c, sct::kGeneric, code);
  };
  CHECK(is(nvme::make_read(0, 0, 1, buf->iova(), 0), sc::kInvalidNamespaceOrFormat));
  CHECK(is(nvme::make_read(3, 0, 1, buf->iova(), 0), sc::kInvalidNamespaceOrFormat));
  CHECK(is(nvme::make_read(0xFFFFFFFFu, 0, 1, buf->iova(), 0), sc::kInvalidNamespaceOrFormat));
  CHECK(is(nvme::make_read(2, blocks - 1, 1, buf->iova(), 0), sc::kSuccess));
  CHECK(is(nvme::make_read(2, blocks - 1, 2, buf->iova(), 0), sc::kLbaOutOfRange));
  CHECK(is(nvme::make_read(1, blocks, 1, buf->iova(), 0), sc::kLbaOutOfRange));
  CHECK(is(nvme::make_read(1, ~0ull, 2, buf->iova(), 0), sc::kLbaOutOfRange));
  // MDTS 1 = 8 KiB: 16 blocks fit, 17 do not.
  CHECK(is(nvme::make_read(1, 0, 16, buf->iova(), buf->iova(4096)), sc::kSuccess));
  CHECK(is(nvme::make_read(1, 0, 17, buf->iova(), buf->iova(4096)), sc::kInvalidField));
  auto sgl = nvme::make_read(1, 0, 1, buf->iova(), 0);
  sgl.flags = 0x40;
  CHECK(is(sgl, sc::kInvalidField));
  auto fused = nvme::make_read(1, 0, 1, buf->iova(), 0);
  fused.flags = 0x01;
  CHECK(is(fused, sc::kInvalidField));
  auto unknown = nvme::make_flush(1);
  unknown.opcode = 0x7F;
  CHECK(is(unknown, sc::kInvalidOpcode));
  CHECK(is(nvme::make_flush(0xFFFFFFFFu), sc::kSuccess));
  CHECK(is(nvme::make_flush(9), sc::kInvalidNamespaceOrFormat));
  // Error Information log has the latest error first.
  auto log = h.alloc(4096);
  REQUIRE(status_of(h.admin_cmd(nvme::make_get_log_page(nvme::log_page::kErrorInformation, 0, 64, log->iova(), 0))).ok());
  uint16_t sqid, st;
  std::memcpy(&sqid, log->as() + 8, 2);
  std::memcpy(&st, log->as() + 12, 2);
  CHECK(sqid == 1);
  CHECK(nvme::Status::from_cqe_status(st).code() == sc::kInvalidNamespaceOrFormat);
}

TEST_CASE("PRP faults: unmapped memory and bad offsets touch nothing", "[emulator][io]") {
  Harness h("emu:ram,size=4M,mdts=0,ready_ms=0");
  h.enable();
  auto& q = h.create_pair(1, 16);
  auto buf = h.alloc(4 * 4096);
  auto list = h.alloc(4096);
  std::memset(buf->as(), 0xEE, buf->size());
  const auto untouched = [&] {
    return std::all_of(buf->as(), buf->as() + buf->size(), [](uint8_t b) { return b == 0xEE; });
  };
  const auto is = [&](const nvme::SubmissionEntry& e, uint8_t code) {
    auto c = h.run(q, e);
    INFO("status " << nvme::describe(status_of(c)));
    return is_status(c, sct::kGeneric, code);
  };
  // A virtual address passed as a bus address.
  CHECK(is(nvme::make_read(1, 0, 8, reinterpret_cast<uintptr_t>(buf->as()), 0), sc::kDataTransferError));
  // PRP2 (a data page) outside any mapping: the first page is not written either.
  CHECK(is(nvme::make_read(1, 0, 16, buf->iova(), 0x1000), sc::kDataTransferError));
  // Transfer running off the end of the mapping (guard gap after it).
  CHECK(is(nvme::make_read(1, 0, 16, buf->iova(3 * 4096), buf->iova(4 * 4096)), sc::kDataTransferError));
  // A list whose third entry is unmapped.
  auto* l = list->as<uint64_t>();
  l[0] = buf->iova(4096);
  l[1] = buf->iova(2 * 4096);
  l[2] = 0x7777'0000'0000ull;
  CHECK(is(nvme::make_read(1, 0, 32, buf->iova(), list->iova()), sc::kDataTransferError));
  // The list pointer itself unmapped.
  CHECK(is(nvme::make_read(1, 0, 32, buf->iova(), 0x5000'0000'0000ull), sc::kDataTransferError));
  CHECK(untouched());
  // Offsets: PRP1 not dword aligned, PRP2 data pointer with an offset, list entry with an offset,
  // list pointer not qword aligned.
  CHECK(is(nvme::make_read(1, 0, 1, buf->iova(2), 0), sc::kPrpOffsetInvalid));
  CHECK(is(nvme::make_read(1, 0, 16, buf->iova(), buf->iova(4096 + 512)), sc::kPrpOffsetInvalid));
  l[2] = buf->iova(3 * 4096) + 8;
  CHECK(is(nvme::make_read(1, 0, 32, buf->iova(), list->iova()), sc::kPrpOffsetInvalid));
  CHECK(is(nvme::make_read(1, 0, 32, buf->iova(), list->iova(4)), sc::kPrpOffsetInvalid));
  CHECK(untouched());
  // A write from unmapped memory leaves the medium unchanged.
  auto good = h.alloc(4096);
  std::memset(good->as(), 0x11, 4096);
  REQUIRE(status_of(h.run(q, nvme::make_write(1, 64, 8, good->iova(), 0))).ok());
  CHECK(is(nvme::make_write(1, 64, 16, good->iova(), 0x2000), sc::kDataTransferError));
  std::memset(good->as(), 0, 4096);
  REQUIRE(status_of(h.run(q, nvme::make_read(1, 64, 8, good->iova(), 0))).ok());
  CHECK(good->as()[4095] == 0x11);
}

TEST_CASE("phase tag flips across wraps of a small CQ; SQHD follows", "[emulator][io]") {
  Harness h("emu:null,ready_ms=0");
  h.enable();
  auto& q = h.create_pair(1, 4, 4);
  auto* ring = q.cq->as<nvme::CompletionEntry>();
  for (int i = 0; i < 22; ++i) {
    const uint32_t slot = q.cqr.head;
    const uint32_t phase = q.cqr.phase;
    const uint16_t cid = h.submit(q, nvme::make_read(1, uint64_t(i), 1, 0, 0));
    auto c = h.poll(q);
    REQUIRE(c.has_value());
    CHECK(c->cid == cid);
    CHECK((ring[slot].status & 1u) == phase);
    CHECK(c->sqhd == q.sqr.tail);
    CHECK(status_of(*c).ok());
  }
  CHECK(q.cqr.phase == ((22 / 4) % 2 == 0 ? 1u : 0u));
  // Batches of three (the most a 4-entry CQ can hold).
  for (int round = 0; round < 5; ++round) {
    uint16_t cids[3];
    for (auto& cid : cids) cid = h.submit(q, nvme::make_write(1, 0, 8, 0, 0), false);
    h.ring_sq(q);
    for (uint16_t cid : cids) {
      auto c = h.poll(q);
      REQUIRE(c.has_value());
      CHECK(c->cid == cid);
    }
  }
}

TEST_CASE("CQ full: completions wait for the CQ head doorbell, nothing is overwritten", "[emulator][io]") {
  Harness h("emu:null,ready_ms=0");
  h.enable();
  auto& q = h.create_pair(1, 16, 4);  // 4-entry CQ holds 3 completions
  auto* ring = q.cq->as<nvme::CompletionEntry>();
  std::vector<uint16_t> cids;
  for (int i = 0; i < 10; ++i) cids.push_back(h.submit(q, nvme::make_read(1, 0, 1, 0, 0), false));
  h.ring_sq(q);
  REQUIRE(wait_until([&] { return h.ctrl().stats().per_queue[1] >= 3; }));
  std::this_thread::sleep_for(20ms);
  CHECK(h.ctrl().stats().per_queue[1] == 3);
  CHECK(ring[3].status == 0);  // the slot that must stay empty
  // Consume without telling the controller: still nothing new.
  for (int i = 0; i < 3; ++i) {
    auto c = h.poll(q, 100ms, /*release=*/false);
    REQUIRE(c.has_value());
    CHECK(c->cid == cids[size_t(i)]);
  }
  std::this_thread::sleep_for(10ms);
  CHECK(ring[3].status == 0);
  h.release_cq(q);
  for (size_t i = 3; i < cids.size(); ++i) {
    auto c = h.poll(q);
    REQUIRE(c.has_value());
    CHECK(c->cid == cids[i]);
  }
  CHECK(h.ctrl().stats().per_queue[1] == 10);
}

TEST_CASE("null namespace: validates LBAs, moves nothing, counts", "[emulator][io]") {
  Harness h("emu:null,size=1G,lba=4096,ready_ms=0");
  h.enable();
  auto& q = h.create_pair(1, 64);
  CHECK(status_of(h.run(q, nvme::make_read(1, 0, 64, 0xdead000, 0))).ok());  // PRPs not looked at
  CHECK(is_status(h.run(q, nvme::make_read(1, (1u << 30) / 4096, 1, 0, 0)), sct::kGeneric, sc::kLbaOutOfRange));
  const auto s = h.ctrl().stats();
  CHECK(s.bytes_read == 64 * 4096);
  CHECK(s.reads == 1);
  CHECK(s.errors >= 1);
}

TEST_CASE("write zeroes and flush", "[emulator][io]") {
  Harness h("emu:ram,size=1M,ready_ms=0");
  h.enable();
  auto& q = h.create_pair(1, 8);
  auto buf = h.alloc(4096);
  std::memset(buf->as(), 0x42, 4096);
  REQUIRE(status_of(h.run(q, nvme::make_write(1, 0, 8, buf->iova(), 0))).ok());
  auto wz = nvme::make_rw(nvme::nvm_op::kWriteZeroes, 1, 2, 3, 0, 0);
  REQUIRE(status_of(h.run(q, wz)).ok());
  REQUIRE(status_of(h.run(q, nvme::make_flush(1))).ok());
  REQUIRE(status_of(h.run(q, nvme::make_read(1, 0, 8, buf->iova(), 0))).ok());
  for (int b = 0; b < 8; ++b) CHECK(buf->as()[b * 512 + 17] == ((b >= 2 && b < 5) ? 0 : 0x42));
}

TEST_CASE("several queues on several controller threads", "[emulator][io]") {
  Harness h("emu:null,threads=2,queues=4,ready_ms=0");
  h.enable();
  std::vector<Queue*> qs;
  for (uint16_t id = 1; id <= 4; ++id) qs.push_back(&h.create_pair(id, 32));
  constexpr int kPerQueue = 500;
  std::vector<std::thread> ts;
  std::atomic<int> bad{0};
  for (Queue* q : qs) {
    ts.emplace_back([&, q] {
      for (int i = 0; i < kPerQueue; i += 8) {
        std::vector<uint16_t> cids;
        for (int k = 0; k < 8; ++k) cids.push_back(h.submit(*q, nvme::make_read(1, 0, 8, 0, 0), false));
        h.ring_sq(*q);
        for (uint16_t cid : cids) {
          auto c = h.poll(*q);
          if (!c || c->cid != cid || c->sqid != q->qid || !status_of(*c).ok()) ++bad;
        }
      }
    });
  }
  for (auto& t : ts) t.join();
  CHECK(bad == 0);
  const auto s = h.ctrl().stats();
  for (uint16_t id = 1; id <= 4; ++id) CHECK(s.per_queue[id] == 504);
  CHECK(s.io_commands == 4 * 504);
}
