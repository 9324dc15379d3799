// Admin commands: Identify bytes, Number of Queues, queue create/delete rules, features, logs, abort.
#include "driver/identify.h"
#include "tests/emulator/harness.h"

using namespace emutest;
namespace sc = gpunvme::nvme::sc;
namespace sct = gpunvme::nvme::sct;

TEST_CASE("Identify controller, namespace and active namespace list", "[emulator][admin]") {
  Harness h("emu:ram,size=8M,lba=4096,namespaces=3,mdts=6,ready_ms=0");
  h.enable();
  auto buf = h.alloc(4096);

  auto c = h.admin_cmd(nvme::make_identify(nvme::cns::kController, 0, buf->iova(), 0));
  REQUIRE(status_of(c).ok());
  const auto& id = *buf->as<nvme::IdentifyController>();
  CHECK(id.vid == 0x1b36);
  CHECK(std::string(id.mn, 27) == "gpunvme emulated controller");
  CHECK(id.mn[39] == ' ');
  CHECK(std::string(id.sn, 4) == "GPUN");
  CHECK(id.fr[0] != 0);
  CHECK(id.mdts == 6);
  CHECK(id.sqes == 0x66);
  CHECK(id.cqes == 0x44);
  CHECK(id.nn == 3);
  CHECK(id.ver == 0x00010400u);
  CHECK((id.oncs & nvme::oncs::kWriteZeroes) != 0);
  CHECK(id.sgls == 0);

  std::memset(buf->as(), 0xAB, 4096);
  c = h.admin_cmd(nvme::make_identify(nvme::cns::kNamespace, 2, buf->iova(), 0));
  REQUIRE(status_of(c).ok());
  const auto& ns = *buf->as<nvme::IdentifyNamespace>();
  CHECK(ns.nsze == (8u << 20) / 4096);
  CHECK(ns.ncap == ns.nsze);
  CHECK(ns.lba_bytes() == 4096);
  CHECK(ns.rsvd384[0] == 0);  // the whole structure was written

  c = h.admin_cmd(nvme::make_identify(nvme::cns::kActiveNamespaceList, 1, buf->iova(), 0));
  REQUIRE(status_of(c).ok());
  const auto& list = *buf->as<nvme::ActiveNamespaceList>();
  CHECK(list.nsid[0] == 2);
  CHECK(list.nsid[1] == 3);
  CHECK(list.nsid[2] == 0);

  CHECK(is_status(h.admin_cmd(nvme::make_identify(nvme::cns::kNamespace, 0, buf->iova(), 0)), sct::kGeneric,
                  sc::kInvalidNamespaceOrFormat));
  CHECK(is_status(h.admin_cmd(nvme::make_identify(nvme::cns::kNamespace, 4, buf->iova(), 0)), sct::kGeneric,
                  sc::kInvalidNamespaceOrFormat));
  CHECK(is_status(h.admin_cmd(nvme::make_identify(0x55, 0, buf->iova(), 0)), sct::kGeneric, sc::kInvalidField));
  // Identify data to an IOVA nobody mapped, and to a pointer passed as a bus address.
  CHECK(is_status(h.admin_cmd(nvme::make_identify(nvme::cns::kController, 0, 0x1000, 0)), sct::kGeneric,
                  sc::kDataTransferError));
  CHECK(is_status(h.admin_cmd(nvme::make_identify(nvme::cns::kController, 0,
                                                  reinterpret_cast<uintptr_t>(buf->as()), 0)),
                  sct::kGeneric, sc::kDataTransferError));
  // Identify across two pages with an offset PRP1.
  auto two = h.alloc(8192);
  c = h.admin_cmd(nvme::make_identify(nvme::cns::kController, 0, two->iova(2048), two->iova(4096)));
  REQUIRE(status_of(c).ok());
  CHECK(reinterpret_cast<nvme::IdentifyController*>(two->as() + 2048)->sqes == 0x66);
}

TEST_CASE("Number of Queues: grant, remember, refuse after queues exist", "[emulator][admin]") {
  Harness h("emu:ram,size=1M,queues=8,ready_ms=0");
  h.enable();
  auto c = h.admin_cmd(nvme::make_get_features(nvme::feature::kNumberOfQueues));
  REQUIRE(status_of(c).ok());
  CHECK(nvme::decode_num_queues(c.dw0).sq_count == 8);  // default: the maximum

  auto too_many = nvme::make_set_num_queues(1, 1);
  too_many.cdw11 = 0x0000FFFF;  // NSQR 65535 is invalid (section 5.27.1.5)
  CHECK(is_status(h.admin_cmd(too_many), sct::kGeneric, sc::kInvalidField));
  c = h.admin_cmd(nvme::make_set_num_queues(32, 3));
  REQUIRE(status_of(c).ok());
  auto g = nvme::decode_num_queues(c.dw0);
  CHECK(g.sq_count == 8);
  CHECK(g.cq_count == 3);
  // A second request before any queue exists does not change the allocation.
  c = h.admin_cmd(nvme::make_set_num_queues(2, 2));
  REQUIRE(status_of(c).ok());
  CHECK(nvme::decode_num_queues(c.dw0).cq_count == 3);
  c = h.admin_cmd(nvme::make_get_features(nvme::feature::kNumberOfQueues));
  CHECK(nvme::decode_num_queues(c.dw0).sq_count == 8);
  CHECK(nvme::decode_num_queues(c.dw0).cq_count == 3);

  auto cqmem = h.alloc(4096);
  CHECK(is_status(h.admin_cmd(nvme::make_create_io_cq(4, 16, cqmem->iova())), sct::kCommandSpecific,
                  sc::kInvalidQueueIdentifier));  // beyond the 3 granted CQs
  REQUIRE(status_of(h.admin_cmd(nvme::make_create_io_cq(3, 16, cqmem->iova()))).ok());
  CHECK(is_status(h.admin_cmd(nvme::make_set_num_queues(4, 4)), sct::kGeneric, sc::kCommandSequenceError));

  REQUIRE(status_of(h.admin_cmd(nvme::make_delete_io_cq(3))).ok());
}

TEST_CASE("Create / delete I/O queue rules", "[emulator][admin]") {
  Harness h("emu:ram,size=1M,queues=4,mqes=255,ready_ms=0");
  h.enable();
  auto cq = h.alloc(64 * 16);
  auto sq = h.alloc(64 * 64);
  const auto specific_is = [&](const nvme::SubmissionEntry& e, uint8_t code) {
    return is_status(h.admin_cmd(e), sct::kCommandSpecific, code);
  };
  const auto generic_is = [&](const nvme::SubmissionEntry& e, uint8_t code) {
    return is_status(h.admin_cmd(e), sct::kGeneric, code);
  };
  // QID 0 and beyond the maximum.
  CHECK(specific_is(nvme::make_create_io_cq(0, 16, cq->iova()), sc::kInvalidQueueIdentifier));
  CHECK(specific_is(nvme::make_create_io_cq(5, 16, cq->iova()), sc::kInvalidQueueIdentifier));
  // Sizes: 1 entry, and more than CAP.MQES + 1.
  CHECK(specific_is(nvme::make_create_io_cq(1, 1, cq->iova()), sc::kInvalidQueueSize));
  CHECK(specific_is(nvme::make_create_io_cq(1, 257, cq->iova()), sc::kInvalidQueueSize));
  // PC=0 while CAP.CQR=1.
  auto noncontig = nvme::make_create_io_cq(1, 16, cq->iova());
  noncontig.cdw11 &= ~1u;
  CHECK(generic_is(noncontig, sc::kInvalidField));
  // Base not page aligned; base not mapped.
  CHECK(generic_is(nvme::make_create_io_cq(1, 16, cq->iova(256)), sc::kPrpOffsetInvalid));
  CHECK(generic_is(nvme::make_create_io_cq(1, 16, 0x7000'0000'0000ull), sc::kDataTransferError));
  REQUIRE(status_of(h.admin_cmd(nvme::make_create_io_cq(1, 64, cq->iova()))).ok());
  // A ring that runs past the end of its mapping (128 x 64 bytes in one mapped page).
  auto small = h.alloc(4096);
  CHECK(generic_is(nvme::make_create_io_sq(1, 128, small->iova(), 1), sc::kDataTransferError));

  // SQ on a missing CQ.
  CHECK(specific_is(nvme::make_create_io_sq(1, 16, sq->iova(), 3), sc::kCompletionQueueInvalid));
  CHECK(specific_is(nvme::make_create_io_sq(1, 16, sq->iova(), 0), sc::kCompletionQueueInvalid));
  REQUIRE(status_of(h.admin_cmd(nvme::make_create_io_sq(1, 64, sq->iova(), 1))).ok());
  // Existing QIDs.
  CHECK(specific_is(nvme::make_create_io_cq(1, 16, cq->iova()), sc::kInvalidQueueIdentifier));
  CHECK(specific_is(nvme::make_create_io_sq(1, 16, sq->iova(), 1), sc::kInvalidQueueIdentifier));
  // CQ with an SQ attached cannot go; missing queues cannot be deleted.
  CHECK(specific_is(nvme::make_delete_io_cq(1), sc::kInvalidQueueDeletion));
  CHECK(specific_is(nvme::make_delete_io_sq(2), sc::kInvalidQueueIdentifier));
  CHECK(specific_is(nvme::make_delete_io_sq(0), sc::kInvalidQueueIdentifier));
  CHECK(specific_is(nvme::make_delete_io_cq(0), sc::kInvalidQueueIdentifier));
  REQUIRE(status_of(h.admin_cmd(nvme::make_delete_io_sq(1))).ok());
  REQUIRE(status_of(h.admin_cmd(nvme::make_delete_io_cq(1))).ok());
  CHECK(specific_is(nvme::make_delete_io_cq(1), sc::kInvalidQueueIdentifier));
}

TEST_CASE("Features, log pages, abort, unknown opcodes", "[emulator][admin]") {
  Harness h("emu:ram,size=1M,ready_ms=0");
  h.enable();
  // Volatile Write Cache: on by default, settable.
  auto c = h.admin_cmd(nvme::make_get_features(nvme::feature::kVolatileWriteCache));
  REQUIRE(status_of(c).ok());
  CHECK(c.dw0 == 1);
  auto set = nvme::make_get_features(nvme::feature::kVolatileWriteCache);
  set.opcode = nvme::admin_op::kSetFeatures;
  set.cdw11 = 0;
  REQUIRE(status_of(h.admin_cmd(set)).ok());
  CHECK(h.admin_cmd(nvme::make_get_features(nvme::feature::kVolatileWriteCache)).dw0 == 0);
  // Arbitration round-trips.
  auto arb = nvme::make_get_features(nvme::feature::kArbitration);
  arb.opcode = nvme::admin_op::kSetFeatures;
  arb.cdw11 = 0x03020103;
  REQUIRE(status_of(h.admin_cmd(arb)).ok());
  CHECK(h.admin_cmd(nvme::make_get_features(nvme::feature::kArbitration)).dw0 == 0x03020103u);
  // Anything else is an invalid field.
  CHECK(is_status(h.admin_cmd(nvme::make_get_features(nvme::feature::kPowerManagement)), sct::kGeneric,
                  sc::kInvalidField));
  CHECK(is_status(h.admin_cmd(nvme::make_get_features(0x7F)), sct::kGeneric, sc::kInvalidField));

  auto log = h.alloc(4096);
  c = h.admin_cmd(nvme::make_get_log_page(nvme::log_page::kFirmwareSlot, 0, 512, log->iova(), 0));
  REQUIRE(status_of(c).ok());
  CHECK(log->as()[0] == 1);
  CHECK(std::string(reinterpret_cast<char*>(log->as() + 8), 3) == "EMU");
  c = h.admin_cmd(nvme::make_get_log_page(nvme::log_page::kSmartHealth, 0xFFFFFFFFu, 512, log->iova(), 0));
  REQUIRE(status_of(c).ok());
  CHECK(log->as()[3] == 100);  // available spare
  c = h.admin_cmd(nvme::make_get_log_page(nvme::log_page::kErrorInformation, 0, 64, log->iova(), 0));
  REQUIRE(status_of(c).ok());
  CHECK(is_status(h.admin_cmd(nvme::make_get_log_page(0x70, 0, 512, log->iova(), 0)), sct::kCommandSpecific,
                  sc::kInvalidLogPage));

  c = h.admin_cmd(nvme::make_abort(0, 1));
  REQUIRE(status_of(c).ok());
  CHECK((c.dw0 & 1) == 1);  // not aborted: it already ran

  auto unknown = nvme::make_get_features(0);
  unknown.opcode = 0x7E;
  CHECK(is_status(h.admin_cmd(unknown), sct::kGeneric, sc::kInvalidOpcode));
  unknown.opcode = 0xC0;  // vendor specific range: none implemented
  CHECK(is_status(h.admin_cmd(unknown), sct::kGeneric, sc::kInvalidOpcode));
  auto sgl = nvme::make_identify(nvme::cns::kController, 0, log->iova(), 0);
  sgl.flags = 0x40;  // PSDT = 01b
  CHECK(is_status(h.admin_cmd(sgl), sct::kGeneric, sc::kInvalidField));
}

TEST_CASE("SMART counts data units and host commands", "[emulator][admin]") {
  Harness h("emu:ram,size=4M,ready_ms=0");
  h.enable();
  auto& q = h.create_pair(1, 16);
  auto data = h.alloc(4096);
  for (int i = 0; i < 3; ++i) REQUIRE(status_of(h.run(q, nvme::make_write(1, 0, 8, data->iova(), 0))).ok());
  REQUIRE(status_of(h.run(q, nvme::make_read(1, 0, 8, data->iova(), 0))).ok());
  auto log = h.alloc(4096);
  REQUIRE(status_of(h.admin_cmd(nvme::make_get_log_page(nvme::log_page::kSmartHealth, 0, 512, log->iova(), 0))).ok());
  const auto le64 = [&](int off) {
    uint64_t v;
    std::memcpy(&v, log->as() + off, 8);
    return v;
  };
  CHECK(le64(32) == 1);  // data units read: 8 blocks of 512 rounds up to one unit
  CHECK(le64(48) == 1);
  CHECK(le64(64) == 1);  // host read commands
  CHECK(le64(80) == 3);
  const auto s = h.ctrl().stats();
  CHECK(s.bytes_written == 3 * 4096);
  CHECK(s.bytes_read == 4096);
  CHECK(s.per_queue[1] == 4);
  CHECK(s.admin_commands >= 4);
}
