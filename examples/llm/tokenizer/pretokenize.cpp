#include "examples/llm/tokenizer/pretokenize.h"

#include "examples/llm/tokenizer/unicode.h"

namespace gpunvme::llm {
namespace {

using unicode_data::CodepointClass;

// One pass over one piece of text; each match_* is one alternative of the expression and returns the
// length it matches at `pos` (0: no match).
class Scanner {
 public:
  Scanner(std::u32string_view t, size_t max_digits) : t_(t), max_digits_(max_digits) {}

  // The first alternative that matches at `pos`, in the expression's order.
  size_t next_word(size_t pos) const {
    if (const size_t n = match_contraction(pos)) return n;
    if (const size_t n = match_letters(pos)) return n;
    if (const size_t n = match_digits(pos)) return n;
    if (const size_t n = match_punctuation(pos)) return n;
    if (const size_t n = match_newlines(pos)) return n;
    if (const size_t n = match_spaces(pos)) return n;
    return 1;  // unreachable: every code point is a letter, a digit, white space or other
  }

 private:
  bool in(size_t i) const { return i < t_.size(); }
  bool is(size_t i, CodepointClass c) const { return in(i) && codepoint_class(t_[i]) == c; }
  bool newline(size_t i) const { return in(i) && (t_[i] == U'\r' || t_[i] == U'\n'); }
  // ASCII only: no other code point lower-cases to the letters of a contraction.
  char32_t lower(size_t i) const {
    if (!in(i)) return 0;
    return t_[i] >= U'A' && t_[i] <= U'Z' ? t_[i] + (U'a' - U'A') : t_[i];
  }

  // (?i:'s|'t|'re|'ve|'m|'ll|'d)
  size_t match_contraction(size_t p) const {
    if (!in(p) || t_[p] != U'\'') return 0;
    const char32_t a = lower(p + 1), b = lower(p + 2);
    if (a == U's' || a == U't' || a == U'm' || a == U'd') return 2;
    if ((a == U'r' && b == U'e') || (a == U'v' && b == U'e') || (a == U'l' && b == U'l')) return 3;
    return 0;
  }
  // [^\r\n\p{L}\p{N}]?\p{L}+
  size_t match_letters(size_t p) const {
    size_t e = p;
    if (!is(e, unicode_data::kLetter)) {
      if (newline(e) || is(e, unicode_data::kNumber) || !is(e + 1, unicode_data::kLetter)) return 0;
      ++e;
    }
    while (is(e, unicode_data::kLetter)) ++e;
    return e - p;
  }
  // \p{N}{1,max_digits}
  size_t match_digits(size_t p) const {
    size_t e = p;
    while (e - p < max_digits_ && is(e, unicode_data::kNumber)) ++e;
    return e - p;
  }
  // " ?[^\s\p{L}\p{N}]+[\r\n]*"
  size_t match_punctuation(size_t p) const {
    size_t e = p + (in(p) && t_[p] == U' ');
    const size_t first = e;
    while (is(e, unicode_data::kOther)) ++e;
    if (e == first) return 0;
    while (newline(e)) ++e;
    return e - p;
  }
  // \s*[\r\n]+ : the white space up to its last line break
  size_t match_newlines(size_t p) const {
    size_t last = 0;
    for (size_t e = p; is(e, unicode_data::kWhitespace); ++e)
      if (newline(e)) last = e + 1;
    return last ? last - p : 0;
  }
  // \s+(?!\S) | \s+ : a run of white space, less its last one when a non-space follows (that one then
  // starts the next word, e.g. the space before a letter)
  size_t match_spaces(size_t p) const {
    size_t e = p;
    while (is(e, unicode_data::kWhitespace)) ++e;
    const size_t n = e - p;
    return n > 1 && in(e) ? n - 1 : n;
  }

  std::u32string_view t_;
  size_t max_digits_;
};

}  // namespace

std::optional<PreTokenizer> pre_tokenizer_named(std::string_view name) {
  // llama.cpp's llama_vocab::load: these names select LLAMA_VOCAB_PRE_TYPE_LLAMA3 / _QWEN2 with the
  // settings this tokenizer implements (and nothing else that changes the ids).
  if (name == "llama-bpe" || name == "llama3" || name == "llama-v3") return PreTokenizer::kLlama3;
  if (name == "qwen2" || name == "deepseek-r1-qwen") return PreTokenizer::kQwen2;
  return std::nullopt;
}

const char* supported_pre_tokenizers() { return "'llama-bpe' (Llama 3; also 'llama3', 'llama-v3'), 'qwen2' (also 'deepseek-r1-qwen')"; }

std::vector<size_t> split_words(std::u32string_view text, PreTokenizer p) {
  const Scanner s(text, p == PreTokenizer::kLlama3 ? 3 : 1);
  std::vector<size_t> words;
  for (size_t pos = 0; pos < text.size();) {
    const size_t n = s.next_word(pos);
    words.push_back(n);
    pos += n;
  }
  return words;
}

}  // namespace gpunvme::llm
