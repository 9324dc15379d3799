#include "examples/llm/tokenizer/tokenizer.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <queue>
#include <stdexcept>

#include "examples/llm/tokenizer/unicode.h"

namespace gpunvme::llm {
namespace {

const std::string kSpace = "\xE2\x96\x81";  // U+2581, SentencePiece's visible space

std::string escape_spaces(const std::string& s) {
  std::string out;
  for (char ch : s) {
    if (ch == ' ') out += kSpace;
    else out += ch;
  }
  return out;
}

// One symbol of the SentencePiece merge: a byte range of the text, linked to its neighbours.
struct Symbol {
  size_t off, n;
  int prev, next;
};

// The token types llama.cpp's special-token cache holds.
bool is_special(TokenType t) { return t == TokenType::kControl || t == TokenType::kUserDefined || t == TokenType::kUnknown; }

struct Bigram {
  int left, right;
  float score;
  size_t size;
  // Highest score first; on a tie the leftmost pair (llama_bigram_spm::comparator).
  bool operator<(const Bigram& o) const { return score < o.score || (score == o.score && left > o.left); }
};

}  // namespace

Tokenizer::Tokenizer(Vocab v) : v_(std::move(v)) {
  const std::string instead = "; pass --prompt-ids instead";
  if (v_.model == "gpt2") {
    pre_ = pre_tokenizer_named(v_.pre);
    if (!pre_)
      unsupported_ = "BPE pre-tokenizer tokenizer.ggml.pre = '" + v_.pre + "' is not supported (supported: " + supported_pre_tokenizers() + ")" + instead;
    else if (v_.merges.empty())
      unsupported_ = "the BPE vocabulary has no tokenizer.ggml.merges" + instead;
    else
      try {
        merges_.emplace(v_.merges);
      } catch (const std::runtime_error& e) {
        unsupported_ = e.what() + instead;
      }
  } else if (v_.model != "llama") {
    unsupported_ = "tokenizer '" + v_.model + "' is not supported (supported: 'llama', SentencePiece-style; 'gpt2', byte-level BPE)" + instead;
  }
  for (uint32_t i = 0; i < v_.size(); ++i)
    if (is_special(v_.type[i]) && !v_.text[i].empty()) special_.push_back(i);
  std::stable_sort(special_.begin(), special_.end(),
                   [&](uint32_t a, uint32_t b) { return v_.text[a].size() > v_.text[b].size(); });
}

// llama.cpp's tokenizer_st_partition: every special token, longest first, is cut out of the remaining
// plain text wherever it occurs; control and unknown ones only with parse_special.
std::vector<Tokenizer::Fragment> Tokenizer::split_special(const std::string& text, bool parse_special) const {
  std::vector<Fragment> frags{{text, -1}};
  for (uint32_t id : special_) {
    if (!parse_special && v_.type[id] != TokenType::kUserDefined) continue;
    const std::string& t = v_.text[id];
    std::vector<Fragment> next;
    for (Fragment& f : frags) {
      if (f.token >= 0 || f.text.find(t) == std::string::npos) {
        next.push_back(std::move(f));
        continue;
      }
      size_t pos = 0, hit;
      while ((hit = f.text.find(t, pos)) != std::string::npos) {
        if (hit > pos) next.push_back({f.text.substr(pos, hit - pos), -1});
        next.push_back({t, int64_t(id)});
        pos = hit + t.size();
      }
      if (pos < f.text.size()) next.push_back({f.text.substr(pos), -1});
    }
    frags = std::move(next);
  }
  return frags;
}

void Tokenizer::encode_spm(const std::string& text, std::vector<uint32_t>& out) const {
  std::vector<Symbol> sym;
  for (size_t off = 0; off < text.size();) {
    const size_t n = std::min(utf8_sequence_length(static_cast<unsigned char>(text[off])), text.size() - off);
    sym.push_back({off, n, int(sym.size()) - 1, off + n == text.size() ? -1 : int(sym.size()) + 1});
    off += n;
  }
  std::priority_queue<Bigram> work;
  std::map<std::string, std::pair<int, int>> rev_merge;
  auto try_add = [&](int l, int r) {
    if (l < 0 || r < 0) return;
    const std::string s = text.substr(sym[l].off, sym[l].n + sym[r].n);
    const int64_t id = v_.find(s);
    if (id < 0) return;
    work.push({l, r, v_.score[size_t(id)], s.size()});
    rev_merge[s] = {l, r};
  };
  for (int i = 1; i < int(sym.size()); ++i) try_add(i - 1, i);
  while (!work.empty()) {
    const Bigram b = work.top();
    work.pop();
    Symbol& l = sym[b.left];
    Symbol& r = sym[b.right];
    if (l.n == 0 || r.n == 0 || l.n + r.n != b.size) continue;  // one side was merged meanwhile
    l.n += r.n;
    r.n = 0;
    l.next = r.next;
    if (r.next >= 0) sym[r.next].prev = b.left;
    try_add(l.prev, b.left);
    try_add(b.left, l.next);
  }
  // Each final symbol is a token, or splits back along its merges, or falls back to byte tokens.
  auto resegment = [&](auto&& self, const Symbol& s) -> void {
    const std::string t = text.substr(s.off, s.n);
    if (const int64_t id = v_.find(t); id >= 0) {
      out.push_back(uint32_t(id));
      return;
    }
    if (const auto it = rev_merge.find(t); it != rev_merge.end()) {
      self(self, sym[it->second.first]);
      self(self, sym[it->second.second]);
      return;
    }
    for (unsigned char c : t) {
      char name[8];
      std::snprintf(name, sizeof name, "<0x%02X>", c);
      const int64_t id = v_.find(name);
      if (id < 0) throw std::runtime_error(std::string("the vocabulary has no byte token ") + name);
      out.push_back(uint32_t(id));
    }
  };
  if (sym.empty()) return;
  for (int i = 0; i != -1; i = sym[i].next) resegment(resegment, sym[i]);
}

// Each word of the pre-tokenized text: its GPT-2 byte symbols merged into tokens (or the word's own
// token, takes_whole_word_tokens); a piece that is no token falls back to the tokens of its single
// bytes, if any, as llama.cpp.
void Tokenizer::encode_bpe(const std::string& text, std::vector<uint32_t>& out) const {
  const std::u32string cps = decode_utf8(text);
  size_t pos = 0;
  for (const size_t n : split_words(cps, *pre_)) {
    std::string utf8;
    for (size_t k = pos; k < pos + n; ++k) append_utf8(utf8, cps[k]);
    pos += n;
    const std::string word = bytes_to_symbols(utf8);
    if (const int64_t id = v_.find(word); id >= 0 && takes_whole_word_tokens(*pre_)) {
      out.push_back(uint32_t(id));
      continue;
    }
    for (const std::string& p : merges_->apply(word)) {
      if (const int64_t id = v_.find(p); id >= 0) {
        out.push_back(uint32_t(id));
        continue;
      }
      for (char c : p)
        if (const int64_t id = v_.find(std::string(1, c)); id >= 0) out.push_back(uint32_t(id));
    }
  }
}

std::vector<uint32_t> Tokenizer::encode(const std::string& text, bool add_special, bool parse_special) const {
  if (!unsupported_.empty()) throw std::runtime_error(unsupported_);
  std::vector<uint32_t> out;
  if (add_special && v_.add_bos && v_.bos >= 0) out.push_back(uint32_t(v_.bos));
  bool prev_special = true;  // the space prefix goes before the first piece of plain text
  for (const Fragment& f : split_special(text, parse_special)) {
    if (f.token >= 0) {
      out.push_back(uint32_t(f.token));
      prev_special = true;
      continue;
    }
    if (pre_) encode_bpe(f.text, out);
    else encode_spm(escape_spaces((v_.add_space_prefix && prev_special ? " " : "") + f.text), out);
    prev_special = false;
  }
  if (add_special && v_.add_eos && v_.eos >= 0) out.push_back(uint32_t(v_.eos));
  return out;
}

std::string Tokenizer::piece(uint32_t id) const {
  if (id >= v_.size()) return "";
  const std::string& t = v_.text[id];
  if (v_.model == "gpt2") {
    // llama.cpp prints a BPE model's normal tokens byte-decoded, user-defined ones as they are, and
    // nothing for the other types.
    if (v_.type[id] == TokenType::kUserDefined) return t;
    return v_.type[id] == TokenType::kNormal ? symbols_to_bytes(t) : "";
  }
  if (v_.type[id] == TokenType::kByte && t.size() == 6) return std::string(1, char(std::stoi(t.substr(3, 2), nullptr, 16)));
  if (v_.type[id] == TokenType::kControl) return "";
  std::string out;
  for (size_t i = 0; i < t.size();) {
    if (t.compare(i, kSpace.size(), kSpace) == 0) {
      out += ' ';
      i += kSpace.size();
    } else {
      out += t[i++];
    }
  }
  return out;
}

}  // namespace gpunvme::llm
