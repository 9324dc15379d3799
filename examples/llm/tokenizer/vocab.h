// A model's vocabulary as its GGUF stores it (tokenizer.ggml.*): token texts, scores, types, the
// special ids and the tokenizer kind. Read once; the tokenizers and the detokenizer work on it.
#pragma once
#include <cstdint>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "runtime/gguf/gguf_file.h"

namespace gpunvme::llm {

// llama.cpp's llama_token_type values as GGUF stores them.
enum class TokenType : int32_t { kUndefined = 0, kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6 };

struct Vocab {
  std::string model;  // tokenizer.ggml.model: "llama" (SentencePiece), "gpt2" (BPE), "none"
  std::string pre;    // tokenizer.ggml.pre (BPE pre-tokenizer name)
  std::vector<std::string> text;
  std::vector<float> score;
  std::vector<TokenType> type;
  std::vector<std::string> merges;  // tokenizer.ggml.merges ("gpt2"): "left right", rank = index
  std::unordered_map<std::string, uint32_t> id_of;
  int64_t bos = -1, eos = -1, unk = -1;
  std::set<uint32_t> eog;  // the tokens that end generation, as llama.cpp finds them (special_tokens.h)
  bool add_bos = false, add_eos = false, add_space_prefix = true;

  size_t size() const { return text.size(); }
  bool is_eog(uint32_t id) const { return eog.count(id) != 0; }
  int64_t find(const std::string& s) const {
    const auto it = id_of.find(s);
    return it == id_of.end() ? -1 : int64_t(it->second);
  }
};

// Reads the vocabulary, its token types as llama.cpp corrects them by text (special_tokens.h). A model
// without one (tokenizer.ggml.model missing or "none") gives an empty
// Vocab with model "none"; inconsistent arrays are a std::runtime_error naming the key.
Vocab read_vocab(const gguf::GgufFile& f);

}  // namespace gpunvme::llm
