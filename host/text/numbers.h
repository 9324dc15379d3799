// One grammar for numbers and sizes, shared by every tool's options and the emu: device string.
//   number:  decimal digits only: no sign, no 0x, no leading zero ("0100" is refused, not octal 64)
//   size:    a number with an optional binary suffix K, M, G or T (powers of 1024), optionally
//            followed by B or iB; case-insensitive: 4096, 128K, 128KB, 128KiB, 1g
//   decimal: a non-negative decimal fraction: 4, 0.5, .25 (no exponent, no inf/nan)
//   code:    a number, or 0x and 1..16 hex digits: for values the NVMe spec writes in hex (status
//            codes, opcodes, bit masks), so "sc=0x81" reads like the spec; the only place 0x is taken
// Errors name what was being parsed and the bad text: "--start-lba: '-1' is not a number (...)".
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

namespace gpunvme::text {

class ParseError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// `what` names the option or key in the error ("--bs", "size").
uint64_t parse_u64(std::string_view what, std::string_view text);
uint64_t parse_size(std::string_view what, std::string_view text);
double parse_decimal(std::string_view what, std::string_view text);
uint64_t parse_code(std::string_view what, std::string_view text);

// The shortest spelling parse_size reads back to `bytes`: 4096 -> "4K", 3 << 30 -> "3G", 1000 -> "1000".
std::string size_text(uint64_t bytes);

}  // namespace gpunvme::text
