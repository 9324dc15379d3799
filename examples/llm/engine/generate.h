// The generation loop, written once over an Executor: the prompt token by token, then decoding with
// the sampler, printing each piece of text as soon as it is known, and the run's numbers.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "examples/llm/engine/executor.h"
#include "examples/llm/engine/sampler.h"

namespace gpunvme::llm {

struct GenerateResult {
  std::vector<uint32_t> tokens;  // generated, not the prompt
  uint32_t prompt_tokens = 0;
  uint32_t decode_steps = 0;      // layer passes after the prompt (each yields one more token)
  double prompt_seconds = 0, decode_seconds = 0;
  double engine_cpu_seconds = 0;  // CPU time of the engine's thread during decoding (not the emulator's)
  bool stopped_at_eos = false;
  ExecStats exec;
};

// Runs `prompt` (ids, at least one) and then up to n_new tokens; stops early at the model's EOS.
// `on_token` gets each generated token id, and the logits it was picked from, as soon as it is picked.
GenerateResult generate(Executor& ex, const std::vector<uint32_t>& prompt, uint32_t n_new, Sampler& sampler, int64_t eos,
                        const std::function<void(uint32_t, const std::vector<float>&)>& on_token);

}  // namespace gpunvme::llm
