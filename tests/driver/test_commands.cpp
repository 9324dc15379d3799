#include <catch2/catch_test_macros.hpp>
#include <cstring>

#include "driver/commands.h"
#include "driver/identify.h"

using namespace gpunvme::nvme;

namespace {
uint32_t dword(const SubmissionEntry& e, int i) {
  uint32_t v;
  std::memcpy(&v, reinterpret_cast<const uint8_t*>(&e) + 4 * i, 4);
  return v;
}
}  // namespace

TEST_CASE("read/write encode SLBA and 0's based NLB", "[driver][commands]") {
  const SubmissionEntry e = make_read(1, 0x1234'5678'9ABCull, 256, 0x1000, 0x2000);
  CHECK(dword(e, 0) == nvm_op::kRead);
  CHECK(dword(e, 1) == 1);
  CHECK(dword(e, 10) == 0x5678'9ABCu);
  CHECK(dword(e, 11) == 0x1234u);
  CHECK(dword(e, 12) == 255);
  CHECK(rw_slba(e) == 0x1234'5678'9ABCull);
  CHECK(rw_nblocks(e) == 256);
  CHECK(e.prp1 == 0x1000);
  CHECK(e.prp2 == 0x2000);
  CHECK(rw_nblocks(make_write(1, 0, kMaxBlocksPerCommand, 0, 0)) == kMaxBlocksPerCommand);
}

TEST_CASE("admin commands put fields where the spec says", "[driver][commands]") {
  const SubmissionEntry cq = make_create_io_cq(3, 1024, 0xABC000);
  CHECK(cq.opcode == admin_op::kCreateIoCq);
  CHECK(cq.cdw10 == ((1023u << 16) | 3));
  CHECK((cq.cdw11 & 1) == 1);        // physically contiguous
  CHECK((cq.cdw11 & 2) == 0);        // interrupts off
  const SubmissionEntry sq = make_create_io_sq(3, 1024, 0xDEF000, 3);
  CHECK(sq.cdw11 == ((3u << 16) | 1));
  CHECK(make_delete_io_sq(7).cdw10 == 7);
  const SubmissionEntry nq = make_set_num_queues(64, 32);
  CHECK(nq.cdw10 == feature::kNumberOfQueues);
  CHECK(nq.cdw11 == ((31u << 16) | 63u));
  const QueueGrant g = decode_num_queues((7u << 16) | 15u);
  CHECK(g.sq_count == 16);
  CHECK(g.cq_count == 8);
  const SubmissionEntry log = make_get_log_page(log_page::kSmartHealth, 0xFFFFFFFF, 512, 0x1000, 0);
  CHECK(log.cdw10 == ((127u << 16) | 2));
  const SubmissionEntry big = make_get_log_page(log_page::kErrorInformation, 0, 1u << 20, 0, 0);
  CHECK((big.cdw10 >> 16) == 0xFFFF);
  CHECK(big.cdw11 == 0x3);
  CHECK(make_abort(2, 77).cdw10 == ((77u << 16) | 2));
  CHECK(make_abort(2, 77).opcode == 0x08);
  CHECK(abort_took_effect(0));
  CHECK(abort_took_effect(0xFFFFFFFEu));
  CHECK_FALSE(abort_took_effect(1));
  CHECK(make_identify(cns::kController, 0, 0x5000, 0).cdw10 == 1);
}

TEST_CASE("completion entry fields and phase", "[driver][commands]") {
  CompletionEntry c{};
  c.status = 0x0101;  // SC 0x80 with phase 1
  CHECK(c.phase() == 1);
}

TEST_CASE("identify namespace decodes the formatted LBA size", "[driver][identify]") {
  IdentifyNamespace ns{};
  ns.nlbaf = 1;
  ns.lbaf[0] = LbaFormat::make(9);
  ns.lbaf[1] = LbaFormat::make(12);
  ns.flbas = 1;
  CHECK(ns.lba_bytes() == 4096);
  ns.flbas = 0;
  CHECK(ns.lba_bytes() == 512);
  ns.lbaf[17] = LbaFormat::make(13);
  ns.flbas = 0x21;  // index 17: bits 3:0 = 1, bits 6:5 = 1
  CHECK(ns.formatted_lba_index() == 17);
  CHECK(ns.lba_bytes() == 8192);
}
