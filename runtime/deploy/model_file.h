// The host GGUF file that deploy writes and verify --against compares with: a regular file whose
// GGUF header parses and whose tensors all lie inside it (the checks deploy makes before writing).
#pragma once
#include <string>

#include "runtime/gguf/gguf_file.h"

namespace gpunvme::deploy {

// Throws model::ModelError when `path` is missing or not a regular file (a FIFO would block
// forever, /dev/zero has no size), gguf::GgufError when it is not a valid GGUF (truncated download,
// wrong file). `role` names the argument in the message ("the model", "--against").
gguf::GgufFile open_model_file(const std::string& path, const std::string& role = "the model");

}  // namespace gpunvme::deploy
