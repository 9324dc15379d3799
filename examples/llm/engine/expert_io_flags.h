// The expert fetcher's I/O flags as `llm` and bench/llm_tokens take them: --expert-window SIZE (bytes of
// a layer's expert reads in flight) and --expert-read SIZE (the largest read), parsed in one place.
#pragma once
#include <cstdint>
#include <optional>

#include "examples/llm/engine/executor.h"
#include "runtime/cli/args.h"

namespace gpunvme::llm {

struct ExpertIoFlags {
  std::optional<uint64_t> window_bytes;  // GpuExecOptions::expert_window_bytes; nullopt: the engine's
  std::optional<uint64_t> read_bytes;    // GpuExecOptions::expert_read_bytes; nullopt: the engine's
};

inline ExpertIoFlags parse_expert_io_flags(const cli::Args& args) {
  ExpertIoFlags f;
  if (args.has("expert-window")) f.window_bytes = args.get_size("expert-window", 0);
  if (args.has("expert-read")) {
    f.read_bytes = args.get_size("expert-read", 0);
    if (*f.read_bytes < kMinExpertReadBytes || *f.read_bytes > kMaxExpertReadBytes)
      throw cli::UsageError("--expert-read must be 4K to 1G");
  }
  return f;
}

}  // namespace gpunvme::llm
