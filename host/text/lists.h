// Lists in option values: "--seqs 1,2,4,8", "--modes gpunvme,mmap", "--vram-budget 22G,40G". Items are
// separated by single commas; an empty item ("1,,2", "4,", "") is refused rather than skipped, since it is
// a typo more often than a wish. Each item of a number list follows numbers.h's grammar.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "host/text/numbers.h"

namespace gpunvme::text {

// Throws ParseError naming `what` and the text on an empty item.
std::vector<std::string> split_list(std::string_view what, std::string_view text);

// Numbers in [lo, hi]; throws ParseError naming `what`, the item and the range.
std::vector<uint64_t> parse_u64_list(std::string_view what, std::string_view text, uint64_t lo, uint64_t hi);

// Sizes as parse_size reads them (4096, 128K, 22G).
std::vector<uint64_t> parse_size_list(std::string_view what, std::string_view text);

}  // namespace gpunvme::text
