#include "examples/llm/engine/generate.h"

#include <time.h>

#include <chrono>
#include <stdexcept>

namespace gpunvme::llm {
namespace {

double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + ts.tv_nsec / 1e9;
}

double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

GenerateResult generate(Executor& ex, const std::vector<uint32_t>& prompt, uint32_t n_new, Sampler& sampler, int64_t eos,
                        const std::function<void(uint32_t, const std::vector<float>&)>& on_token) {
  GenerateResult r;
  r.prompt_tokens = uint32_t(prompt.size());
  uint32_t pos = 0;
  auto t0 = std::chrono::steady_clock::now();
  if (prompt.empty()) throw std::runtime_error("generate: the prompt has no tokens");
  const std::vector<float>* logits = nullptr;
  for (uint32_t id : prompt) logits = &ex.step(id, pos++);
  r.prompt_seconds = since(t0);
  t0 = std::chrono::steady_clock::now();
  const double cpu0 = thread_cpu_seconds();
  for (uint32_t i = 0; i < n_new; ++i) {
    const uint32_t tok = sampler.pick(*logits);
    r.tokens.push_back(tok);
    on_token(tok, *logits);
    if (eos >= 0 && tok == uint32_t(eos)) {
      r.stopped_at_eos = true;
      break;
    }
    if (i + 1 < n_new) {
      logits = &ex.step(tok, pos++);
      ++r.decode_steps;
    }
  }
  ex.finish();
  r.decode_seconds = since(t0);
  r.engine_cpu_seconds = thread_cpu_seconds() - cpu0;
  r.exec = ex.stats();
  return r;
}

}  // namespace gpunvme::llm
