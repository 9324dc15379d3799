// Where every layer's weights live while tokens run: VRAM (read once at start), pinned host RAM (read
// once at start, copied to the GPU for every token by DMA) or the NVMe namespace (read for every token
// by GPU-issued reads). Pure data and one function, made once at start from two budgets.
//
// Why this rule is the best for per-token time. Per token every byte not in VRAM crosses a link:
// NVMe bytes N at the drive's bandwidth Bn, RAM-tier bytes R at the host-to-GPU bandwidth Bh. The two
// transfers run on their own streams and overlap each other and the compute, but both enter the GPU
// through its one PCIe link (the streaming slots are GPU-mapped host memory), so a token takes at least
//     T >= max(N / Bn, R / Bh, (N + R) / Bh) = max(N / Bn, (N + R) / Bh)      (the bound reported)
// Each placed byte removes a fixed number of bytes from the per-token traffic: 1 for a dense byte
// (attention, norms, router, a dense FFN: read every token), k/n for a MoE expert byte (a uniform
// router picks k of n experts).
//   1. VRAM removes the traffic entirely, lowering both N + R and (from NVMe) N, so it takes the bytes
//      with the most traffic per byte stored: dense parts first, then experts. Within a class every
//      byte weighs the same, so WHICH layers go to VRAM does not change N or R, only how many bytes do
//      (a fractional knapsack with equal densities; whole layers lose less than one layer's bytes).
//   2. Of what is left, N + R is fixed; moving a byte from NVMe to RAM lowers N and leaves N + R, so
//      the bound cannot grow: RAM is filled, dense parts first for the same reason as in 1, then the
//      expert fetcher's LRU cache (it lives in GPU-mapped pinned host memory, so a cached expert still
//      crosses the link when used, but not the drive; less than two fetches' worth is no cache). (Without the shared link, max(N/Bn, R/Bh) alone
//      would want R/Bh = N/Bn, not a full RAM tier; the link is real on every machine here.)
//   3. VRAM for experts goes to whole layers (dense part and all experts one copy, no fetch at all);
//      what is left after whole layers (less than one layer's experts) stays unused.
// Order matters only for overlap, not for the bound: the streamer reads ahead a few slots, so a run of
// VRAM layers would leave the drive idle while it computes. Each tier's layers are therefore spread
// evenly over the model (layer i of k chosen at about (i + 1/2) L / k), never packed at its start.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "examples/llm/model/config.h"

namespace gpunvme::llm {

enum class Tier : uint8_t { kVram, kRam, kNvme };
const char* tier_name(Tier t);  // "VRAM", "RAM", "NVMe"

// What the plan needs to know of one layer.
struct LayerBytes {
  uint64_t dense = 0;    // bytes read every token (for a MoE layer: everything but the routed experts)
  uint64_t experts = 0;  // all routed experts of the layer (0: dense model)
  uint32_t n_expert = 0, n_used = 0;
};

struct Budgets {
  uint64_t vram = 0;  // bytes of GPU memory for layer weights and the expert cache
  uint64_t ram = 0;   // bytes of pinned host memory for layer weights
};

// The KV cache the plan counts (its bytes: kv_cache_shape.h's, the ones GpuForward allocates). In VRAM
// it takes its bytes from the VRAM budget before any layer (the budget is the layers' and the cache's);
// in pinned host memory it takes none of it and is only reported.
struct KvPlan {
  uint32_t slots = 0, ctx = 0;  // sequence slots of ctx positions (0 slots: none counted: the CPU executor, tests)
  uint64_t bytes = 0;
  bool host = false;
  bool auto_slots = false;      // the slot count came from the budget (auto_kv_slots)
};

struct LayerPlacement {
  Tier dense = Tier::kNvme;
  bool experts_in_vram = false;  // the whole layer (dense part and every expert) is one VRAM copy
};

struct ResidencyPlan {
  std::vector<LayerPlacement> layers;
  std::vector<LayerBytes> bytes;  // the input, for the totals below
  uint64_t expert_cache_bytes = 0;  // RAM left for the fetcher's LRU expert cache (pinned, GPU-mapped)
  std::string rule;                 // "budgets" or "--resident N"
  KvPlan kv;                        // the KV cache beside the layers
  uint64_t vram_budget = 0;         // the budget the plan was made with (layers and a VRAM cache; 0: --resident N)

  uint32_t count(Tier t) const;          // layers whose dense part is in tier t
  uint64_t placed_bytes(Tier t) const;   // bytes stored in tier t (VRAM: with resident experts; RAM: with the cache)
  // Expected bytes per token crossing each link: RAM: the RAM-tier dense parts (copied to the GPU) and the
  // routed experts found in the cache (read by the kernels through the GPU mapping); NVMe: the streamed
  // dense parts and the routed experts that miss the cache. Experts: k/n of each fetched layer's
  // experts, the cache holding its share of them under a uniform router. link = RAM + NVMe.
  double ram_bytes_per_token() const;
  double nvme_bytes_per_token() const;
  double link_bytes_per_token() const { return ram_bytes_per_token() + nvme_bytes_per_token(); }
  // max(NVMe bytes / drive B/s, (RAM + NVMe bytes) / host-to-GPU B/s), in seconds: the rule's bound.
  double bound_seconds(double drive_bytes_per_s, double h2d_bytes_per_s) const;
  bool any_fetched_experts() const;      // a MoE layer whose experts the fetcher reads
};

// The rule's bound for bytes that cross per token or pass, in seconds: max(NVMe bytes / drive B/s, link
// bytes (RAM + NVMe) / host-to-GPU B/s); a rate of 0 bounds nothing. ResidencyPlan::bound_seconds is it
// over the plan's expected bytes; a benchmark gives it the bytes it measured (bench/llm_seqs: a pass of
// N sequences reads the union of their experts).
double io_bound_seconds(double nvme_bytes, double link_bytes, double drive_bytes_per_s, double h2d_bytes_per_s);

// The plan for the budgets (the rule above), the KV cache `kv` taking its bytes from the VRAM budget first
// when in VRAM. Throws std::invalid_argument for an empty model, and for a VRAM cache larger than the
// budget (kv_does_not_fit's message: the fixes).
ResidencyPlan plan_residency(const std::vector<LayerBytes>& layers, const Budgets& b, const KvPlan& kv = {});

// `--max-seqs auto`: the sequence slots a VRAM budget gives, each of `slot_bytes` (kv_slot_bytes) for
// contexts of n_ctx positions. The rule: the cache's share of the budget is what the whole model's layers
// leave of it, or a quarter of it if that is more; as many slots as the share holds, at least 1, at
// most `cap`. Why: a model all in VRAM loses nothing to slots that fill the rest; a streamed model pays
// for every VRAM byte of cache with a byte more streamed per pass, and a quarter keeps what a lone
// sequence pays for the others' slots below a quarter of the budget's worth of reads, while 8 to 64
// slots of a few thousand positions still fit the budgets people run (docs/engine.md). Throws
// std::invalid_argument (kv_does_not_fit's message) when the budget holds not even one slot.
uint32_t auto_kv_slots(const std::vector<LayerBytes>& layers, uint64_t vram_budget, uint64_t slot_bytes, uint32_t n_ctx, uint32_t cap);

// The KV cache of `slots` sequence slots (0: auto_kv_slots' count under vram_budget, at most `cap`) of
// n_ctx positions over the layers `layers` holds (their config c), in VRAM or (host) pinned host memory;
// a VRAM cache larger than vram_budget refused with plan_residency's message. The GPU executor sizes its
// cache with it; a tool checks a run with it before a GPU is opened (bench/llm_seqs).
KvPlan plan_kv(const ModelConfig& c, const std::vector<LayerBytes>& layers, uint32_t n_ctx, uint32_t slots, bool host,
               uint64_t vram_budget, uint32_t cap);
// `--resident N`: the first N layers whole in VRAM, the rest on NVMe (the engine's older option).
ResidencyPlan plan_first_layers(const std::vector<LayerBytes>& layers, uint32_t n);

// The printed table (tier, layers, bytes) and the same as a JSON object.
std::string plan_table(const ResidencyPlan& p);
std::string plan_json(const ResidencyPlan& p);

}  // namespace gpunvme::llm
