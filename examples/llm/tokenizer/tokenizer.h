// Text -> token ids and back, from the model's own vocabulary, the way llama.cpp does it
// (llama-vocab.cpp): special tokens (user-defined ones always, control ones when asked) are cut out of
// the text first, then each piece of plain text goes through the model's tokenizer:
//   "llama"  SentencePiece-style (Gemma, Llama 2): score-ordered merges, byte fallback
//   "gpt2"   byte-level BPE (Llama 3, Qwen2, gpt-oss): pre-tokenizer (pretokenize.h), then rank-ordered merges
//            over GPT-2's byte symbols (byte_level.h)
// A vocabulary of any other kind (or a BPE pre-tokenizer not listed in pretokenize.h) still loads:
// piece() works and --prompt-ids does, only encode() refuses, naming what is supported.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "examples/llm/tokenizer/byte_level.h"
#include "examples/llm/tokenizer/pretokenize.h"
#include "examples/llm/tokenizer/vocab.h"

namespace gpunvme::llm {

class Tokenizer {
 public:
  explicit Tokenizer(Vocab v);

  // Token ids of `text`, as llama_tokenize(add_special, parse_special): with `add_special`, the model's
  // BOS first and EOS last when the model asks for them (tokenizer.ggml.add_bos_token / add_eos_token);
  // with `parse_special`, the texts of control tokens (<|start|>, <|im_end|>, ...) are those tokens too,
  // as a chat template's are. Throws std::runtime_error when this vocabulary cannot be encoded
  // (unsupported()).
  std::vector<uint32_t> encode(const std::string& text, bool add_special, bool parse_special = false) const;
  // The text of one token as printed (SentencePiece's U+2581 back to a space, <0xXX> or GPT-2's byte
  // symbols back to their bytes; control tokens print nothing).
  std::string piece(uint32_t id) const;
  // Why encode() refuses this vocabulary (naming what is supported), or empty when it does not.
  const std::string& unsupported() const { return unsupported_; }
  const Vocab& vocab() const { return v_; }

 private:
  struct Fragment {
    std::string text;
    int64_t token = -1;  // >= 0: an already-recognised special token
  };
  std::vector<Fragment> split_special(const std::string& text, bool parse_special) const;
  void encode_spm(const std::string& text, std::vector<uint32_t>& out) const;
  void encode_bpe(const std::string& text, std::vector<uint32_t>& out) const;

  Vocab v_;
  std::vector<uint32_t> special_;       // longest text first, as llama.cpp's special-token cache
  std::optional<PreTokenizer> pre_;     // "gpt2" only
  std::optional<BpeMerges> merges_;     // "gpt2" only
  std::string unsupported_;
};

}  // namespace gpunvme::llm
