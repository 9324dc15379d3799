#include <catch2/catch_test_macros.hpp>
#include <string>

#include "driver/status.h"

using namespace gpunvme::nvme;

TEST_CASE("status half-word round trips with the phase tag", "[driver][status]") {
  const Status s = Status::make(sct::kGeneric, sc::kLbaOutOfRange, true);
  for (uint32_t phase : {0u, 1u}) {
    const uint16_t half = s.to_cqe_status(phase);
    CHECK((half & 1u) == phase);
    const Status back = Status::from_cqe_status(half);
    CHECK(back == s);
    CHECK(back.code() == 0x80);
    CHECK(back.type() == 0);
    CHECK(back.dnr());
    CHECK_FALSE(back.ok());
  }
  CHECK(Status::make(0, 0).ok());
  CHECK_FALSE(Status::make(sct::kCommandSpecific, 0).ok());
}

TEST_CASE("every status type decodes to readable text", "[driver][status]") {
  CHECK(std::string(status_code_name(sct::kGeneric, sc::kInvalidField)) == "Invalid Field in Command");
  CHECK(std::string(status_code_name(sct::kGeneric, sc::kPrpOffsetInvalid)) == "PRP Offset Invalid");
  CHECK(std::string(status_code_name(sct::kCommandSpecific, sc::kInvalidQueueDeletion)) == "Invalid Queue Deletion");
  CHECK(std::string(status_code_name(sct::kMediaError, sc::kUnrecoveredReadError)) == "Unrecovered Read Error");
  CHECK(std::string(status_code_name(sct::kPathRelated, 0x71)) == "Command Aborted By Host");
  CHECK(std::string(status_code_name(sct::kVendorSpecific, 0x12)) == "Vendor Specific Status");
  CHECK(std::string(status_code_name(sct::kGeneric, 0x7F)) == "Reserved/unknown status code");
  CHECK(std::string(status_type_name(5)) == "Reserved Status Code Type");
  const std::string d = describe(Status::make(sct::kGeneric, sc::kLbaOutOfRange, true));
  CHECK(d == "LBA Out of Range (SCT 0x0 Generic Command Status, SC 0x80, DNR)");
  // Every generic code 0x00..0x22 except the reserved 0x17 has a name.
  for (int c = 0; c <= 0x22; ++c) {
    if (c == 0x17) continue;
    INFO("SC " << c);
    CHECK(std::string(status_code_name(sct::kGeneric, uint8_t(c))) != "Reserved/unknown status code");
  }
}
