// What a test or a curious user needs to compare the engine with llama.cpp: per generated token, its
// id and the top-k logits as a JSON line (--trace FILE), and all logits as raw float32 (--logits-out
// FILE, for bitwise comparisons between executors and residency plans).
#pragma once
#include <cstdint>
#include <cstdio>
#include <span>
#include <string>
#include <vector>

namespace gpunvme::llm {

class Trace {
 public:
  Trace(const std::string& json_path, const std::string& logits_path, uint32_t top);
  ~Trace();
  Trace(const Trace&) = delete;
  Trace& operator=(const Trace&) = delete;
  void token(uint32_t id, std::span<const float> logits);

 private:
  std::FILE* json_ = nullptr;
  std::FILE* raw_ = nullptr;
  uint32_t top_, step_ = 0;
};

}  // namespace gpunvme::llm
