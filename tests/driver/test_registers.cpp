#include <catch2/catch_test_macros.hpp>

#include "driver/registers.h"

using namespace gpunvme::nvme;

TEST_CASE("CAP fields decode with their units", "[driver][registers]") {
  // QEMU's controller: MQES 2047, CQR, TO 15 (7.5 s), DSTRD 0, CSS NVM, MPSMIN 0, MPSMAX 4.
  const Cap cap = Cap::make({.mqes = 2047, .cqr = true, .to_500ms = 15, .dstrd = 0, .css = 1, .mpsmin = 0, .mpsmax = 4, .cmbs = false});
  CHECK(cap.mqes() == 2047);
  CHECK(cap.max_queue_entries() == 2048);
  CHECK(cap.contiguous_queues_required());
  CHECK(cap.ready_timeout_ms() == 7500);
  CHECK(cap.doorbell_stride_bytes() == 4);
  CHECK(cap.nvm_command_set());
  CHECK(cap.min_page_bytes() == 4096);
  CHECK(cap.max_page_bytes() == 65536);
  CHECK_FALSE(cap.cmb_supported());
  const Cap wide = Cap::make({.mqes = 1, .cqr = false, .to_500ms = 255, .dstrd = 3, .css = 1, .mpsmin = 1, .mpsmax = 15, .cmbs = true});
  CHECK(wide.doorbell_stride_bytes() == 32);
  CHECK(wide.ready_timeout_ms() == 127500);
  CHECK(wide.min_page_bytes() == 8192);
  CHECK(wide.cmb_supported());
  CHECK(wide.raw >> 48 == ((1u << 9) | (15u << 4) | 1u) >> 0);
}

TEST_CASE("CC is built field by field", "[driver][registers]") {
  const Cc cc = Cc{}.with_en(true).with_css(cc::kCssNvm).with_mps(0).with_iosqes(6).with_iocqes(4).with_shn(cc::kShnNormal);
  CHECK(cc.raw == (1u | (6u << 16) | (4u << 20) | (1u << 14)));
  CHECK(cc.en());
  CHECK(cc.iosqes() == 6);
  CHECK(cc.iocqes() == 4);
  CHECK(cc.shn() == cc::kShnNormal);
  CHECK(cc.page_bytes() == 4096);
  CHECK_FALSE(cc.with_en(false).en());
}

TEST_CASE("CSTS, AQA, VS and CMBSZ decode", "[driver][registers]") {
  const Csts csts{0b0101};  // RDY, SHST=01
  CHECK(csts.rdy());
  CHECK_FALSE(csts.cfs());
  CHECK(csts.shst() == csts::kShstOccurring);
  CHECK(Csts{0xFFFFFFFFu}.device_gone());
  CHECK(Csts{}.with_cfs(true).cfs());
  const Aqa aqa = Aqa::make(64, 32);
  CHECK(aqa.raw == (63u | (31u << 16)));
  CHECK(aqa.sq_entries() == 64);
  CHECK(aqa.cq_entries() == 32);
  const Vs vs = Vs::make(1, 4, 0);
  CHECK(vs.raw == 0x00010400);
  CHECK(vs.major() == 1);
  CHECK(vs.minor() == 4);
  const Cmbsz cmb{(16u << 12) | (2u << 8) | 0x1F};  // 16 units of 1 MiB
  CHECK(cmb.size_bytes() == 16ull << 20);
  CHECK(cmb.sqs());
  CHECK(cmb.wds());
}

TEST_CASE("doorbell offsets follow CAP.DSTRD", "[driver][registers]") {
  for (uint32_t dstrd = 0; dstrd < 4; ++dstrd) {
    const uint32_t stride = 4u << dstrd;
    for (uint32_t q = 0; q < 70; ++q) {
      CHECK(sq_tail_doorbell_offset(q, dstrd) == 0x1000 + 2 * q * stride);
      CHECK(cq_head_doorbell_offset(q, dstrd) == 0x1000 + (2 * q + 1) * stride);
    }
    CHECK(bar0_bytes_for(64, dstrd) == cq_head_doorbell_offset(64, dstrd) + 4);
  }
}
