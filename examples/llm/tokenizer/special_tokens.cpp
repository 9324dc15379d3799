#include "examples/llm/tokenizer/special_tokens.h"

#include <initializer_list>
#include <optional>
#include <string_view>

namespace gpunvme::llm {
namespace {

using Texts = std::initializer_list<std::string_view>;

// The special-token kinds llama.cpp looks up by text when the file does not name their id, with the
// texts it knows (llama-vocab.cpp as built into llama-cpp-python 0.3.36). A kind found by text is made
// a control token; `eog` kinds also end generation.
struct Kind {
  const char* key;
  Texts texts;
  bool eog;
};

const Kind kKinds[] = {
    {"tokenizer.ggml.eot_token_id",
     {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|end_of_text|>", "<EOT>", "_<EOT>", "[EOT]",
      "<\xEF\xBD\x9C" "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>", "<end_of_utterance>"},
     true},
    {"tokenizer.ggml.eom_token_id", {"<|eom_id|>"}, true},
    {"tokenizer.ggml.fim_pre_token_id",
     {"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<\xEF\xBD\x9C" "fim\xE2\x96\x81" "begin\xEF\xBD\x9C>", "<PRE>",
      "\xE2\x96\x81<PRE>", "<|code_prefix|>", "<|prefix|>"},
     false},
    {"tokenizer.ggml.fim_suf_token_id",
     {"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<\xEF\xBD\x9C" "fim\xE2\x96\x81hole\xEF\xBD\x9C>", "<SUF>",
      "\xE2\x96\x81<SUF>", "<|code_suffix|>", "<|suffix|>"},
     false},
    {"tokenizer.ggml.fim_mid_token_id",
     {"<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<\xEF\xBD\x9C" "fim\xE2\x96\x81" "end\xEF\xBD\x9C>", "<MID>",
      "\xE2\x96\x81<MID>", "<|code_middle|>", "<|middle|>"},
     false},
    {"tokenizer.ggml.fim_pad_token_id", {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"}, true},
    {"tokenizer.ggml.fim_rep_token_id", {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"}, true},
    {"tokenizer.ggml.fim_sep_token_id", {"<|file_sep|>"}, true},
};
// The older key names of the first three FIM kinds, read when the new ones are absent.
const char* const kOldFimKeys[] = {"tokenizer.ggml.prefix_token_id", "tokenizer.ggml.suffix_token_id",
                                   "tokenizer.ggml.middle_token_id"};

// Tokens that end generation wherever they are, and are made control tokens.
const Texts kEogTexts = {"<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
                         "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
                         "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>"};
// gpt-oss's message framing, always printed and parsed (llama.cpp's "quick hack for gpt-oss").
const Texts kGptOssFraming = {"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"};

// A special id the file names (llama.cpp ignores one out of range, as if absent).
std::optional<uint32_t> named_id(const gguf::Metadata& md, const char* key, size_t n) {
  const gguf::Value* v = md.find(key);
  if (!v || v->as_uint() >= n) return std::nullopt;
  return uint32_t(v->as_uint());
}

void make_control(Vocab& v, uint32_t id) {
  if (v.type[id] != TokenType::kUnknown) v.type[id] = TokenType::kControl;  // llama.cpp ORs the flag in
}

int64_t in_eog(const Vocab& v, std::string_view text) {
  for (uint32_t id : v.eog)
    if (v.text[id] == text) return id;
  return -1;
}

// o200k_harmony's <|end|> ends a message, not the generation, when <|return|> and <|call|> (or
// solar-open's <|calls|> and <|flush|>) are there to end it; a tokenizer with <|tool_response>
// (Gemma 4) uses </s> as text.
void drop_false_eog(Vocab& v) {
  const int64_t end = in_eog(v, "<|end|>");
  const bool call = in_eog(v, "<|call|>") >= 0 || in_eog(v, "<|calls|>") >= 0;
  if (end >= 0 && call && (in_eog(v, "<|return|>") >= 0 || in_eog(v, "<|flush|>") >= 0)) {
    v.eog.erase(uint32_t(end));
    v.type[size_t(end)] = TokenType::kUserDefined;
  }
  const int64_t s = in_eog(v, "</s>");
  if (s >= 0 && in_eog(v, "<|tool_response>") >= 0) {
    v.eog.erase(uint32_t(s));
    v.type[size_t(s)] = TokenType::kNormal;
  }
}

}  // namespace

void apply_special_token_rules(Vocab& v, const gguf::Metadata& md) {
  const size_t n = v.size();
  for (size_t k = 0; k < std::size(kKinds); ++k) {
    std::optional<uint32_t> id = named_id(md, kKinds[k].key, n);
    if (!id && k >= 2 && k < 5) id = named_id(md, kOldFimKeys[k - 2], n);
    if (id) {
      if (kKinds[k].eog) v.eog.insert(*id);
      continue;
    }
    // llama.cpp takes the first match in its hash map's order; a vocabulary with two texts of one
    // kind (none known) would see every one of them taken here.
    for (std::string_view t : kKinds[k].texts)
      if (const int64_t found = v.find(std::string(t)); found >= 0) {
        make_control(v, uint32_t(found));
        if (kKinds[k].eog) v.eog.insert(uint32_t(found));
      }
  }
  for (std::string_view t : kEogTexts)
    if (const int64_t id = v.find(std::string(t)); id >= 0) {
      v.eog.insert(uint32_t(id));
      make_control(v, uint32_t(id));
    }
  for (std::string_view t : kGptOssFraming)
    if (const int64_t id = v.find(std::string(t)); id >= 0) v.type[size_t(id)] = TokenType::kUserDefined;
  if (v.eos >= 0) v.eog.insert(uint32_t(v.eos));
  drop_false_eog(v);
}

}  // namespace gpunvme::llm
