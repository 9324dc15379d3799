// llm_seqs: aggregate tokens per second of N sequences decoded together (issue 37), each pass carrying
// the next token of every sequence, so that every streamed layer is read once for all of them.
// `llm_seqs --help` explains.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench/baselines/pacing.h"
#include "bench/llm_modeled_drive.h"
#include "examples/example_model.h"
#include "examples/llm/engine/executor.h"
#include "examples/llm/engine/slots_flag.h"
#include "host/text/escape.h"
#include "host/text/human_bytes.h"
#include "host/text/numbers.h"
#include "runtime/cli/args.h"
#include "runtime/cli/tool_main.h"
#include "runtime/guard/output_file.h"

using namespace gpunvme;

namespace {

const cli::Help kHelp = {
    "usage: llm_seqs --device emu:... [--seqs 1,2,4,8,16] [--prompt-tokens N] [--tokens T] [--path auto|gpu|cpu]\n"
    "                [--vram-budget SIZE] [--ram-budget SIZE] [--drive NAME] [--json-out FILE]\n"
    "\n"
    "Multi-sequence passes: for each N of --seqs, N sequences each read a short prompt, then decode\n"
    "together, every pass carrying the next token of all N (the Executor's pass of PassTokens, no\n"
    "scheduler). Per N: passes/s (= each sequence's tokens/s), aggregate tokens/s, the I/O bound (bytes\n"
    "the timed passes read, per pass, over the modeled drive's and the host link's bandwidth), efficiency\n"
    "against it, speedup over N = 1, host CPU seconds per token, the KV cache the N sequences hold.\n"
    "Every sequence's greedy tokens must equal those of its prompt decoded alone, else the row is an error.\n"
    "\n"
    "  --device DEV     a model on an emulated namespace: an image (emu:/dev/shm/m.img) or a generated one,\n"
    "                   e.g. emu:gen,shape=llama3-70b,type=q6_k (llm_make_model's shapes)\n"
    "  --seqs LIST      sequence counts, 1..64 each (default 1,2,4,8,16)\n"
    "  --prompt-tokens N  each sequence's prompt (default 16); --tokens T timed decode passes (default 8)\n"
    "  --path auto|gpu|cpu  gpu (streams from the modeled drive), cpu (the whole model in host memory: no\n"
    "                   reads per pass, no bound), auto (gpu where a GPU is present; default)\n"
    "  --vram-budget, --ram-budget  the GPU executor's residency budgets (the engine's; default its own)\n"
    "  --max-seqs N|auto  the executor's sequence slots (default max(--seqs)); auto: what the VRAM budget gives\n"
    "  --drive NAME     the modeled drive the GPU executor streams from (default pcie4; none: unthrottled)\n"
    "  --json-out FILE  one JSON object per N, per line; FILE is replaced when the run ends\n",
    "\n"
    "Columns: pass/s: timed passes / their wall time, which is also each sequence's tokens/s; tok/s: N x\n"
    "that; MB/pass: bytes read from the drive per timed pass (streamed layers, fetched experts and those\n"
    "read ahead: a pass of N sequences reads the union of their experts); bound: passes/s at max(drive bytes / the drive's rated\n"
    "bandwidth, drive + RAM-tier bytes / the measured host-to-GPU bandwidth) (residency_plan.h's rule, on\n"
    "the bytes measured), '-' where nothing is read per pass (the CPU executor, a model all in VRAM);\n"
    "eff: pass/s / bound; xN=1: tok/s over the N = 1 row's; CPU s/tok: the process's user + system CPU\n"
    "time in the timed passes, less the emulated drive's threads, per token; KV: the cache the N\n"
    "sequences hold at the end (K and V, f32 on the CPU, f16 on the GPU); MoE: expert cache hits / routed\n"
    "and the time the passes waited for expert reads in the timed passes.\n"
    "How a row runs: one executor holds max(--seqs) sequence slots (or --max-seqs) for the whole run; a row\n"
    "of more sequences than it holds is an error row. Sequence i reads\n"
    "prompt i mod --prompts (distinct token ids per prompt), whole prompts batched into passes; then\n"
    "--warmup untimed and --tokens timed decode passes of N tokens; then the slots are freed. Before the\n"
    "rows, each prompt is decoded alone in slot 0 (the N = 1 row is prompt 0's): the references that every\n"
    "sequence's tokens are checked against, token by token. With --prompts 1 every sequence is the same,\n"
    "which cannot tell sequences' caches apart: keep at least 2.\n"
    "Other options:\n"
    "  --prompts K      distinct prompts (default 2; at most 64)\n"
    "  --warmup W       untimed decode passes before the timed ones (default 1)\n"
    "  --pass-kernels exact|fast  GPU passes of more than 32 tokens (prompts; N > 32): exact (default) keeps\n"
    "                   every logit as token by token, which the check needs; fast takes the tensor cores\n"
    "                   and flash attention (the engine's default) and may change greedy tokens\n"
    "  --queues N       the GPU executor's NVMe queues (default 8; the emulated controller gets 2N threads)\n"
    "  --slots auto|N   the GPU executor's streaming slots (the engine's --slots; auto, the default: 2 here)\n"
    "  --no-verify      skip the engine's checks of loaded bytes against the deploy record\n"
    "  --kv-host        the KV cache in pinned host memory, read by attention over the host link (sequences\n"
    "                   beyond what VRAM holds caches for: FlexGen's trade)\n"
    "Example (the GPU machine): llm_seqs --device emu:gen,shape=llama3-70b,type=q6_k --vram-budget 22G\n"
    "  --drive pcie4 --seqs 1,2,4,8,16 --json-out seqs.json\n"
    "A GPU executor without sequence slots refuses max(--seqs) > 1: its error is this tool's.\n"};

constexpr uint32_t kMaxSeqs = 64;
// Prompt tokens per prompt pass at most: whole prompts of several sequences share a pass, as a server's
// new requests would, without sizing the GPU's activations for 64 whole prompts.
constexpr uint32_t kPromptPassTokens = 256;

// Distinct counts, ascending.
std::vector<uint32_t> parse_seqs(const cli::Args& args) {
  std::vector<uint32_t> out;
  for (uint64_t n : args.get_u64_list("seqs", "1,2,4,8,16", 1, kMaxSeqs)) out.push_back(uint32_t(n));
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

struct Settings {
  std::vector<uint32_t> seqs;
  uint32_t prompt_tokens = 16, tokens = 8, warmup = 1, prompts = 2;
  bool gpu = false;
  std::string gpu_name;  // the card, as CUDA names it
  std::string drive = "pcie4";
  double drive_bps = 0, h2d_bps = 0;  // the modeled drive's rated read bandwidth; measured host-to-GPU
  uint32_t positions() const { return prompt_tokens + warmup + tokens; }  // each sequence's context
};

// Prompt v: prompt_tokens distinct-looking ids, different for every v (a fixed function: reruns compare).
std::vector<uint32_t> prompt_ids(uint32_t v, uint32_t n, uint32_t n_vocab) {
  std::vector<uint32_t> p(n);
  for (uint32_t j = 0; j < n; ++j) p[j] = uint32_t((1 + 7919ull * v + 104729ull * j + 31ull * v * j) % n_vocab);
  return p;
}

uint32_t argmax(std::span<const float> row) { return uint32_t(std::max_element(row.begin(), row.end()) - row.begin()); }

// The counters of ExecStats that a row differences (cumulative in the executor).
struct Counters {
  uint64_t drive_bytes = 0, ram_bytes = 0, expert_hits = 0, experts_routed = 0;
  double layer_stall = 0, expert_stall = 0;  // compute waited for streamed layers / fetched experts
  static Counters of(const llm::ExecStats& s) {
    double stall = 0;
    for (double v : s.prefetch.stall_seconds) stall += v;
    // The drive's bytes: streamed layers, fetched experts and what pre-gating read ahead (its hits are
    // the fetches' cache hits, so without it a predicted pass looked like fewer bytes than it moved).
    return {s.streamed_bytes + s.experts.bytes_read + s.prefetch.bytes_read, s.ram_copied_bytes, s.experts.hits, s.experts.requested,
            s.stall_seconds, stall};
  }
  Counters operator-(const Counters& o) const {
    return {drive_bytes - o.drive_bytes, ram_bytes - o.ram_bytes, expert_hits - o.expert_hits, experts_routed - o.experts_routed,
            layer_stall - o.layer_stall, expert_stall - o.expert_stall};
  }
};

struct Row {
  uint32_t n = 0;
  double seconds = 0, host_cpu = 0;
  Counters io;  // over the timed passes
  bool moe = false;
  uint64_t kv_bytes = 0;
  std::vector<std::vector<uint32_t>> tokens;  // each sequence's decoded tokens
  std::string error;
  double passes_per_s(const Settings& s) const { return seconds > 0 ? s.tokens / seconds : 0; }
  double tokens_per_s(const Settings& s) const { return n * passes_per_s(s); }
  double bound_passes_per_s(const Settings& s) const {
    const double t = llm::io_bound_seconds(double(io.drive_bytes) / s.tokens, double(io.drive_bytes + io.ram_bytes) / s.tokens, s.drive_bps,
                                           s.h2d_bps);
    return t > 0 ? 1 / t : 0;
  }
};

// N sequences in slots 0..N-1, sequence i reading prompt (first_prompt + i) mod --prompts: their prompts
// in shared passes, then the decode passes (the last --tokens timed); the slots freed after.
Row run_sequences(llm::Executor& ex, const llm::ModelOnDevice& m, const Settings& s, uint32_t n, uint32_t first_prompt,
                  const bench::DriveControllers* drive) {
  Row r;
  r.n = n;
  r.tokens.resize(n);
  std::vector<llm::PassToken> pass;
  std::vector<uint32_t> waiting;  // the sequences whose logits the pass returns, in its order
  const auto take_logits = [&](std::span<const float> logits) {
    for (size_t k = 0; k < waiting.size(); ++k)
      r.tokens[waiting[k]].push_back(argmax(logits.subspan(k * m.config.n_vocab, m.config.n_vocab)));
    pass.clear();
    waiting.clear();
  };
  for (uint32_t i = 0; i < n; ++i) {
    const std::vector<uint32_t> p = prompt_ids((first_prompt + i) % s.prompts, s.prompt_tokens, m.config.n_vocab);
    if (!pass.empty() && pass.size() + p.size() > ex.max_batch()) take_logits(ex.pass(pass));
    for (const llm::PassToken& t : llm::one_sequence(p, 0, false, i)) pass.push_back(t);
    waiting.push_back(i);
  }
  take_logits(ex.pass(pass));
  const auto decode = [&](uint32_t step) {
    for (uint32_t i = 0; i < n; ++i) {
      pass.push_back({r.tokens[i].back(), i, s.prompt_tokens + step, true});
      waiting.push_back(i);
    }
    take_logits(ex.pass(pass));
  };
  for (uint32_t w = 0; w < s.warmup; ++w) decode(w);
  const Counters before = Counters::of(ex.stats());
  const bench::EngineCpuTimer cpu(drive);
  const auto t0 = std::chrono::steady_clock::now();
  for (uint32_t t = 0; t < s.tokens; ++t) decode(s.warmup + t);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.host_cpu = cpu.seconds();
  const llm::ExecStats after = ex.stats();
  r.io = Counters::of(after) - before;
  r.moe = after.has_experts;
  for (uint32_t i = 0; i < n; ++i) ex.end_sequence(i);
  // K and V of every layer at every position held: f32 in the CPU executor's cache, f16 in the GPU's.
  r.kv_bytes = 2ull * m.config.n_layer * m.config.kv_dim() * s.positions() * n * (s.gpu ? 2 : 4);
  return r;
}

// Empty when every sequence's tokens are its prompt's alone; else what differs first.
std::string check_tokens(const Row& r, const std::map<uint32_t, std::vector<uint32_t>>& alone, const Settings& s) {
  for (uint32_t i = 0; i < r.n; ++i) {
    const std::vector<uint32_t>& want = alone.at(i % s.prompts);
    const std::vector<uint32_t>& got = r.tokens[i];
    for (size_t j = 0; j < want.size(); ++j)
      if (j >= got.size() || got[j] != want[j])
        return "sequence " + std::to_string(i) + " (prompt " + std::to_string(i % s.prompts) + ") decoded token " + std::to_string(j) + " as " +
               (j < got.size() ? std::to_string(got[j]) : std::string("nothing")) + ", where the prompt alone gives " + std::to_string(want[j]) +
               ": the passes mixed sequences up (or --pass-kernels fast changed a greedy choice)";
  }
  return "";
}

std::string json_or_null(double v, int digits) {
  if (v <= 0) return "null";
  char b[48];
  std::snprintf(b, sizeof b, "%.*f", digits, v);
  return b;
}

std::string row_json(const Row& r, const Settings& s, double base_tps, const std::string& model, const std::string& executor) {
  std::string j = "{\"tool\":\"llm_seqs\",\"model\":" + text::json_string(model) + ",\"executor\":" + text::json_string(executor) +
                  ",\"gpu\":" + (s.gpu ? text::json_string(s.gpu_name) : std::string("null")) +
                  ",\"drive\":" + (s.gpu ? text::json_string(s.drive) : std::string("null")) + ",\"sequences\":" + std::to_string(r.n) +
                  ",\"prompt_tokens\":" + std::to_string(s.prompt_tokens) + ",\"passes\":" + std::to_string(s.tokens) + ",";
  if (!r.error.empty()) return j + "\"error\":" + text::json_string(r.error) + "}\n";
  const double bound = r.bound_passes_per_s(s);
  char b[900];
  std::snprintf(b, sizeof b,
                "\"seconds\":%.6f,\"passes_per_second\":%.6f,\"tokens_per_second\":%.6f,\"sequence_tokens_per_second\":%.6f,"
                "\"speedup_vs_one\":%s,\"drive_bytes_per_pass\":%.0f,\"ram_bytes_per_pass\":%.0f,\"bound_passes_per_second\":%s,"
                "\"bound_tokens_per_second\":%s,\"efficiency\":%s,\"host_cpu_seconds_per_token\":%.6f,\"kv_bytes\":%llu,"
                "\"drive_bytes_per_second\":%.0f,\"h2d_bytes_per_second\":%.0f,\"expert_hits\":%llu,\"experts_routed\":%llu,"
                "\"layer_stall_seconds\":%.6f,\"expert_stall_seconds\":%.6f,\"tokens_match_alone\":true,\"error\":null}\n",
                r.seconds, r.passes_per_s(s), r.tokens_per_s(s), r.passes_per_s(s), json_or_null(base_tps > 0 ? r.tokens_per_s(s) / base_tps : 0, 4).c_str(),
                double(r.io.drive_bytes) / s.tokens, double(r.io.ram_bytes) / s.tokens, json_or_null(bound, 6).c_str(),
                json_or_null(bound * r.n, 6).c_str(), json_or_null(bound > 0 ? r.passes_per_s(s) / bound : 0, 4).c_str(),
                r.host_cpu / (double(r.n) * s.tokens), (unsigned long long)r.kv_bytes, s.drive_bps, s.h2d_bps,
                (unsigned long long)r.io.expert_hits, (unsigned long long)r.io.experts_routed, r.io.layer_stall, r.io.expert_stall);
  return j + b;
}

void print_row(const Row& r, const Settings& s, double base_tps) {
  if (!r.error.empty()) {
    std::printf("%4u  ERROR: %s\n", r.n, text::printable(r.error).c_str());
  } else {
    const double bound = r.bound_passes_per_s(s);
    char bnd[40] = "      -      -";
    if (bound > 0) std::snprintf(bnd, sizeof bnd, "%7.3f %5.0f%%", bound, 100 * r.passes_per_s(s) / bound);
    char speed[16] = "     -";
    if (base_tps > 0) std::snprintf(speed, sizeof speed, "%5.2fx", r.tokens_per_s(s) / base_tps);
    char moe[96] = "";
    if (r.moe)
      std::snprintf(moe, sizeof moe, "  experts %llu/%llu, stall %.3f s", (unsigned long long)r.io.expert_hits,
                    (unsigned long long)r.io.experts_routed, r.io.expert_stall);
    std::printf("%4u %8.3f %9.3f %s %9.1f %s %9.4f %10s  ok%s\n", r.n, r.passes_per_s(s), r.tokens_per_s(s), speed,
                double(r.io.drive_bytes) / s.tokens / 1e6, bnd, r.host_cpu / (double(r.n) * s.tokens),
                text::human_bytes(double(r.kv_bytes)).c_str(), moe);
  }
  std::fflush(stdout);
}

Settings parse_settings(const cli::Args& args) {
  Settings s;
  s.seqs = parse_seqs(args);
  s.prompt_tokens = args.get_u32("prompt-tokens", 16);
  s.tokens = args.get_u32("tokens", 8);
  s.warmup = args.get_u32("warmup", 1);
  s.prompts = args.get_u32("prompts", 2);
  s.drive = args.get("drive", "pcie4");
  if (s.prompt_tokens == 0 || s.prompt_tokens > kPromptPassTokens)
    throw cli::UsageError("--prompt-tokens must be 1.." + std::to_string(kPromptPassTokens));
  if (s.tokens == 0 || s.tokens > 4096) throw cli::UsageError("--tokens must be 1..4096");
  if (s.warmup > 4096) throw cli::UsageError("--warmup must be 0..4096");
  if (s.prompts == 0 || s.prompts > kMaxSeqs) throw cli::UsageError("--prompts must be 1.." + std::to_string(kMaxSeqs));
  if (!bench::ls::drive_profile_known(s.drive))
    throw cli::UsageError("--drive: unknown drive '" + s.drive + "' (" + bench::ls::drive_profile_names() + ")");
  s.drive_bps = bench::ls::drive_read_bandwidth(s.drive);
  return s;
}

// --max-seqs: a count of 1..kMaxSeqs, or 0 for auto (the GPU executor's, from the VRAM budget); default max(--seqs).
uint32_t requested_slots(const cli::Args& args, const Settings& s) {
  if (!args.has("max-seqs")) return s.seqs.back();
  if (args.get("max-seqs") == "auto") return 0;
  const uint32_t n = args.get_u32("max-seqs", 0);
  if (n == 0 || n > kMaxSeqs) throw cli::UsageError("--max-seqs must be 1.." + std::to_string(kMaxSeqs) + " or auto");
  return n;
}

// The executor of the run: its slots (requested_slots); the GPU's streams through the modeled drive's controllers.
std::unique_ptr<llm::Executor> make_executor(const cli::Args& args, const llm::ModelOnDevice& m, const Settings& s,
                                             const bench::DriveControllers* drive) {
  const uint32_t requested = requested_slots(args, s);
  if (!drive && requested == 0) throw cli::UsageError("--max-seqs auto sizes the GPU executor's KV cache from its VRAM budget: the CPU executor needs a count");
  const uint32_t max_seqs = requested ? requested : kMaxSeqs;  // auto: activations for the most it may give
  const uint32_t max_batch = std::max(max_seqs, std::min(kPromptPassTokens, max_seqs * s.prompt_tokens));
  const bool verify = !args.has("no-verify");
  if (!drive) return llm::make_cpu_executor(m, s.positions(), llm::CpuExecOptions{.verify = verify, .max_seqs = max_seqs, .max_batch = max_batch});
  llm::GpuExecOptions o;
  if (args.has("vram-budget")) o.vram_budget = args.get_size("vram-budget", 0);
  o.ram_budget = args.get_size("ram-budget", 0);
  o.slots = llm::parse_slots_flag(args);
  o.queues = args.get_u32("queues", 8);
  o.max_batch = max_batch;
  o.max_seqs = requested;
  o.kv_in_host = args.has("kv-host");
  o.verify = verify;
  const std::string kernels = args.get("pass-kernels", "exact");
  if (kernels != "exact" && kernels != "fast") throw cli::UsageError("--pass-kernels must be exact or fast, not '" + text::printable(kernels) + "'");
  o.fast_prompt = kernels == "fast";
  return llm::make_gpu_executor(drive->controllers(), m, s.positions(), o);
}

int run(const cli::Args& args) {
  Settings s = parse_settings(args);
  const std::vector<std::string> devices = bench::emu_model_devices(args.get("device"));

  const uint32_t queues = args.get_u32("queues", 8);
  if (queues == 0 || queues > 16) throw cli::UsageError("--queues must be 1 to 16 (the emulated controller gets up to two threads a queue)");
  guard::OutputFile json = args.has("json-out") ? guard::OutputFile::open(args.get("json-out"), devices, "--json-out") : guard::OutputFile();
  // Unthrottled, with readers' locks: the loads at start are not what the rows measure.
  llm::DeviceSet set(devices);
  const llm::ModelOnDevice m = llm::open_model(set.namespaces());
  // The GPU executor's check of the KV cache against the budget, before a GPU is opened: its refusal on any machine.
  if (args.get("path", "auto") == "gpu" && args.has("vram-budget"))
    llm::plan_kv(m.config, llm::layer_bytes(m), s.positions(), requested_slots(args, s), args.has("kv-host"),
                 args.get_size("vram-budget", 0), kMaxSeqs);
  s.gpu = example::use_gpu_path(args.get("path", "auto"));
  std::unique_ptr<bench::DriveControllers> drive;
  if (s.gpu) {
    drive = std::make_unique<bench::DriveControllers>(devices, s.drive, devices.size() > 1 ? queues : 2 * queues);
    s.h2d_bps = bench::measure_h2d();
    s.gpu_name = bench::gpu_name();
  } else {
    s.drive_bps = 0;  // nothing is read per pass: no bound
    for (const char* o : {"vram-budget", "ram-budget", "drive", "queues", "slots", "pass-kernels", "kv-host"})
      if (args.has(o)) std::fprintf(stderr, "llm_seqs: note: the CPU executor (--path cpu, or no GPU) ignores --%s (the GPU path's)\n", o);
  }
  const std::unique_ptr<llm::Executor> ex = make_executor(args, m, s, drive.get());
  const std::string model = m.file->model_name(), executor = ex->describe();
  std::printf("model: %s (%s, %u layers); %s; drive %s\n", text::printable(model).c_str(), text::printable(m.config.arch_name).c_str(),
              m.config.n_layer, text::printable(executor).c_str(), s.gpu ? s.drive.c_str() : "- (nothing read per pass)");
  if (!ex->stats().plan.layers.empty()) std::printf("%s", llm::plan_table(ex->stats().plan).c_str());
  if (s.gpu)
    std::printf("%s: host-to-GPU copy from pinned memory %.2f GB/s\n", text::printable(s.gpu_name).c_str(), s.h2d_bps / 1e9);
  std::printf("%u-token prompts (%u distinct), %u warm-up + %u timed decode passes per row\n", s.prompt_tokens, std::min(s.prompts, s.seqs.back()),
              s.warmup, s.tokens);
  // Each prompt decoded alone: the tokens every sequence must give (the N = 1 row is prompt 0's).
  std::map<uint32_t, std::vector<uint32_t>> alone;
  for (uint32_t v = 0; v < std::min(s.prompts, s.seqs.back()); ++v)
    if (v > 0 || s.seqs.front() != 1) alone[v] = run_sequences(*ex, m, s, 1, v, drive.get()).tokens[0];
  std::printf("%4s %8s %9s %6s %9s %7s %6s %9s %10s  %s\n", "seqs", "pass/s", "tok/s", "xN=1", "MB/pass", "bound", "eff", "CPU s/tok", "KV",
              "tokens = alone");
  double base_tps = 0;
  int errors = 0;
  for (const uint32_t n : s.seqs) {
    if (n > ex->max_seqs()) {  // --max-seqs (auto: the budget's) holds fewer
      Row r;
      r.n = n;
      r.error = std::to_string(n) + " sequences: the executor holds " + std::to_string(ex->max_seqs()) + " (--max-seqs)";
      errors += 1;
      print_row(r, s, base_tps);
      if (json) {
        json.write(row_json(r, s, base_tps, model, executor));
        json.flush();
      }
      continue;
    }
    Row r = run_sequences(*ex, m, s, n, 0, drive.get());
    if (n == 1) alone[0] = r.tokens[0];
    r.error = check_tokens(r, alone, s);
    if (n == 1 && r.error.empty()) base_tps = r.tokens_per_s(s);
    errors += !r.error.empty();
    print_row(r, s, base_tps);
    if (json) {
      json.write(row_json(r, s, base_tps, model, executor));
      json.flush();
    }
  }
  ex->finish();
  if (json) json.commit();
  return errors ? 1 : 0;
}

int parse_and_run(int argc, char** argv) {
  const cli::Args args(argc, argv, 1,
                       {"device", "seqs", "prompt-tokens", "tokens", "warmup", "prompts", "path", "vram-budget", "ram-budget", "drive", "queues",
                        "slots", "pass-kernels", "json-out", "max-seqs"},
                       {"no-verify", "kv-host"});
  if (args.help_asked()) return args.print_help("llm_seqs", kHelp);
  if (!args.positional().empty()) throw cli::UsageError("unexpected argument '" + args.positional().front() + "'");
  if (!args.has("device")) throw cli::UsageError("give --device emu:PATH or emu:gen,shape=NAME,type=T");
  return run(args);
}

}  // namespace

int main(int argc, char** argv) {
  return cli::run_tool("llm_seqs", kHelp, [&] { return parse_and_run(argc, argv); });
}
