// Text -> token ids and back, from the model's own vocabulary, the way llama.cpp does it
// (llama-vocab.cpp): user-defined tokens are cut out of the text first, then each piece of plain
// text goes through the model's tokenizer. SentencePiece-style ("llama": Gemma, Llama 2) is here;
// a model whose tokenizer is not supported gets an error naming it (--prompt-ids still works).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "examples/llm/tokenizer/vocab.h"

namespace gpunvme::llm {

class Tokenizer {
 public:
  // Throws std::runtime_error naming tokenizer.ggml.model when it is not supported.
  explicit Tokenizer(Vocab v);

  // Token ids of `text`; with `add_bos`, the model's BOS first when the model asks for it
  // (tokenizer.ggml.add_bos_token), as llama_tokenize(add_special = true, parse_special = false).
  std::vector<uint32_t> encode(const std::string& text, bool add_bos) const;
  // The text of one token as printed (SentencePiece's U+2581 back to a space, <0xXX> to its byte).
  std::string piece(uint32_t id) const;
  const Vocab& vocab() const { return v_; }

 private:
  struct Fragment {
    std::string text;
    int64_t token = -1;  // >= 0: an already-recognised user-defined token
  };
  std::vector<Fragment> split_user_defined(const std::string& text) const;
  void encode_spm(const std::string& text, std::vector<uint32_t>& out) const;

  Vocab v_;
  std::vector<uint32_t> user_defined_;  // longest text first, as llama.cpp's special-token cache
};

}  // namespace gpunvme::llm
