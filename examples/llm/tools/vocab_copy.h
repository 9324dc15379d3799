// A generated model's vocabulary taken from another GGUF (llm_make_model --vocab-from): every
// tokenizer.* key (tokens, scores, token types, merges, special ids, the chat template) copied as it is,
// so that text goes in and out of a generated model exactly as it does of the real one. And the reverse
// trim (--vocab-only-from): a GGUF of those keys alone, a few MB where the model is hundreds.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "runtime/gguf/gguf_builder.h"
#include "runtime/gguf/gguf_file.h"

namespace gpunvme::llm::gen {

using KvWriter = std::function<void(gguf::builder::Bytes&)>;

// The tokenizer.* entries of `file`, in file order, each written back byte for byte as GGUF (value type,
// then value; arrays of any element type, nested ones included).
std::vector<KvWriter> tokenizer_kvs(const gguf::GgufFile& file);

// The vocabulary of the GGUF at `path` for a model of `shape_vocab` tokens (shape `shape_name`). Refused
// (std::invalid_argument, naming the file, both sizes and the fix) when it is not a GGUF, has no
// tokenizer.ggml.tokens, or holds another number of tokens than the shape's embedding rows.
std::vector<KvWriter> vocab_from(const std::string& path, uint32_t shape_vocab, const std::string& shape_name);

// A GGUF of `path`'s tokenizer.* keys and general.name alone (no tensors): what --vocab-from takes.
// Refused as vocab_from refuses a file without a vocabulary.
gguf::builder::Built vocab_only(const std::string& path);

}  // namespace gpunvme::llm::gen
