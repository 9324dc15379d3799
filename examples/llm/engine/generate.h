// The generation loop, written once over an Executor: the prompt in passes of up to `batch` tokens,
// then decoding with the sampler, printing each piece of text as soon as it is known, and the run's
// numbers. With a drafter, each decoding pass also verifies drafted tokens (speculative.h): the same
// tokens as plain decoding, in fewer passes.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <set>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "examples/llm/engine/draft.h"
#include "examples/llm/engine/executor.h"
#include "examples/llm/engine/sampler.h"

namespace gpunvme::llm {

struct GenerateOptions {
  uint32_t batch = 512;                // prompt tokens per pass at most (--batch)
  std::optional<LookupOptions> draft;  // speculative decoding with prompt-lookup drafts (--draft lookup)
  // Before the timed work, one untimed pass of the prompt's first chunk and one of a single token, as
  // llama-bench warms up (--warmup): the first launch of a kernel loads its module and the first
  // tensor-core product asks cuBLASLt for its algorithm, which would otherwise be counted against the
  // prompt and the first decode pass. Streamed layers are read for them too (ExecStats counts them).
  bool warmup = false;
  // on_token gets the row of logits each token was picked from. false: an empty span, and a greedy run
  // without a draft (whose verification reads rows) picks where the logits are (Executor::pass_greedy:
  // on the GPU, no row copied to the host; issue 36). The same tokens either way.
  bool token_logits = true;
};

struct GenerateResult {
  std::vector<uint32_t> tokens;  // generated, not the prompt
  uint32_t prompt_tokens = 0;
  uint32_t prompt_passes = 0;     // passes over the layers for the prompt
  uint32_t decode_steps = 0;      // passes over the layers after the prompt (each yields one token or more)
  uint64_t drafted = 0, accepted = 0;  // drafted tokens verified, and those kept
  double prompt_seconds = 0, decode_seconds = 0;
  double engine_cpu_seconds = 0;  // CPU time of the engine's thread during decoding (not the emulator's)
  bool stopped_at_eos = false;
  ExecStats exec;

  // Tokens generated per decoding pass (the first token comes from the prompt's last pass).
  double tokens_per_pass() const { return decode_steps ? double(tokens.size() - 1) / decode_steps : 0; }
  double acceptance() const { return drafted ? double(accepted) / double(drafted) : 0; }
};

// Logits holding NaN or Inf: no token can be picked from them (greedy would pick token 0 forever).
// Thrown by generate() at the first such row, `position` naming the token position it predicts from.
class NonFiniteLogits : public std::runtime_error {
 public:
  explicit NonFiniteLogits(uint32_t position);
  uint32_t position;
};

// Runs `prompt` (ids, at least one) and then up to n_new tokens; stops early at a token of `eog` (the
// model's end-of-generation tokens, Vocab::eog, as llama.cpp's llama_vocab_is_eog: gpt-oss ends at
// <|return|> or <|call|>, not only at its EOS; empty: never).
// `on_token` gets each generated token id, and the logits it was picked from (GenerateOptions::token_logits),
// as soon as it is picked.
GenerateResult generate(Executor& ex, const std::vector<uint32_t>& prompt, uint32_t n_new, Sampler& sampler,
                        const std::set<uint32_t>& eog,
                        const GenerateOptions& o, const std::function<void(uint32_t, std::span<const float>)>& on_token);

}  // namespace gpunvme::llm
