// llm: an ntransformer-style engine on gpunvme. It finds a GGUF model on a raw NVMe namespace (or the
// emulated one) by itself, and for every token runs every layer on weights that GPU kernels just read
// from the namespace into streaming slots, or that are resident in GPU memory. Token-exact with
// llama.cpp (tests/llm). Without a GPU it runs the same model code on the CPU.
//
//   llm --device emu:/tmp/models.img --prompt "The capital of France is" -n 32
//   llm tokenize --device emu:/tmp/models.img --prompt "Hello"
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

#include "examples/example_model.h"
#include "examples/llm/engine/executor.h"
#include "examples/llm/engine/expert_io_flags.h"
#include "examples/llm/engine/finite_weights.h"
#include "examples/llm/engine/generate.h"
#include "examples/llm/engine/gpu_ids.h"
#include "examples/llm/engine/layer_split.h"
#include "examples/llm/engine/loaded_model.h"
#include "examples/llm/engine/slots_flag.h"
#include "examples/llm/engine/trace.h"
#include "examples/llm/tokenizer/tokenizer.h"
#include "host/device_lock.h"
#include "host/open_device.h"
#include "runtime/guard/output_file.h"
#include "host/recovery.h"
#include "host/text/escape.h"
#include "host/text/numbers.h"
#include "runtime/cli/args.h"

using namespace gpunvme;

namespace {

// `llm --help`: what a first run needs, on one screen (cli::Help); `--help-all` adds the rest and the
// device strings.
const cli::Help kHelp = {
    "usage: llm --device DEV (--prompt TEXT | --prompt-ids 1,2,3) [-n N] [options]\n"
    "       llm tokenize --device DEV --prompt TEXT\n"
    "\n"
    "Finds the model on the device alone (a `gpunvme deploy` record or a dd'ed GGUF), prints the text as it is\n"
    "generated, then the run's numbers. Architectures llama (dense, Mixtral-style MoE), qwen2, gemma3, qwen3,\n"
    "qwen3moe, gpt-oss; weights F32 F16 BF16 Q8_0 Q4_0 Q5_0 Q4_K Q5_K Q6_K MXFP4.\n"
    "  --device DEV        the namespace holding the model (repeat it for a striped set: every member, in order;\n"
    "                      with --gpus N, N devices each holding the model whole: one per GPU, each streaming its own)\n"
    "  --prompt TEXT       tokenized with the model's own vocabulary (BOS added when the model asks for it)\n"
    "  --prompt-ids LIST   token ids, comma-separated, instead of --prompt (any model, also one without a vocabulary)\n"
    "  -n N                tokens to generate (default 32; stops early at the model's end-of-text token)\n"
    "  --temp T            0 (default): greedy, the token llama.cpp's greedy decoding picks; > 0: sample\n"
    "  --top-k K           with --temp > 0: sample among the K most likely (default 40; 0: the whole vocabulary)\n"
    "  --seed S            with --temp > 0: the sampler's seed (default 0; the same seed, the same text)\n"
    "  --ctx N             context length to allocate (default: prompt + n; at most the model's context length)\n"
    "  --path auto|gpu|cpu the GPU executor where a GPU is present (default auto), or the CPU executor\n"
    "  --vram-budget SIZE  GPU path: GPU memory for layer weights and the KV cache (default: free, less 512 MiB)\n"
    "  --ram-budget SIZE   GPU path: pinned host memory for the layers beyond it (default 0); the other layers\n"
    "                      are read from the namespace for every token\n"
    "  --gpus N|IDS        GPU path: the layers split over N GPUs of this host (or CUDA ids: 0,2; device=1), by NCCL\n"
    "  --draft lookup      speculative decoding by prompt lookup: the tokens of plain decoding, in fewer passes\n"
    "  --json-out FILE     the run's numbers (tokens/s, bytes per token, I/O, stalls, CPU time) as JSON\n",
    "\n"
    "Residency (GPU path). The plan (printed at start) puts dense parts in VRAM, then RAM, then NVMe, each tier\n"
    "spread over the layers; MoE experts after dense parts.\n"
    "  --vram-budget SIZE  GPU memory for layer weights and the KV cache, which takes its share first (default:\n"
    "                      free memory less the embeddings, head, activations, RAM-tier buffers and 512 MiB)\n"
    "  --ram-budget SIZE   pinned host memory for layers that do not fit in VRAM, read once at start and copied\n"
    "                      to the GPU per token; MoE: then the expert cache (default 0)\n"
    "  --resident all|none|N  instead of the budgets: the first N layers in GPU memory (at most the model's\n"
    "                      layers), the rest read from the namespace for every token (none: every layer streams)\n"
    "  --slots auto|N      streaming slots, 1..64 (auto: 2 on one GPU, layer i+1 read while layer i computes; each\n"
    "                      GPU of several a slot per streamed layer, within a quarter of the free host memory)\n"
    "  --gpus N|IDS        split the layers over the first N GPUs, or those listed by CUDA id in order (0,2; one:\n"
    "                      device=1), in contiguous ranges (default 1), each with its own plan, queues and streaming;\n"
    "                      embeddings on the first, head on the last, the hidden state passed on by NCCL.\n"
    "                      --vram-budget is each GPU's (one value for all, or a list, one per GPU: 22G,40G; default:\n"
    "                      each one's free memory), the layers split so that each GPU moves about the same bytes per\n"
    "                      token; --ram-budget is all of theirs together\n"
    "\n"
    "MoE experts (GPU path). The logits are the same whatever these say.\n"
    "  --expert-cache SIZE LRU cache of routed experts in pinned host memory the GPU reads (the drive's reads\n"
    "                      land there; default: the plan's, what the RAM budget leaves; 0: the routed experts are\n"
    "                      read for every token)\n"
    "  --expert-prefetch on|off  before each layer's routing, read the experts the previous token chose there\n"
    "                      into the cache, overlapping compute (default: on when the cache holds two tokens'\n"
    "                      experts of a layer; off: no prefetch of either kind unless --expert-pregate)\n"
    "  --expert-pregate N  at each layer whose experts are fetched, run the next such layer's router on this\n"
    "                      layer's state (pre-gating) and read its N most likely experts ahead, while the drive\n"
    "                      would wait for routing (0: off; 1 to k; instead of --expert-prefetch; default k/2, at\n"
    "                      least 1, unless --expert-prefetch is given). Adds two fetches of expert slots in\n"
    "                      pinned memory if the cache is smaller\n"
    "  --expert-pregate-first N  with pre-gating: at the last fetched layer of a token, read N of the experts\n"
    "                      this token routed to at the first fetched layer, for the next token's (one-token lag),\n"
    "                      while the drive would idle through the token boundary; a wrong one stops reading once\n"
    "                      that layer's routing is known (0: off; at most k; default: --expert-pregate's N)\n"
    "  --expert-overlap on|off  each expert kernel starts once the part it reads is in, while the layer's other\n"
    "                      reads still stream (default: on where the CUDA driver has stream memory waits); off:\n"
    "                      the expert kernels start after all of the layer's reads\n"
    "  --expert-window SIZE bytes of a layer's expert reads in flight at once, issued in the order the expert\n"
    "                      kernels use them so that they also end in that order (default 8M, at least one read\n"
    "                      per queue; 0: all at once, which end together)\n"
    "  --expert-read SIZE  the largest read of an expert fetch (default 256K, 4K to 1G; the drive's MDTS caps\n"
    "                      it): smaller reads end in finer order\n"
    "\n"
    "Passes and output.\n"
    "  --batch N           prompt tokens per pass over the layers (default 512): each layer is read once for the\n"
    "                      whole chunk (1: token by token, as a baseline)\n"
    "  --draft none|lookup speculative decoding (default none): draft tokens by prompt lookup (the tokens that\n"
    "                      followed the context's last 1-3 tokens where they occurred before) and verify them in\n"
    "                      the same pass; the output is exactly that of plain decoding, in fewer passes\n"
    "  --draft-k K         with --draft lookup: tokens drafted per pass at most (1..31, default 8)\n"
    "  --prompt-kernels fast|exact  GPU path, passes of more than 32 tokens: fast (default: matrices on the\n"
    "                      tensor cores, FP16/BF16 inputs and FP32 sums, flash attention; the last bits differ from\n"
    "                      token by token, as llama.cpp's do) or exact (the small passes' kernels: every logit\n"
    "                      bit for bit as token by token, several times slower)\n"
    "  --trace FILE        per generated token: its id and the top-5 logits, one JSON line each\n"
    "  --logits-out FILE   per generated token: all logits, raw float32 (bitwise comparisons)\n"
    "  --warmup            one untimed pass of the prompt's first chunk and one of a single token before the\n"
    "                      timed run, as llama-bench does (kernels loaded, tensor-core algorithms chosen);\n"
    "                      with streamed layers it costs two more passes of reads\n"
    "  --ignore-eos        keep generating past the model's end-of-generation tokens (its EOS and the others\n"
    "                      llama.cpp stops at, e.g. gpt-oss's <|return|> and <|call|>)\n"
    "  --no-verify         check only the model's header at open (always done), not the bytes read at start\n"
    "                      and streamed against the deploy record's CRC-32Cs (docs/engine.md)\n"
    "\n"};

// The project's one number grammar (host/text/numbers.h), as a usage error, at most `max`.
uint64_t parse_number(const char* what, const std::string& text, uint64_t max) {
  try {
    const uint64_t v = text::parse_u64(what, text);
    if (v > max) throw cli::UsageError(std::string(what) + ": " + text + " is too large");
    return v;
  } catch (const text::ParseError& e) {
    throw cli::UsageError(e.what());
  }
}

uint32_t parse_resident(const std::string& s, uint32_t n_layer) {
  if (s == "all") return n_layer;
  if (s == "none") return 0;
  uint64_t n = 0;
  try {
    n = text::parse_u64("--resident", s);
  } catch (const text::ParseError&) {
    throw cli::UsageError("--resident must be all, none or a number of layers, not '" + s + "'");
  }
  if (n > n_layer)
    throw cli::UsageError("--resident " + s + ": the model has " + std::to_string(n_layer) + " layers (all: every one)");
  return uint32_t(n);
}

// An optional on|off flag: absent -> the engine's default.
std::optional<bool> on_off(const cli::Args& args, const char* name) {
  if (!args.has(name)) return std::nullopt;
  const std::string v = args.get(name);
  if (v != "on" && v != "off") throw cli::UsageError(std::string("--") + name + " must be on or off, not '" + v + "'");
  return v == "on";
}

// --gpus N with --device given N times where the first holds the model whole (not a striped set's
// member): one namespace per GPU, each a copy of the model. Else the devices are one namespace or a set.
bool device_per_gpu(const std::vector<std::string>& devices, uint32_t gpus) {
  if (gpus < 2 || devices.size() != gpus) return false;
  try {
    llm::DeviceSet first({devices[0]});
    return !llm::open_model(first.namespaces()).stripe;
  } catch (const std::exception&) {
    return false;  // a set's member alone, or nothing there: the set's own open says what is wrong
  }
}

// GPU 1.. N-1's namespaces of --device per GPU (GPU 0's is the run's): each must hold the model the run
// opened, tensor for tensor at the same places (the load checks hold the bytes to its deploy record).
std::vector<std::unique_ptr<llm::DeviceSet>> open_gpu_copies(const std::vector<std::string>& devices, const llm::ModelOnDevice& m) {
  std::vector<std::unique_ptr<llm::DeviceSet>> sets;
  const std::vector<llm::LayerBytes> want = llm::layer_bytes(m);
  for (size_t g = 1; g < devices.size(); ++g) {
    sets.push_back(std::make_unique<llm::DeviceSet>(std::vector<std::string>{devices[g]}));
    const llm::ModelOnDevice copy = llm::open_model(sets.back()->namespaces());
    const std::vector<llm::LayerBytes> got = llm::layer_bytes(copy);
    const bool same = !copy.stripe && copy.detected.start_lba == m.detected.start_lba && copy.detected.byte_bound == m.detected.byte_bound && got.size() == want.size() &&
                      std::equal(got.begin(), got.end(), want.begin(), [](const llm::LayerBytes& a, const llm::LayerBytes& b) {
                        return a.dense == b.dense && a.experts == b.experts;
                      });
    if (!same)
      throw cli::UsageError("--device " + text::printable(devices[g]) + " (GPU " + std::to_string(g) + ") does not hold the model of --device " +
                            text::printable(devices[0]) + " at the same places: with --gpus N and N devices, deploy the same model on each");
  }
  return sets;
}

// --gpus: a count or CUDA device ids (gpu_ids.h), checked before any device is opened.
llm::GpuChoice parse_gpus(const cli::Args& args) {
  try {
    return llm::parse_gpus(args.get("gpus", "1"));
  } catch (const std::invalid_argument& e) {
    throw cli::UsageError(e.what());
  }
}

// --resident, or the budgets (not both: they are two ways of saying where layers live).
void parse_residency(const cli::Args& args, uint32_t n_layer, llm::GpuExecOptions& o) {
  const bool budgets = args.has("vram-budget") || args.has("ram-budget");
  if (args.has("resident") && budgets)
    throw cli::UsageError("--resident places layers by count, --vram-budget / --ram-budget by bytes: give one or the other");
  if (args.has("resident")) o.resident_layers = parse_resident(args.get("resident"), n_layer);
  if (args.has("vram-budget")) {  // one value for every GPU, or one per GPU (o.gpus parsed before)
    try {
      const std::vector<uint64_t> v = llm::budgets_per_gpu(args.get_size_list("vram-budget", ""), o.gpus);
      if (o.gpus == 1) o.vram_budget = v[0];
      else o.vram_budgets = v;
    } catch (const std::invalid_argument& e) {
      throw cli::UsageError(e.what());
    }
  }
  o.ram_budget = args.get_size("ram-budget", 0);
  if (args.has("expert-cache")) o.expert_cache_bytes = args.get_size("expert-cache", 0);
  o.expert_prefetch = on_off(args, "expert-prefetch");
  if (args.has("expert-pregate")) {
    try {
      o.expert_pregate = uint32_t(std::min<uint64_t>(text::parse_u64("--expert-pregate", args.get("expert-pregate")), ~0u));
    } catch (const text::ParseError&) {
      throw cli::UsageError("--expert-pregate must be a number of experts (0: off), not '" + args.get("expert-pregate") + "'");
    }
  }
  if (args.has("expert-pregate-first")) {
    try {
      o.expert_pregate_first =
          uint32_t(std::min<uint64_t>(text::parse_u64("--expert-pregate-first", args.get("expert-pregate-first")), ~0u));
    } catch (const text::ParseError&) {
      throw cli::UsageError("--expert-pregate-first must be a number of experts (0: off), not '" +
                            args.get("expert-pregate-first") + "'");
    }
  }
  o.expert_overlap = on_off(args, "expert-overlap");
  const llm::ExpertIoFlags io = llm::parse_expert_io_flags(args);
  o.expert_window_bytes = io.window_bytes;
  o.expert_read_bytes = io.read_bytes;
}

// The text of a token for the terminal: control bytes escaped, so a model cannot forge terminal
// output. Not text::printable: generated text keeps its newlines and tabs, and a token may carry half
// of a UTF-8 character (byte-fallback tokens), which must pass through to be completed by the next.
std::string terminal_piece(const std::string& piece) {
  std::string out;
  for (unsigned char ch : piece) {
    if (ch < 0x20 && ch != '\n' && ch != '\t') {
      char b[8];
      std::snprintf(b, sizeof b, "\\x%02x", ch);
      out += b;
    } else {
      out += char(ch);
    }
  }
  return out;
}

// The run's numbers as one JSON object (--json-out FILE), next to the printed summary.
void write_json(guard::OutputFile& out, const llm::GenerateResult& r, const llm::GenerateOptions& o,
                const llm::ModelOnDevice& m, const std::string& device, const std::string& described) {
  if (!out) return;
  const auto& e = r.exec;
  const double tps = r.decode_seconds > 0 ? (r.tokens.size() > 1 ? r.tokens.size() - 1 : 0) / r.decode_seconds : 0;
  // The strings outside the fixed buffer: a several-GPU executor's description alone passes 1,024 bytes.
  std::string j = "{\"tool\":\"llm\",\"version\":1,\"model\":" + text::json_string(m.file->model_name()) +
                  ",\"arch\":" + text::json_string(m.config.arch_name) + ",\"layers\":" + std::to_string(m.config.n_layer) +
                  ",\"device\":" + text::json_string(device) + ",\"executor\":" + text::json_string(described) + ",";
  char b[1024];
  std::snprintf(b, sizeof b,
                "\"prompt_tokens\":%u,\"prompt_seconds\":%.6f,\"generated_tokens\":%zu,\"decode_steps\":%u,"
                "\"decode_seconds\":%.6f,\"tokens_per_second\":%.6f,\"engine_cpu_seconds\":%.6f,"
                "\"resident_layers\":%u,\"streamed_layers\":%u,\"resident_bytes\":%llu,\"bytes_per_token\":%llu,"
                "\"streamed_bytes\":%llu,\"io_seconds\":%.6f,\"stall_seconds\":%.6f,",
                r.prompt_tokens, r.prompt_seconds, r.tokens.size(), r.decode_steps, r.decode_seconds, tps, r.engine_cpu_seconds,
                e.resident_layers, e.streamed_layers, (unsigned long long)e.resident_bytes,
                (unsigned long long)e.bytes_per_step, (unsigned long long)e.streamed_bytes, e.io_seconds, e.stall_seconds);
  j += b;
  std::snprintf(b, sizeof b, "\"ram_layers\":%u,\"ram_bytes\":%llu,\"ram_bytes_per_token\":%llu,\"ram_copied_bytes\":%llu,",
                e.ram_layers, (unsigned long long)e.ram_bytes, (unsigned long long)e.ram_bytes_per_step,
                (unsigned long long)e.ram_copied_bytes);
  j += b;
  std::snprintf(b, sizeof b,
                "\"batch\":%u,\"prompt_passes\":%u,\"draft\":\"%s\",\"draft_k\":%u,\"decode_passes\":%u,"
                "\"tokens_per_pass\":%.4f,\"drafted_tokens\":%llu,\"accepted_tokens\":%llu,\"acceptance_rate\":%.4f,",
                o.batch, r.prompt_passes, o.draft ? "lookup" : "none", o.draft ? o.draft->k : 0, r.decode_steps,
                r.tokens_per_pass(), (unsigned long long)r.drafted, (unsigned long long)r.accepted, r.acceptance());
  j += b;
  if (!e.plan.layers.empty()) j += "\"plan\":" + llm::plan_json(e.plan) + ",";
  if (!e.gpus.empty()) j += "\"gpus\":" + llm::gpus_json(e.gpus) + ",";
  if (e.has_experts) {
    const auto& x = e.experts;
    std::snprintf(b, sizeof b,
                  "\"experts\":{\"fetches\":%llu,\"requested\":%llu,\"hits\":%llu,\"faults\":%llu,\"bytes_read\":%llu,"
                  "\"lag_routed\":%llu,\"lag_predicted_hits\":%llu,\"lag_wasted\":%llu,\"lag_wasted_bytes\":%llu,",
                  (unsigned long long)x.tokens, (unsigned long long)x.requested, (unsigned long long)x.hits,
                  (unsigned long long)x.faults, (unsigned long long)x.bytes_read, (unsigned long long)e.lag.routed,
                  (unsigned long long)e.lag.predicted_hits, (unsigned long long)e.lag.wasted,
                  (unsigned long long)e.lag.wasted_bytes);
    j += b;
    j += std::string("\"overlap\":") + (e.expert_overlap ? "true," : "false,");
    j += "\"window_bytes\":" + std::to_string(e.expert_window_bytes) + ",";
    j += "\"read_bytes\":" + std::to_string(e.expert_read_bytes) + ",";
    j += llm::prefetch_json({e.expert_prefetch, e.expert_pregate, e.expert_pregate_first}, e.prefetch, e.experts) + "},";
  }
  j += "\"verify\":" + llm::verify_json(e.verify) + ",";
  j += "\"recovery\":" + host::recovery_json(e.recovery) + ",";
  j += "\"tokens\":[";
  for (size_t i = 0; i < r.tokens.size(); ++i) j += (i ? "," : "") + std::to_string(r.tokens[i]);
  j += "]}\n";
  out.write(j);
  out.commit();
}

void print_summary(const llm::GenerateResult& r, const llm::GenerateOptions& o, const std::string& described) {
  const auto& e = r.exec;
  std::printf("\n--\n%s\n", described.c_str());
  std::printf("prompt: %u tokens in %u passes of up to %u in %.3f s\n", r.prompt_tokens, r.prompt_passes, o.batch,
              r.prompt_seconds);
  const double tps = r.decode_seconds > 0 ? (r.tokens.size() > 1 ? r.tokens.size() - 1 : 0) / r.decode_seconds : 0;
  std::printf("decode: %zu tokens, %u layer passes in %.3f s = %.3f tokens/s; engine thread CPU %.3f s\n", r.tokens.size(),
              r.decode_steps, r.decode_seconds, tps, r.engine_cpu_seconds);
  if (o.draft)
    std::printf("speculative: %.2f tokens per pass; %llu tokens drafted by prompt lookup (k <= %u), %llu accepted (%.0f %%)\n",
                r.tokens_per_pass(), (unsigned long long)r.drafted, o.draft->k, (unsigned long long)r.accepted,
                100 * r.acceptance());
  if (e.streamed_layers > 0) {
    const double io_gbs = e.io_seconds > 0 ? e.streamed_bytes / e.io_seconds / 1e9 : 0;
    const double hidden = e.io_seconds > 0 ? std::max(0.0, 1.0 - e.stall_seconds / e.io_seconds) : 0;
    std::printf("streamed: %.1f MB per token (%u layers), %.1f MB in all at %.2f GB/s (GPU time of the reads); "
                "compute stalled %.3f s for I/O, %.0f %% of the I/O hidden behind compute\n",
                e.bytes_per_step / 1e6, e.streamed_layers, e.streamed_bytes / 1e6, io_gbs, e.stall_seconds, 100 * hidden);
    if (r.decode_steps)
      std::printf("compute: %.2f ms per pass (decode time less the stalls)\n",
                  1e3 * std::max(0.0, r.decode_seconds - e.stall_seconds) / r.decode_steps);
  }
  std::printf("resident: %u layers, %.1f MB read once at start\n", e.resident_layers, e.resident_bytes / 1e6);
  if (e.recovery.any()) std::printf("recovery: %s\n", host::recovery_text(e.recovery).c_str());
  std::printf("%s\n", llm::verify_summary(e.verify).c_str());
  if (e.ram_layers)
    std::printf("RAM tier: %u layers, %.1f MB pinned, %.1f MB copied to the GPU per token (%.1f MB in all)\n", e.ram_layers,
                e.ram_bytes / 1e6, e.ram_bytes_per_step / 1e6, e.ram_copied_bytes / 1e6);
  if (e.has_experts) {
    const auto& x = e.experts;
    std::printf("experts: %llu fetches, %llu experts routed, %llu cache hits (%.0f %%), %llu read (%.1f MB)\n",
                (unsigned long long)x.tokens, (unsigned long long)x.requested, (unsigned long long)x.hits, 100 * x.hit_rate(),
                (unsigned long long)x.faults, x.bytes_read / 1e6);
    std::printf("one-token-lag prediction (the previous token's experts at each layer, measured from routing): "
                "%.0f %% of %llu routed experts; %llu predicted for nothing (%.1f MB a prefetch would waste)\n",
                100 * e.lag.hit_rate(), (unsigned long long)e.lag.routed, (unsigned long long)e.lag.wasted,
                e.lag.wasted_bytes / 1e6);
    std::printf("%s\n", llm::prefetch_summary({e.expert_prefetch, e.expert_pregate, e.expert_pregate_first}, e.prefetch, e.experts).c_str());
  }
}

// After logits that are not finite: the first tensor holding NaN/Inf, looked for in the model's first
// kExplainBytes of tensors (read back from the device; the error path only).
std::string explain_non_finite(const llm::ModelOnDevice& m) {
  constexpr uint64_t kExplainBytes = 2ull << 30;
  bool all = false;
  const auto w = llm::find_non_finite_weight(m, kExplainBytes, &all);
  if (w)
    return ". The first tensor holding one is " + text::printable(w->tensor) + " (element " + std::to_string(w->element) +
           " is " + (std::isnan(w->value) ? "NaN" : "Inf") + ")";
  return all ? ". No weight is NaN or Inf: the activations overflowed"
             : ". None of the first 2 GiB of tensors holds NaN or Inf";
}

// --ctx: at least the prompt and -n, at most the model's context length (its <arch>.context_length).
uint32_t parse_ctx(const cli::Args& args, const llm::ModelConfig& c, uint32_t prompt, uint32_t n) {
  const uint64_t need = uint64_t(prompt) + n;
  const std::string limit = "the model's context length (" + text::printable(c.arch_name) + ".context_length = " +
                            std::to_string(c.n_ctx_train) + ")";
  if (!args.has("ctx")) {
    if (need > c.n_ctx_train)
      throw cli::UsageError("the prompt (" + std::to_string(prompt) + " tokens) plus -n " + std::to_string(n) + " is " +
                            std::to_string(need) + " tokens, more than " + limit + ": a shorter prompt or a smaller -n");
    return uint32_t(need);
  }
  const uint32_t ctx = args.get_u32("ctx", 0);
  if (ctx > c.n_ctx_train) throw cli::UsageError("--ctx " + std::to_string(ctx) + " is more than " + limit);
  if (ctx < need)
    throw cli::UsageError("--ctx " + std::to_string(ctx) + " is shorter than the prompt (" + std::to_string(prompt) +
                          " tokens) plus -n " + std::to_string(n));
  return ctx;
}

// --temp, --top-k, --seed. Top-k 0 is llama.cpp's "no top-k": the whole vocabulary. --top-k and --seed
// with greedy decoding would change nothing: refused rather than silently ignored.
llm::SamplerOptions parse_sampler(const cli::Args& args) {
  llm::SamplerOptions o{.temperature = float(args.get_double("temp", 0)), .top_k = args.get_u32("top-k", 40), .seed = args.get_u64("seed", 0)};
  if (!std::isfinite(o.temperature)) throw cli::UsageError("--temp " + args.get("temp") + " is too large");
  if (o.temperature <= 0 && (args.has("top-k") || args.has("seed")))
    throw cli::UsageError(std::string(args.has("top-k") ? "--top-k" : "--seed") +
                          " applies to sampling: give --temp T > 0 too (--temp 0, the default, is greedy)");
  return o;
}

// The CPU executor holds the whole model in host memory: the GPU path's placement and streaming options
// mean nothing to it. Said, not refused: the same command line may run on a machine with a GPU.
void note_gpu_only_options(const cli::Args& args) {
  std::string given;
  for (const char* o : {"vram-budget", "ram-budget", "resident", "slots", "gpus", "expert-cache", "expert-prefetch", "expert-pregate",
                        "expert-pregate-first", "expert-overlap", "expert-window", "expert-read", "prompt-kernels"})
    if (args.has(o)) given += std::string(given.empty() ? "--" : ", --") + o;
  if (!given.empty())
    std::fprintf(stderr, "llm: note: the CPU executor (--path cpu, or no GPU) ignores %s: %s the GPU path's\n",
                 given.c_str(), given.find(',') == std::string::npos ? "it is" : "they are");
}

// --batch, --draft, --draft-k, --warmup.
llm::GenerateOptions parse_generate(const cli::Args& args) {
  llm::GenerateOptions g;
  g.batch = uint32_t(parse_number("--batch", args.get("batch", "512"), UINT32_MAX));
  if (g.batch == 0) throw cli::UsageError("--batch must be at least 1 (1: the prompt token by token)");
  g.warmup = args.has("warmup");
  const std::string draft = args.get("draft", "none");
  if (draft == "lookup") {
    g.draft = llm::LookupOptions{};
    g.draft->k = uint32_t(parse_number("--draft-k", args.get("draft-k", "8"), 31));
    if (g.draft->k == 0) throw cli::UsageError("--draft-k must be 1..31 (or --draft none)");
  } else if (draft != "none") {
    throw cli::UsageError("--draft must be none or lookup, not '" + draft + "'");
  } else if (args.has("draft-k")) {
    throw cli::UsageError("--draft-k needs --draft lookup");
  }
  return g;
}

int run(const cli::Args& args, bool tokenize_only) {
  if (args.has("prompt") && args.has("prompt-ids"))
    throw cli::UsageError("--prompt and --prompt-ids are two ways of giving the prompt: give one or the other");
  // What needs no model is checked before any device is opened.
  llm::Sampler sampler(parse_sampler(args));
  const uint32_t n = uint32_t(parse_number("-n", args.get("n", "32"), UINT32_MAX));
  llm::GenerateOptions go = parse_generate(args);
  const bool gpu = !tokenize_only && example::use_gpu_path(args.get("path", "auto"));
  if (!gpu && !tokenize_only) note_gpu_only_options(args);
  std::vector<std::string> devices = args.all("device");
  if (devices.empty()) devices.push_back("emu:/tmp/gpunvme-models.img");
  // The output files first (runtime/guard/output_file.h): one on a device of the run is refused before
  // anything is read, and none replaces its old file unless the run succeeds.
  const auto output = [&](const std::string& name) {
    return args.has(name) ? guard::OutputFile::open(args.get(name), devices, "--" + name) : guard::OutputFile();
  };
  llm::Trace trace(output("trace"), output("logits-out"), 5);
  // Only --trace and --logits-out read a token's logits: without them a greedy run picks on the GPU
  // (GenerateOptions::token_logits; GPUNVME_LLM_HOST_PICK=1: on the host, the A/B switch).
  const char* host_pick = std::getenv("GPUNVME_LLM_HOST_PICK");
  go.token_logits = trace.wants_logits() || (host_pick && std::string(host_pick) == "1");
  guard::OutputFile json_out = output("json-out");
  // Readers' shared locks for the whole run (DeviceSet): a deploy cannot rewrite the model under the
  // engine (and the engine refuses a device a deploy holds), as for `gpunvme ls` and `verify`.
  const llm::GpuChoice gpus = parse_gpus(args);
  const bool per_gpu = gpu && device_per_gpu(devices, gpus.count);
  llm::LoadedModel lm(per_gpu ? std::vector<std::string>{devices[0]} : devices);
  const llm::ModelOnDevice& m = lm.model;
  llm::DeviceSet& set = lm.set;
  const std::string device = set.describe();
  std::vector<uint32_t> prompt;
  const llm::Tokenizer* tok = lm.has_tokenizer() ? &lm.tokenizer() : nullptr;
  if (args.has("prompt")) {
    if (!tok) throw std::runtime_error("the model has no vocabulary (tokenizer.ggml.model = none): use --prompt-ids");
    prompt = tok->encode(args.get("prompt"), true);
  } else if (args.has("prompt-ids")) {
    for (uint64_t id : args.get_u64_list("prompt-ids", "", 0, UINT32_MAX)) prompt.push_back(uint32_t(id));
  } else {
    throw cli::UsageError("give --prompt TEXT or --prompt-ids LIST");
  }
  if (tokenize_only) {
    for (size_t i = 0; i < prompt.size(); ++i) std::printf("%s%u", i ? " " : "", prompt[i]);
    std::printf("\n");
    return 0;
  }
  if (prompt.empty()) throw cli::UsageError("the prompt has no tokens (the model adds no BOS): give some text");
  for (uint32_t id : prompt)
    if (id >= m.config.n_vocab)
      throw cli::UsageError("--prompt-ids: token id " + std::to_string(id) + " is outside the vocabulary (" + std::to_string(m.config.n_vocab) + " tokens)");
  const uint32_t ctx = parse_ctx(args, m.config, uint32_t(prompt.size()), n);
  llm::GpuExecOptions o;
  // The GPU's activations are sized for the largest pass: a prompt chunk or a speculative pass.
  o.max_batch = std::max(std::min<uint32_t>(go.batch, uint32_t(prompt.size())), go.draft ? go.draft->k + 1 : 1);
  o.gpus = gpus.count;
  o.gpu_ids = gpus.ids;
  parse_residency(args, m.config.n_layer, o);
  o.slots = llm::parse_slots_flag(args);
  const std::string kernels = args.get("prompt-kernels", "fast");
  if (kernels != "fast" && kernels != "exact")
    throw cli::UsageError("--prompt-kernels must be fast or exact, not '" + text::printable(kernels) + "'");
  o.fast_prompt = kernels == "fast";
  o.verify = !args.has("no-verify");
  const std::vector<std::unique_ptr<llm::DeviceSet>> copies = per_gpu ? open_gpu_copies(devices, m) : decltype(open_gpu_copies(devices, m)){};
  if (per_gpu) {
    o.gpu_controllers.push_back(set.controllers());
    for (const auto& c : copies) o.gpu_controllers.push_back(c->controllers());
  }
  if (!m.detected.record) std::fprintf(stderr, "llm: %s\n", llm::no_record_note(m).c_str());
  const std::unique_ptr<llm::Executor> ex = lm.executor(gpu, ctx, o);
  // The name and the rest come from the device: escaped, so a model cannot forge terminal output.
  std::printf("model: %s (%s, %u layers) on %s: %s\n", text::printable(m.file->model_name()).c_str(),
              text::printable(m.config.arch_name).c_str(), m.config.n_layer,
              text::printable(m.stripe ? m.io.name : set.controller(0).transport().name()).c_str(),
              text::printable(m.detected.describe()).c_str());
  const llm::ExecStats start = ex->stats();
  if (!start.gpus.empty()) std::printf("%s", llm::gpus_table(start.gpus).c_str());
  else if (!start.plan.layers.empty()) std::printf("%s", llm::plan_table(start.plan).c_str());
  std::fflush(stdout);
  if (tok) std::printf("%s", terminal_piece([&] { std::string s; for (uint32_t id : prompt) s += tok->piece(id); return s; }()).c_str());
  const std::set<uint32_t> eog = args.has("ignore-eos") ? std::set<uint32_t>{} : m.vocab.eog;
  llm::GenerateResult r;
  try {
    r = llm::generate(*ex, prompt, n, sampler, eog, go, [&](uint32_t id, std::span<const float> logits) {
      trace.token(id, logits);
      if (tok) std::printf("%s", terminal_piece(tok->piece(id)).c_str());
      else std::printf(" %u", id);
      std::fflush(stdout);
    });
  } catch (const llm::NonFiniteLogits& e) {
    std::printf("\n");
    throw std::runtime_error(e.what() + explain_non_finite(m));
  } catch (...) {
    // The text printed so far ends its line, so the error (stderr) starts one of its own on a terminal;
    // no tokens: line follows (a run that failed, e.g. a GPU lost mid-run, is not reported as complete).
    std::printf("\n");
    std::fflush(stdout);
    throw;
  }
  std::printf("\ntokens:");
  for (uint32_t id : r.tokens) std::printf(" %u", id);
  print_summary(r, go, ex->describe());
  trace.commit();
  write_json(json_out, r, go, m, device, ex->describe());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const bool tokenize_only = argc > 1 && std::strcmp(argv[1], "tokenize") == 0;
  std::vector<char*> av(argv, argv + argc);  // -n is the one short option (llama.cpp's spelling)
  static char long_n[] = "--n";
  for (char*& a : av)
    if (std::strcmp(a, "-n") == 0) a = long_n;
  try {
    // `tokenize` takes only what it uses: a generation option there would be silently ignored.
    const std::vector<std::string> options =
        tokenize_only ? std::vector<std::string>{"device", "prompt", "prompt-ids"}
                      : std::vector<std::string>{"device", "prompt", "prompt-ids", "n", "temp", "top-k", "seed", "resident", "slots", "ctx", "path", "trace",
                          "logits-out", "expert-cache", "expert-prefetch", "expert-pregate", "expert-pregate-first", "expert-overlap", "expert-window", "expert-read", "json-out", "batch", "draft", "draft-k", "vram-budget", "ram-budget", "prompt-kernels", "gpus"};
    const std::vector<std::string> flags =
        tokenize_only ? std::vector<std::string>{} : std::vector<std::string>{"ignore-eos", "no-verify", "warmup"};
    const cli::Args args(argc, av.data(), tokenize_only ? 2 : 1, options, flags, {"device"});
    if (args.help_asked()) return args.print_help("llm", {kHelp.brief, kHelp.rest + host::device_string_help()});
    if (!args.positional().empty()) throw cli::UsageError("unexpected argument '" + args.positional().front() + "'");
    return run(args, tokenize_only);
  } catch (const cli::UsageError& e) {
    cli::print_usage_error("llm", e, kHelp);
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "llm: %s\n", e.what());
    return 1;
  }
}
