// llm: an ntransformer-style engine on gpunvme. It finds a GGUF model on a raw NVMe namespace (or the
// emulated one) by itself, and for every token runs every layer on weights that GPU kernels just read
// from the namespace into streaming slots, or that are resident in GPU memory. Token-exact with
// llama.cpp (tests/llm). Without a GPU it runs the same model code on the CPU.
//
//   llm --device emu:/tmp/models.img --prompt "The capital of France is" -n 32
//   llm tokenize --device emu:/tmp/models.img --prompt "Hello"
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>

#include "examples/example_model.h"
#include "examples/llm/engine/executor.h"
#include "examples/llm/engine/expert_io_flags.h"
#include "examples/llm/engine/generate.h"
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

const char* kUsage =
    "usage: llm --device DEV (--prompt TEXT | --prompt-ids 1,2,3) [-n N] [--temp T --top-k K --seed S]\n"
    "           [--vram-budget SIZE] [--ram-budget SIZE] [--resident all|none|N] [--slots N] [--expert-cache SIZE]\n"
    "           [--expert-prefetch on|off] [--expert-pregate N] [--expert-pregate-first N] [--expert-overlap on|off] [--expert-window SIZE]\n"
    "           [--expert-read SIZE]\n"
    "           [--ctx N] [--path auto|gpu|cpu] [--batch N] [--draft none|lookup --draft-k K]\n"
    "       llm tokenize --device DEV --prompt TEXT\n"
    "\n"
    "Finds the model on the device alone (a `gpunvme deploy` record or a dd'ed GGUF), prints the text as it is\n"
    "generated, then the run's numbers. Architectures: llama (dense and Mixtral-style MoE), qwen2, gemma3;\n"
    "weights F32 F16 BF16 Q8_0 Q4_0 Q5_0 Q4_K Q5_K Q6_K.\n"
    "  --device DEV        the namespace holding the model; repeat it for a striped set (llm_make_model or\n"
    "                      `gpunvme deploy` with several --device): every member, in the order written. Each\n"
    "                      member's record names its place: a wrong order, a missing or repeated member is refused\n"
    "  --prompt TEXT       tokenized with the model's own vocabulary (BOS added when the model asks for it)\n"
    "  --prompt-ids LIST   token ids, comma-separated (any model, also one without a vocabulary)\n"
    "  -n N                tokens to generate (default 32; stops early at the model's end-of-text token)\n"
    "  --temp T            0 (default): greedy, the token llama.cpp's greedy decoding picks; > 0: sample\n"
    "  --top-k K, --seed S sampling among the K most likely (default 40) with a fixed seed (default 0)\n"
    "  --vram-budget SIZE  GPU path: GPU memory for layer weights (default: what is free after the embeddings,\n"
    "                      head, KV cache and activations, less the RAM tier's buffers and 512 MiB)\n"
    "  --ram-budget SIZE   GPU path: pinned host memory for layers that do not fit in VRAM, read once at start\n"
    "                      and copied to the GPU per token; MoE: then the expert cache (default 0)\n"
    "                      The residency plan (printed at start) puts dense parts in VRAM, then RAM, then NVMe\n"
    "                      (read per token), each tier spread over the layers; MoE experts after dense parts\n"
    "  --resident all|none|N  GPU path, instead of the budgets: the first N layers in GPU memory, the rest read\n"
    "                      from the namespace for every token (none: every layer streams)\n"
    "  --slots N           streaming slots (default 2: layer i+1 is read while layer i computes)\n"
    "  --expert-cache SIZE MoE, GPU path: LRU cache of routed experts in pinned host memory the GPU reads (the\n"
    "                      drive's reads land there; default: the plan's, what the RAM budget leaves; 0: the\n"
    "                      routed experts are read for every token)\n"
    "  --expert-prefetch on|off  MoE, GPU path: before each layer's routing, read the experts the previous token\n"
    "                      chose there into the cache, overlapping compute (default: on when the cache holds two\n"
    "                      tokens' experts of a layer; off: no prefetch of either kind unless --expert-pregate);\n"
    "                      the logits are the same either way\n"
    "  --expert-pregate N  MoE, GPU path: at each layer whose experts are fetched, run the next such layer's\n"
    "                      router on this layer's state (pre-gating) and read its N most likely experts ahead,\n"
    "                      while the drive would wait for routing (0: off; 1 to k; instead of --expert-prefetch;\n"
    "                      default k/2, at least 1, where the expert cache is 0, else off). Adds two fetches of\n"
    "                      expert slots in pinned memory if the cache is smaller. The logits are the same\n"
    "  --expert-pregate-first N  MoE, with pre-gating: at the last fetched layer of a token, read N of the\n"
    "                      experts this token routed to at the first fetched layer, for the next token's (one-token\n"
    "                      lag), while the drive would idle through the token boundary; a wrong one stops reading\n"
    "                      once that layer's routing is known (0: off; at most k; default: --expert-pregate's N)\n"
    "  --expert-overlap on|off  MoE, GPU path: each expert kernel starts once the part it reads is in, while\n"
    "                      the layer's other reads still stream (default: on where the CUDA driver has stream\n"
    "                      memory waits); off: the expert kernels start after all of the layer's reads\n"
    "  --expert-window SIZE MoE, GPU path: bytes of a layer's expert reads in flight at once, issued in the\n"
    "                      order the expert kernels use them so that they also end in that order (default 8M,\n"
    "                      at least one read per queue; 0: all at once, which end together)\n"
    "  --expert-read SIZE  MoE, GPU path: the largest read of an expert fetch (default 256K, 4K to 1G; the\n"
    "                      drive's MDTS caps it): smaller reads end in finer order\n"
    "  --ctx N             context length to allocate (default: prompt + n)\n"
    "  --path auto|gpu|cpu GPU executor where a GPU is present (default auto), or the CPU executor\n"
    "  --batch N           prompt tokens per pass over the layers (default 512): each layer is read once for\n"
    "                      the whole chunk (1: token by token, as a baseline)\n"
    "  --draft none|lookup speculative decoding (default none): draft tokens by prompt lookup (the tokens that\n"
    "                      followed the context's last 1-3 tokens where they occurred before) and verify them in\n"
    "                      the same pass; the output is exactly that of plain decoding, in fewer passes\n"
    "  --draft-k K         tokens drafted per pass at most (1..31, default 8)\n"
    "  --trace FILE        per generated token: its id and the top-5 logits, one JSON line each\n"
    "  --logits-out FILE   per generated token: all logits, raw float32 (bitwise comparisons)\n"
    "  --ignore-eos        keep generating past the model's end-of-text token\n"
    "  --no-verify         check only the model's header at open (always done), not the bytes read at start\n"
    "                      and streamed against the deploy record's CRC-32Cs (docs/engine.md)\n"
    "  --json-out FILE     the run's numbers (tokens/s, bytes per token, I/O, stalls, CPU time) as JSON\n";

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

std::vector<uint32_t> parse_ids(const std::string& s) {
  std::vector<uint32_t> ids;
  size_t i = 0;
  while (i <= s.size()) {
    size_t j = s.find(',', i);
    if (j == std::string::npos) j = s.size();
    ids.push_back(uint32_t(parse_number("--prompt-ids", s.substr(i, j - i), UINT32_MAX)));
    i = j + 1;
  }
  return ids;
}

uint32_t parse_resident(const std::string& s, uint32_t n_layer) {
  if (s == "all") return n_layer;
  if (s == "none" || s.empty()) return 0;
  try {
    return uint32_t(std::min<uint64_t>(text::parse_u64("--resident", s), n_layer));
  } catch (const text::ParseError&) {
    throw cli::UsageError("--resident must be all, none or a number of layers, not '" + s + "'");
  }
}

// An optional on|off flag: absent -> the engine's default.
std::optional<bool> on_off(const cli::Args& args, const char* name) {
  if (!args.has(name)) return std::nullopt;
  const std::string v = args.get(name);
  if (v != "on" && v != "off") throw cli::UsageError(std::string("--") + name + " must be on or off, not '" + v + "'");
  return v == "on";
}

// --resident, or the budgets (not both: they are two ways of saying where layers live).
void parse_residency(const cli::Args& args, uint32_t n_layer, llm::GpuExecOptions& o) {
  const bool budgets = args.has("vram-budget") || args.has("ram-budget");
  if (args.has("resident") && budgets)
    throw cli::UsageError("--resident places layers by count, --vram-budget / --ram-budget by bytes: give one or the other");
  if (args.has("resident")) o.resident_layers = parse_resident(args.get("resident"), n_layer);
  if (args.has("vram-budget")) o.vram_budget = args.get_size("vram-budget", 0);
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
  char b[1024];
  std::snprintf(b, sizeof b,
                "{\"tool\":\"llm\",\"version\":1,\"model\":%s,\"arch\":%s,\"layers\":%u,\"device\":%s,\"executor\":%s,"
                "\"prompt_tokens\":%u,\"prompt_seconds\":%.6f,\"generated_tokens\":%zu,\"decode_steps\":%u,"
                "\"decode_seconds\":%.6f,\"tokens_per_second\":%.6f,\"engine_cpu_seconds\":%.6f,"
                "\"resident_layers\":%u,\"streamed_layers\":%u,\"resident_bytes\":%llu,\"bytes_per_token\":%llu,"
                "\"streamed_bytes\":%llu,\"io_seconds\":%.6f,\"stall_seconds\":%.6f,",
                text::json_string(m.file->model_name()).c_str(), text::json_string(m.config.arch_name).c_str(),
                m.config.n_layer, text::json_string(device).c_str(), text::json_string(described).c_str(), r.prompt_tokens,
                r.prompt_seconds, r.tokens.size(), r.decode_steps, r.decode_seconds, tps, r.engine_cpu_seconds,
                e.resident_layers, e.streamed_layers, (unsigned long long)e.resident_bytes,
                (unsigned long long)e.bytes_per_step, (unsigned long long)e.streamed_bytes, e.io_seconds, e.stall_seconds);
  std::string j = b;
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

// --batch, --draft, --draft-k.
llm::GenerateOptions parse_generate(const cli::Args& args) {
  llm::GenerateOptions g;
  g.batch = uint32_t(parse_number("--batch", args.get("batch", "512"), UINT32_MAX));
  if (g.batch == 0) throw cli::UsageError("--batch must be at least 1 (1: the prompt token by token)");
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
  std::vector<std::string> devices = args.all("device");
  if (devices.empty()) devices.push_back("emu:/tmp/gpunvme-models.img");
  // The output files first (runtime/guard/output_file.h): one on a device of the run is refused before
  // anything is read, and none replaces its old file unless the run succeeds.
  const auto output = [&](const std::string& name) {
    return args.has(name) ? guard::OutputFile::open(args.get(name), devices, "--" + name) : guard::OutputFile();
  };
  llm::Trace trace(output("trace"), output("logits-out"), 5);
  guard::OutputFile json_out = output("json-out");
  // Readers' shared locks for the whole run (DeviceSet): a deploy cannot rewrite the model under the
  // engine (and the engine refuses a device a deploy holds), as for `gpunvme ls` and `verify`.
  llm::DeviceSet set(devices);
  const llm::ModelOnDevice m = llm::open_model(set.namespaces());
  const std::string device = set.describe();
  std::vector<uint32_t> prompt;
  std::unique_ptr<llm::Tokenizer> tok;
  if (m.vocab.model != "none") tok = std::make_unique<llm::Tokenizer>(m.vocab);
  if (args.has("prompt")) {
    if (!tok) throw std::runtime_error("the model has no vocabulary (tokenizer.ggml.model = none): use --prompt-ids");
    prompt = tok->encode(args.get("prompt"), true);
  } else if (args.has("prompt-ids")) {
    prompt = parse_ids(args.get("prompt-ids"));
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
  const uint32_t n = args.get_u32("n", 32);
  const uint32_t ctx = args.get_u32("ctx", uint32_t(prompt.size()) + n);
  if (ctx < prompt.size() + n) throw cli::UsageError("--ctx " + std::to_string(ctx) + " is shorter than the prompt (" + std::to_string(prompt.size()) + " tokens) plus -n " + std::to_string(n));
  if (ctx > m.config.n_ctx_train)
    throw cli::UsageError("prompt + -n = " + std::to_string(ctx) + " tokens is longer than the model's context (" + std::to_string(m.config.n_ctx_train) + ")");
  const llm::GenerateOptions go = parse_generate(args);
  llm::GpuExecOptions o;
  // The GPU's activations are sized for the largest pass: a prompt chunk or a speculative pass.
  o.max_batch = std::max(std::min<uint32_t>(go.batch, uint32_t(prompt.size())), go.draft ? go.draft->k + 1 : 1);
  parse_residency(args, m.config.n_layer, o);
  o.slots = args.get_u32("slots", 2);
  if (o.slots == 0 || o.slots > 64) throw cli::UsageError("--slots must be 1..64");
  o.verify = !args.has("no-verify");
  if (!m.detected.record) std::fprintf(stderr, "llm: %s\n", llm::no_record_note(m).c_str());
  std::unique_ptr<llm::Executor> ex;
  if (example::use_gpu_path(args.get("path", "auto"))) {
    const std::vector<host::Controller*> ctrls = set.controllers();
    ex = llm::make_gpu_executor(ctrls, m, ctx, o);
  } else {
    ex = llm::make_cpu_executor(m, ctx, o.verify);
  }
  std::printf("model: %s (%s, %u layers) on %s: %s\n", m.file->model_name().c_str(), m.config.arch_name.c_str(),
              m.config.n_layer, (m.stripe ? m.io.name : set.controller(0).transport().name()).c_str(), m.detected.describe().c_str());
  if (!ex->stats().plan.layers.empty()) std::printf("%s", llm::plan_table(ex->stats().plan).c_str());
  std::fflush(stdout);
  llm::Sampler sampler({float(args.get_double("temp", 0)), args.get_u32("top-k", 40), args.get_u64("seed", 0)});
  if (tok) std::printf("%s", terminal_piece([&] { std::string s; for (uint32_t id : prompt) s += tok->piece(id); return s; }()).c_str());
  const int64_t eos = args.has("ignore-eos") ? -1 : m.vocab.eos;
  const llm::GenerateResult r = llm::generate(*ex, prompt, n, sampler, eos, go, [&](uint32_t id, std::span<const float> logits) {
    trace.token(id, logits);
    if (tok) std::printf("%s", terminal_piece(tok->piece(id)).c_str());
    else std::printf(" %u", id);
    std::fflush(stdout);
  });
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
    const cli::Args args(argc, av.data(), tokenize_only ? 2 : 1,
                         {"device", "prompt", "prompt-ids", "n", "temp", "top-k", "seed", "resident", "slots", "ctx", "path", "trace",
                          "logits-out", "expert-cache", "expert-prefetch", "expert-pregate", "expert-pregate-first", "expert-overlap", "expert-window", "expert-read", "json-out", "batch", "draft", "draft-k", "vram-budget", "ram-budget"},
                         {"help", "ignore-eos", "no-verify"}, {"device"});
    if (args.has("help")) {
      std::printf("%s\n%s\n", kUsage, host::device_string_help());
      return 0;
    }
    if (!args.positional().empty()) throw cli::UsageError("unexpected argument '" + args.positional().front() + "'");
    return run(args, tokenize_only);
  } catch (const cli::UsageError& e) {
    std::fprintf(stderr, "llm: %s\n%s", e.what(), kUsage);
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "llm: %s\n", e.what());
    return 1;
  }
}
