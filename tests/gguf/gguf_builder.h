// The tests' name for the GGUF writer (runtime/gguf/gguf_builder.h), which the examples use too.
#pragma once
#include "runtime/gguf/gguf_builder.h"

namespace gguf_test {
using namespace gpunvme::gguf::builder;
}  // namespace gguf_test
