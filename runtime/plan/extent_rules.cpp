#include "runtime/plan/extent_rules.h"

#include "host/error.h"

namespace gpunvme::plan {

namespace {
std::string blocks_text(const model::Extent& e) {
  return "LBA " + std::to_string(e.first_lba) + " + " + std::to_string(e.lba_count) + " blocks";
}
}  // namespace

std::string extent_problem(const model::Extent& e, uint32_t lba_bytes, uint64_t namespace_blocks) {
  uint64_t end = 0;
  if (__builtin_add_overflow(e.first_lba, e.lba_count, &end))
    return blocks_text(e) + " wraps past the last addressable block (2^64)";
  if (end > namespace_blocks)
    return blocks_text(e) + " runs past the end of the namespace (" + std::to_string(namespace_blocks) + " blocks)";
  if (lba_bytes == 0) return "the LBA size is 0";
  if (e.byte_in_first >= lba_bytes)
    return "byte_in_first " + std::to_string(e.byte_in_first) + " is not inside the first block (" +
           std::to_string(lba_bytes) + "-byte blocks)";
  uint64_t block_bytes = 0;
  if (__builtin_mul_overflow(e.lba_count, uint64_t(lba_bytes), &block_bytes))
    return blocks_text(e) + " spans more than 2^64 bytes";
  const uint64_t room = e.lba_count > 0 ? block_bytes - e.byte_in_first : 0;  // byte_in_first < lba_bytes
  if (e.byte_length > room)
    return std::to_string(e.byte_length) + " bytes from byte " + std::to_string(e.byte_in_first) + " of " +
           blocks_text(e) + " end past its last block (" + std::to_string(block_bytes) +
           " bytes); lba_count must cover byte_in_first + byte_length";
  return {};
}

void check_extent(const model::Extent& e, uint32_t lba_bytes, uint64_t namespace_blocks, const std::string& what) {
  std::string problem = extent_problem(e, lba_bytes, namespace_blocks);
  if (!problem.empty()) throw Error(ErrorKind::kInvalidArgument, what + ": " + problem);
}

}  // namespace gpunvme::plan
