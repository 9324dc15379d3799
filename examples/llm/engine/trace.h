// What a test or a curious user needs to compare the engine with llama.cpp: per generated token, its
// id and the top-k logits as a JSON line (--trace FILE), and all logits as raw float32 (--logits-out
// FILE, for bitwise comparisons between executors and residency plans). Both are output files under
// runtime/guard/output_file.h: never a device of the run, in place only once the run is complete.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "runtime/guard/output_file.h"

namespace gpunvme::llm {

class Trace {
 public:
  // Either output may be an empty OutputFile (its option not given).
  Trace(guard::OutputFile json, guard::OutputFile logits, uint32_t top);
  void token(uint32_t id, std::span<const float> logits);
  // Whether token() reads the logits (an output was asked for): without, it takes an empty span.
  bool wants_logits() const { return bool(json_) || bool(raw_); }
  // After a run that succeeded: both files renamed into place (without it they are not written).
  void commit();

 private:
  guard::OutputFile json_, raw_;
  uint32_t top_, step_ = 0;
};

}  // namespace gpunvme::llm
