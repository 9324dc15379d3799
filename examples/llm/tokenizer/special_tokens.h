// What llama.cpp decides about special tokens from their text after it reads a vocabulary
// (llama_vocab::impl::load): GGUF files from older or foreign converters mistype them, so llama.cpp
// retypes "control-looking" tokens and keeps a set of end-of-generation (EOG) tokens found by name.
// The engine must decide the same way: a token's type decides whether its text in a prompt is cut out
// as that token (tokenizer.cpp) and the EOG set decides where generation stops. gpt-oss (o200k_harmony)
// depends on it: its <|start|>, <|message|>, <|channel|>, <|constrain|> and <|end|> are CONTROL in the
// file but USER_DEFINED for llama.cpp (so they are parsed even as plain prompt text), and its EOG set is
// <|return|>, <|call|> and <|endoftext|>, without <|end|>.
#pragma once
#include "examples/llm/tokenizer/vocab.h"
#include "runtime/gguf/gguf_file.h"

namespace gpunvme::llm {

// Retypes v.type and fills v.eog as llama.cpp does; `md` tells which special ids the file names
// itself (tokenizer.ggml.eot_token_id, ...: a category named there is not searched by text).
void apply_special_token_rules(Vocab& v, const gguf::Metadata& md);

}  // namespace gpunvme::llm
