// UTF-8 <-> code points and the code point classes the BPE pre-tokenizers need, with llama.cpp's rules
// for bad input (unicode.cpp there), so that the engine cuts a hostile prompt where llama.cpp does.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "examples/llm/tokenizer/unicode_ranges.h"

namespace gpunvme::llm {

inline constexpr char32_t kReplacementChar = 0xFFFD;

// The length of the UTF-8 sequence that byte `c` starts, from its high 4 bits as llama.cpp's
// unicode_len_utf8: 1 for a stray continuation byte, 4 for 0xF0..0xFF (also the invalid 0xF8..0xFF).
// SentencePiece cuts its symbols with it, so a bad byte swallows what llama.cpp's does.
inline size_t utf8_sequence_length(unsigned char c) {
  constexpr uint8_t kByHighBits[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return kByHighBits[c >> 4];
}

// The code points of `s`. Lenient as llama.cpp's unicode_cpts_from_utf8: a byte that does not start a
// complete sequence (a stray continuation byte, a truncated or broken sequence, 0xF8..0xFF) becomes
// one U+FFFD and decoding goes on at the next byte; overlong forms and surrogates decode as their value.
// A 4-byte form above U+10FFFF (which llama.cpp cannot re-encode, it throws) is bad input here too.
std::u32string decode_utf8(std::string_view s);

// Appends the UTF-8 form of `cp` (up to U+10FFFF; 1 to 4 bytes).
void append_utf8(std::string& out, char32_t cp);

// \p{L}, \p{N}, \s or other (unicode_ranges.h, generated from Python's unicodedata).
unicode_data::CodepointClass codepoint_class(char32_t cp);

}  // namespace gpunvme::llm
