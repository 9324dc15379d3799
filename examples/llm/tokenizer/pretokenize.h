// The pre-tokenizers of GPT-2-style BPE models: text is cut into words before any merge, so that no
// token spans a letter/digit/punctuation/space boundary. Llama 3 ("llama-bpe") and Qwen2 ("qwen2") use
// one regular expression, as llama.cpp spells it:
//   (?i:'s|'t|'re|'ve|'m|'ll|'d) | [^\r\n\p{L}\p{N}]?\p{L}+ | \p{N}{1,3} | ?[^\s\p{L}\p{N}]+[\r\n]*
//   | \s*[\r\n]+ | \s+(?!\S) | \s+
// Qwen2's differs only in \p{N}: one digit per word. GPT-4o's o200k split ("gpt-4o": gpt-oss), as
// llama.cpp runs it (std::regex over text whose non-ASCII code points are collapsed to one stand-in
// byte per class, so only ASCII letters have a case and marks are no letters):
//   P?U*L+C? | P?U+L*C? | \p{N}{1,3} | ?[^\s\p{L}\p{N}]+[\r\n/]* | \s*[\r\n]+ | \s+(?!\S) | \s+
// with P = [^\r\n\p{L}\p{N}], U = a letter but not a-z, L = a letter but not A-Z, C = the contractions
// 's 't 're 've 'm 'll 'd in either case (a suffix of the word here, not a word of their own).
// The scanner below tries the alternatives in that order at each position, as a backtracking regex
// engine would, without a regex library.
#pragma once
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace gpunvme::llm {

enum class PreTokenizer { kLlama3, kQwen2, kGpt4o };

// The pre-tokenizer llama.cpp applies for tokenizer.ggml.pre = `name` (its aliases included), or none.
std::optional<PreTokenizer> pre_tokenizer_named(std::string_view name);
// The names accepted, for error messages.
const char* supported_pre_tokenizers();

// llama.cpp's ignore_merges: with Llama 3's pre-tokenizer a word that is a token as a whole is that
// token, whether or not the merges would make it; Qwen2 and GPT-4o always merge.
inline bool takes_whole_word_tokens(PreTokenizer p) { return p == PreTokenizer::kLlama3; }

// The lengths, in code points, of the words of `text` (one piece of plain text), in order; their sum
// is text.size().
std::vector<size_t> split_words(std::u32string_view text, PreTokenizer p);

}  // namespace gpunvme::llm
