#include "examples/llm/tools/vocab_copy.h"

#include <stdexcept>

namespace gpunvme::llm::gen {
namespace {

namespace b = gguf::builder;
using gguf::ValueType;

void put_array(b::Bytes& out, const gguf::Array& a);

// One value as GGUF stores it: the type id, then the value (gguf::Value keeps scalars as raw bits).
void put_value(b::Bytes& out, const gguf::Value& v) {
  out.put<uint32_t>(uint32_t(v.type()));
  if (v.type() == ValueType::STRING) {
    out.str(v.as_string());
  } else if (v.type() == ValueType::ARRAY) {
    put_array(out, v.as_array());
  } else {
    const uint64_t bits = v.raw_bits();
    const auto* p = reinterpret_cast<const uint8_t*>(&bits);  // little-endian host, as the builder
    out.b.insert(out.b.end(), p, p + gguf::scalar_size(v.type()));
  }
}

// An array's body: element type, count, elements (packed scalars as read, strings, or nested arrays).
void put_array(b::Bytes& out, const gguf::Array& a) {
  out.put<uint32_t>(uint32_t(a.elem_type)).put<uint64_t>(a.count);
  if (a.elem_type == ValueType::STRING) {
    for (const std::string& s : a.strings) out.str(s);
  } else if (a.elem_type == ValueType::ARRAY) {
    for (const gguf::Array& inner : a.arrays) put_array(out, inner);  // elements carry no type id of their own
  } else {
    out.b.insert(out.b.end(), a.raw.begin(), a.raw.end());
  }
}

gguf::GgufFile open_gguf(const std::string& path, const char* option) {
  try {
    return gguf::GgufFile::open(path);
  } catch (const std::exception& e) {
    throw std::invalid_argument(std::string(option) + " " + path + ": not a GGUF file we can read (" + e.what() +
                                "); give a model's .gguf (its tokenizer.* keys are copied)");
  }
}

uint64_t token_count(const gguf::GgufFile& f, const std::string& path, const char* option) {
  const gguf::Value* tokens = f.metadata().find("tokenizer.ggml.tokens");
  if (!tokens || tokens->type() != ValueType::ARRAY || tokens->as_array().elem_type != ValueType::STRING)
    throw std::invalid_argument(std::string(option) + " " + path +
                                ": no vocabulary (no tokenizer.ggml.tokens array of strings); give a GGUF that has one");
  return tokens->as_array().count;
}

}  // namespace

std::vector<KvWriter> tokenizer_kvs(const gguf::GgufFile& file) {
  std::vector<KvWriter> kvs;
  for (const auto& [key, value] : file.metadata().entries()) {
    if (key.rfind("tokenizer.", 0) != 0) continue;
    kvs.push_back([key, value](b::Bytes& out) {
      out.str(key);
      put_value(out, value);
    });
  }
  return kvs;
}

std::vector<KvWriter> vocab_from(const std::string& path, uint32_t shape_vocab, const std::string& shape_name) {
  const gguf::GgufFile f = open_gguf(path, "--vocab-from");
  const uint64_t n = token_count(f, path, "--vocab-from");
  if (n != shape_vocab)
    throw std::invalid_argument("--vocab-from " + path + " holds " + std::to_string(n) + " tokens and shape " + shape_name +
                                " has " + std::to_string(shape_vocab) +
                                " embedding rows: give the vocabulary of a model of this shape, or a shape of " +
                                std::to_string(n) + " tokens");
  return tokenizer_kvs(f);
}

b::Built vocab_only(const std::string& path) {
  const gguf::GgufFile f = open_gguf(path, "--vocab-only-from");
  token_count(f, path, "--vocab-only-from");
  b::Spec spec;
  spec.kvs = {b::kv_str("general.name", (f.model_name().empty() ? std::string("model") : f.model_name()) + " vocabulary")};
  for (KvWriter& kv : tokenizer_kvs(f)) spec.kvs.push_back(std::move(kv));
  return b::build(spec);
}

}  // namespace gpunvme::llm::gen
