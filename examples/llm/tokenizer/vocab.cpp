#include "examples/llm/tokenizer/vocab.h"

#include <cstring>
#include <stdexcept>

#include "examples/llm/tokenizer/pretokenize.h"
#include "examples/llm/tokenizer/special_tokens.h"

namespace gpunvme::llm {
namespace {

template <class T>
std::vector<T> scalars(const gguf::Array& a, uint64_t n, const char* key) {
  if (a.count != n) throw std::runtime_error(std::string(key) + " has " + std::to_string(a.count) + " entries, tokenizer.ggml.tokens has " + std::to_string(n));
  if (a.raw.size() != n * sizeof(T)) throw std::runtime_error(std::string(key) + " has the wrong element type");
  std::vector<T> v(n);
  std::memcpy(v.data(), a.raw.data(), a.raw.size());
  return v;
}

int64_t id_or(const gguf::Metadata& md, const char* key, uint64_t n) {
  const gguf::Value* v = md.find(key);
  if (!v) return -1;
  const uint64_t id = v->as_uint();
  if (id >= n) throw std::runtime_error(std::string(key) + " = " + std::to_string(id) + " is not a token id");
  return int64_t(id);
}

bool flag_or(const gguf::Metadata& md, const char* key, bool dflt) {
  const gguf::Value* v = md.find(key);
  return v ? v->as<bool>() : dflt;
}

}  // namespace

Vocab read_vocab(const gguf::GgufFile& f) {
  const gguf::Metadata& md = f.metadata();
  Vocab v;
  const gguf::Value* model = md.find("tokenizer.ggml.model");
  v.model = model ? model->as_string() : "none";
  if (v.model == "none") return v;
  if (const gguf::Value* pre = md.find("tokenizer.ggml.pre")) v.pre = pre->as_string();
  const gguf::Array& toks = md.at("tokenizer.ggml.tokens").as_array();
  if (toks.elem_type != gguf::ValueType::STRING) throw std::runtime_error("tokenizer.ggml.tokens is not an array of strings");
  v.text = toks.strings;
  const uint64_t n = v.text.size();
  if (const gguf::Value* s = md.find("tokenizer.ggml.scores")) v.score = scalars<float>(s->as_array(), n, "tokenizer.ggml.scores");
  else v.score.assign(n, 0.0f);
  if (const gguf::Value* t = md.find("tokenizer.ggml.token_type")) {
    for (int32_t x : scalars<int32_t>(t->as_array(), n, "tokenizer.ggml.token_type")) v.type.push_back(TokenType(x));
  } else {
    v.type.assign(n, TokenType::kNormal);
  }
  if (const gguf::Value* m = md.find("tokenizer.ggml.merges")) {
    const gguf::Array& a = m->as_array();
    if (a.elem_type != gguf::ValueType::STRING) throw std::runtime_error("tokenizer.ggml.merges is not an array of strings");
    v.merges = a.strings;
  }
  v.id_of.reserve(n);
  for (uint32_t i = 0; i < n; ++i) v.id_of[v.text[i]] = i;  // the last of duplicate texts wins, as in llama.cpp
  v.bos = id_or(md, "tokenizer.ggml.bos_token_id", n);
  v.eos = id_or(md, "tokenizer.ggml.eos_token_id", n);
  v.unk = id_or(md, "tokenizer.ggml.unknown_token_id", n);
  // The defaults when the file does not say, as llama.cpp: SentencePiece and Llama 3's BPE add BOS.
  const bool bos_default = v.model == "llama" || (v.model == "gpt2" && pre_tokenizer_named(v.pre) == PreTokenizer::kLlama3);
  v.add_bos = flag_or(md, "tokenizer.ggml.add_bos_token", bos_default);
  v.add_eos = flag_or(md, "tokenizer.ggml.add_eos_token", false);
  v.add_space_prefix = flag_or(md, "tokenizer.ggml.add_space_prefix", v.model == "llama");
  apply_special_token_rules(v, md);
  return v;
}

}  // namespace gpunvme::llm
