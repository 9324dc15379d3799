#include "examples/llm/tokenizer/pretokenize.h"

#include "examples/llm/tokenizer/unicode.h"

namespace gpunvme::llm {
namespace {

using unicode_data::CodepointClass;

// One pass over one piece of text; each match_* is one alternative of the expression and returns the
// length it matches at `pos` (0: no match).
class Scanner {
 public:
  Scanner(std::u32string_view t, PreTokenizer p) : t_(t), p_(p) {}

  // The first alternative that matches at `pos`, in the expression's order.
  size_t next_word(size_t pos) const {
    if (p_ == PreTokenizer::kGpt4o) {
      if (const size_t n = match_cased_word(pos)) return n;
      if (const size_t n = match_digits(pos, 3)) return n;
    } else {
      if (const size_t n = match_contraction(pos)) return n;
      if (const size_t n = match_letters(pos)) return n;
      if (const size_t n = match_digits(pos, p_ == PreTokenizer::kLlama3 ? 3 : 1)) return n;
    }
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
  // GPT-4o's letter classes: llama.cpp's regex sees every non-ASCII letter as one caseless stand-in,
  // which is both "not a-z" and "not A-Z".
  bool upper(size_t i) const { return is(i, unicode_data::kLetter) && !(t_[i] >= U'a' && t_[i] <= U'z'); }
  bool lower_letter(size_t i) const { return is(i, unicode_data::kLetter) && !(t_[i] >= U'A' && t_[i] <= U'Z'); }
  // [^\r\n\p{L}\p{N}]: what may stand before a word's letters.
  bool word_prefix(size_t i) const { return in(i) && !newline(i) && !is(i, unicode_data::kLetter) && !is(i, unicode_data::kNumber); }

  // 's 't 're 've 'm 'll 'd, any case: their length at p (0: none).
  size_t contraction(size_t p) const {
    if (!in(p) || t_[p] != U'\'') return 0;
    const char32_t a = lower(p + 1), b = lower(p + 2);
    if (a == U's' || a == U't' || a == U'm' || a == U'd') return 2;
    if ((a == U'r' && b == U'e') || (a == U'v' && b == U'e') || (a == U'l' && b == U'l')) return 3;
    return 0;
  }
  // (?i:'s|'t|'re|'ve|'m|'ll|'d)
  size_t match_contraction(size_t p) const { return contraction(p); }
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
  // P?U*L+C? | P?U+L*C? as a backtracking engine takes them: the prefix P when letters follow it; then
  // the longest U* after which an L starts, and that L run; failing that (a run of A-Z only) the U run.
  size_t match_cased_word(size_t p) const {
    const size_t s = word_prefix(p) && is(p + 1, unicode_data::kLetter) ? p + 1 : p;
    size_t u = s;
    while (upper(u)) ++u;
    size_t e = u;
    for (size_t k = u + 1; k-- > s;)  // k = u, u-1, ..., s: where L+ starts
      if (lower_letter(k)) {
        for (e = k; lower_letter(e);) ++e;
        break;
      }
    if (e == s) return 0;  // no letter at s
    return e + contraction(e) - p;
  }
  // \p{N}{1,max_digits}
  size_t match_digits(size_t p, size_t max_digits) const {
    size_t e = p;
    while (e - p < max_digits && is(e, unicode_data::kNumber)) ++e;
    return e - p;
  }
  // " ?[^\s\p{L}\p{N}]+" then [\r\n]* (GPT-4o: [\r\n/]*)
  size_t match_punctuation(size_t p) const {
    size_t e = p + (in(p) && t_[p] == U' ');
    const size_t first = e;
    while (is(e, unicode_data::kOther)) ++e;
    if (e == first) return 0;
    while (newline(e) || (p_ == PreTokenizer::kGpt4o && in(e) && t_[e] == U'/')) ++e;
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
  PreTokenizer p_;
};

}  // namespace

std::optional<PreTokenizer> pre_tokenizer_named(std::string_view name) {
  // llama.cpp's llama_vocab::load: these names select LLAMA_VOCAB_PRE_TYPE_LLAMA3 / _QWEN2 with the
  // settings this tokenizer implements (and nothing else that changes the ids).
  if (name == "llama-bpe" || name == "llama3" || name == "llama-v3") return PreTokenizer::kLlama3;
  if (name == "qwen2" || name == "deepseek-r1-qwen") return PreTokenizer::kQwen2;
  if (name == "gpt-4o" || name == "llama4") return PreTokenizer::kGpt4o;
  return std::nullopt;
}

const char* supported_pre_tokenizers() {
  return "'llama-bpe' (Llama 3; also 'llama3', 'llama-v3'), 'qwen2' (also 'deepseek-r1-qwen'), 'gpt-4o' (gpt-oss; also 'llama4')";
}

std::vector<size_t> split_words(std::u32string_view text, PreTokenizer p) {
  const Scanner s(text, p);
  std::vector<size_t> words;
  for (size_t pos = 0; pos < text.size();) {
    const size_t n = s.next_word(pos);
    words.push_back(n);
    pos += n;
  }
  return words;
}

}  // namespace gpunvme::llm
