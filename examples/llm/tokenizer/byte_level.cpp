#include "examples/llm/tokenizer/byte_level.h"

#include <array>
#include <functional>
#include <queue>
#include <stdexcept>

#include "examples/llm/tokenizer/unicode.h"

namespace gpunvme::llm {
namespace {

// GPT-2's bytes_to_unicode: the printable bytes ('!'..'~', U+00A1..U+00AC, U+00AE..U+00FF) stand for
// themselves, the other 68 bytes in byte order for U+0100, U+0101, ...
struct ByteTable {
  std::array<char32_t, 256> symbol{};
  std::unordered_map<char32_t, uint8_t> byte;
  std::array<std::string, 256> utf8;
  ByteTable() {
    char32_t next = 0x100;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      symbol[b] = printable ? char32_t(b) : next++;
      byte[symbol[b]] = uint8_t(b);
      append_utf8(utf8[b], symbol[b]);
    }
  }
};

const ByteTable& table() {
  static const ByteTable t;
  return t;
}

// One symbol of the merge: a byte range of the word, linked to its neighbours (n == 0: merged away).
struct Symbol {
  size_t off, n;
  int prev, next;
};

struct Candidate {
  int left, right;
  uint32_t rank;
  size_t left_n, right_n;  // the two symbols' lengths when queued: a merge since changes one of them
  // The lowest rank first; on a tie the leftmost pair (llama.cpp's llm_bigram_bpe comparator).
  bool operator<(const Candidate& o) const { return rank > o.rank || (rank == o.rank && left > o.left); }
};

}  // namespace

std::string bytes_to_symbols(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char b : bytes) out += table().utf8[b];
  return out;
}

std::string symbols_to_bytes(std::string_view symbols) {
  std::string out;
  for (char32_t cp : decode_utf8(symbols)) {
    const auto it = table().byte.find(cp);
    if (it != table().byte.end()) out += char(it->second);
    else append_utf8(out, cp);
  }
  return out;
}

size_t BpeMerges::PairHash::operator()(PairView p) const {
  const size_t h = std::hash<std::string_view>{}(p.first);
  return h ^ (std::hash<std::string_view>{}(p.second) + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2));
}

BpeMerges::BpeMerges(const std::vector<std::string>& merges) {
  rank_.reserve(merges.size());
  for (uint32_t r = 0; r < merges.size(); ++r) {
    const std::string& m = merges[r];
    // As llama.cpp: the first space after the first character separates the two parts.
    const size_t sp = m.find(' ', 1);
    if (sp == std::string::npos)
      throw std::runtime_error("tokenizer.ggml.merges[" + std::to_string(r) + "] = '" + m + "' is not 'left right'");
    rank_.emplace(std::pair{m.substr(0, sp), m.substr(sp + 1)}, r);  // a repeated pair keeps its first rank
  }
}

int64_t BpeMerges::rank(std::string_view left, std::string_view right) const {
  const auto it = rank_.find(PairView(left, right));
  return it == rank_.end() ? -1 : int64_t(it->second);
}

std::vector<std::string> BpeMerges::apply(const std::string& word) const {
  std::vector<Symbol> sym;
  for (size_t off = 0; off < word.size();) {
    const size_t n = std::min(utf8_sequence_length(static_cast<unsigned char>(word[off])), word.size() - off);
    sym.push_back({off, n, int(sym.size()) - 1, off + n == word.size() ? -1 : int(sym.size()) + 1});
    off += n;
  }
  auto text = [&](int i) { return std::string_view(word).substr(sym[i].off, sym[i].n); };
  std::priority_queue<Candidate> work;
  auto try_add = [&](int l, int r) {
    if (l < 0 || r < 0) return;
    if (const int64_t k = rank(text(l), text(r)); k >= 0) work.push({l, r, uint32_t(k), sym[l].n, sym[r].n});
  };
  for (int i = 1; i < int(sym.size()); ++i) try_add(i - 1, i);
  while (!work.empty()) {
    const Candidate c = work.top();
    work.pop();
    Symbol& l = sym[c.left];
    Symbol& r = sym[c.right];
    // Stale: either side merged meanwhile (the left one only ever grows into the right one, which is
    // then empty; the right one grows into its own neighbour). llama.cpp compares the texts: the same.
    if (l.n != c.left_n || r.n != c.right_n) continue;
    l.n += r.n;
    r.n = 0;
    l.next = r.next;
    if (r.next >= 0) sym[r.next].prev = c.left;
    try_add(l.prev, c.left);
    try_add(c.left, l.next);
  }
  std::vector<std::string> out;
  if (!sym.empty())
    for (int i = 0; i != -1; i = sym[i].next) out.emplace_back(text(i));
  return out;
}

}  // namespace gpunvme::llm
