// The rules every extent a plan reads must obey, checked in one place before any memory is sized
// or any command is built (streamer, CPU and GPU expert fetchers, plans):
//   * its blocks lie inside the namespace: first_lba + lba_count neither wraps past 2^64 nor
//     passes the namespace's last block;
//   * its bytes lie inside its blocks: byte_in_first < LBA size and
//     byte_in_first + byte_length <= lba_count * LBA size (so byte_length > 0 needs lba_count > 0).
// A consumer is handed [data_offset, data_offset + byte_length) of a slot; these rules are what
// keep that range inside the blocks that were read.
#pragma once
#include <cstdint>
#include <string>

#include "runtime/model/lba_map.h"

namespace gpunvme::plan {

inline constexpr uint64_t kUnknownNamespaceBlocks = ~0ull;

// Empty when `e` obeys the rules, else the broken rule in words (for an error message).
std::string extent_problem(const model::Extent& e, uint32_t lba_bytes, uint64_t namespace_blocks);

// Throws gpunvme::Error(kInvalidArgument) "<what>: <problem>" when `e` breaks a rule.
void check_extent(const model::Extent& e, uint32_t lba_bytes, uint64_t namespace_blocks, const std::string& what);

}  // namespace gpunvme::plan
