// --slots as `llm`, bench/llm_tokens and bench/llm_seqs take it, parsed in one place: auto (the default:
// stream_slots.h decides per GPU) or a count 1..64 (GpuExecOptions::slots).
#pragma once
#include <cstdint>
#include <string>

#include "examples/llm/engine/stream_slots.h"
#include "runtime/cli/args.h"

namespace gpunvme::llm {

// 0 for auto; throws cli::UsageError for 0, more than 64 or text.
inline uint32_t parse_slots_flag(const cli::Args& args) {
  if (args.get("slots", "auto") == "auto") return 0;
  const uint32_t n = args.get_u32("slots", 0);
  if (n == 0 || n > kMaxStreamSlots) throw cli::UsageError("--slots must be auto or 1.." + std::to_string(kMaxStreamSlots));
  return n;
}

}  // namespace gpunvme::llm
