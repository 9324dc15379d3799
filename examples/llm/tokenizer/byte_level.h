// GPT-2's byte-level BPE: every byte of the text stands for one printable code point (its own for the
// printable Latin-1 bytes, U+0100 onwards for the rest: the space is "Ġ", U+0120), so that a token's
// text is always valid UTF-8 and merges never see raw control bytes. Then merges in rank order
// (tokenizer.ggml.merges), as llama.cpp's llm_tokenizer_bpe_session.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace gpunvme::llm {

// Each byte of `bytes` as the UTF-8 of its stand-in code point.
std::string bytes_to_symbols(std::string_view bytes);
// Back: each stand-in code point of `symbols` as its byte; a code point that stands for no byte is kept
// as its UTF-8 (a token text outside the byte alphabet, e.g. an added token).
std::string symbols_to_bytes(std::string_view symbols);

class BpeMerges {
 public:
  // `merges`: "left right" per entry, rank = index (tokenizer.ggml.merges). Throws naming the entry
  // that has no separating space.
  explicit BpeMerges(const std::vector<std::string>& merges);

  // The pieces of `word` (already in stand-in symbols) after every applicable merge, lowest rank first
  // and leftmost first among equal ranks.
  std::vector<std::string> apply(const std::string& word) const;
  size_t size() const { return rank_.size(); }

 private:
  using Pair = std::pair<std::string, std::string>;
  using PairView = std::pair<std::string_view, std::string_view>;
  // Transparent, so that a lookup needs no copies of the two texts.
  struct PairHash {
    using is_transparent = void;
    size_t operator()(PairView p) const;
    size_t operator()(const Pair& p) const { return (*this)(PairView(p.first, p.second)); }
  };
  struct PairEq {
    using is_transparent = void;
    template <class A, class B>
    bool operator()(const A& a, const B& b) const { return a.first == b.first && a.second == b.second; }
  };
  int64_t rank(std::string_view left, std::string_view right) const;
  std::unordered_map<Pair, uint32_t, PairHash, PairEq> rank_;
};

}  // namespace gpunvme::llm
