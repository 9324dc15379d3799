// Several GPUs in one host (issue 35): the layers split into contiguous ranges, one per GPU, and each
// GPU's residency plan over its own range. Pure data, so the tool, the tests and a build without a GPU
// share it.
//
// Why contiguous ranges: the hidden state then crosses between GPUs once per GPU boundary and pass
// (GPU i's last layer to GPU i + 1's first), whatever the tiers inside each range; each GPU's plan
// spreads its own VRAM / RAM / NVMe layers over its range by the single-GPU rule (residency_plan.h).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "examples/llm/engine/expert_lag.h"
#include "examples/llm/engine/residency_plan.h"

namespace gpunvme::llm {

// Layers [begin, end) of the model.
struct LayerRange {
  uint32_t begin = 0, end = 0;
  bool contains(uint32_t layer) const { return layer >= begin && layer < end; }
  uint32_t size() const { return end - begin; }
};

// `gpus` contiguous ranges covering [0, n_layer) in order, their sizes differing by at most one (the
// first ones the larger): the split where the budgets are not known before the GPUs start (each GPU's
// default budget is what it has free). Throws std::invalid_argument for 0 GPUs or more GPUs than layers (a GPU with no
// layer), naming the fix.
std::vector<LayerRange> split_layers(uint32_t n_layer, uint32_t gpus);

// Each GPU's VRAM budget from --vram-budget's list: one value for every GPU, or one per GPU in order.
// Throws std::invalid_argument naming the fix for another count.
std::vector<uint64_t> budgets_per_gpu(const std::vector<uint64_t>& list, uint32_t gpus);

// Contiguous ranges, one per GPU (per_gpu[g] its budgets), sized by the budgets: the GPUs' stages
// overlap, so a token takes about as long as the stage that moves the most bytes, and the split makes
// the largest of the GPUs' per-token link bytes (plan_range's plan of the range by that GPU's budgets)
// as small as whole layers allow; of the splits that do, the one whose largest range has the fewest
// layers (compute). A GPU with more VRAM gets more layers; equal budgets over equal layers give counts
// differing by one at most. `kv_per_layer`: one layer's KV cache in VRAM (0: in host memory), taken from
// a GPU's budget first for each layer of its range (as plan_residency takes it): a GPU holds no more
// layers than its budget holds caches of. Throws std::invalid_argument (split_layers' refusals) for no GPU
// or more GPUs than layers, and when the budgets hold the caches of fewer layers than the model has.
std::vector<LayerRange> split_by_budgets(const std::vector<LayerBytes>& all, const std::vector<Budgets>& per_gpu,
                                         uint64_t kv_per_layer = 0);

// What the split of a run over several GPUs is made from, before any of them starts.
struct SplitInputs {
  std::vector<int> devices = {};     // each GPU's CUDA id, in pipeline order (the messages name them)
  bool by_count = false;        // --resident N: equal layer counts (split_layers)
  std::vector<uint64_t> vram = {};   // --vram-budget, one per GPU; empty: each GPU's free memory below
  std::vector<uint64_t> free = {};   // each GPU's free bytes (cudaMemGetInfo) when vram is empty
  uint64_t kept_back = 0;       // of each GPU's free bytes, what its executor keeps (vram_kept_back)
  uint64_t first_globals = 0;   // the embeddings, on the first GPU
  uint64_t last_globals = 0;    // the output norm and head (the embeddings again when tied), on the last
  uint64_t ram = 0;             // --ram-budget, all GPUs' (split evenly)
  uint64_t kv_per_layer = 0;    // a layer's KV cache in VRAM (0: in host memory)
};
struct GpuSplit {
  std::vector<LayerRange> ranges;
  std::vector<uint64_t> vram;  // each GPU's VRAM budget the split was sized by (by_count: none)
  std::string rule;            // how: "the budgets", "each GPU's free memory" or "equal layer counts"
};
// The one decision of the split: by the budgets where given; else by each GPU's free memory less what
// its executor keeps back and the global weights it holds (its executor then plans its range by what it
// has free once started); equal counts with --resident N. Throws std::invalid_argument naming the GPU
// when one would hold no layer: its budget, or its free memory past what it keeps back, holds not even
// one layer's KV cache; and split_by_budgets' refusals.
GpuSplit split_gpus(const std::vector<LayerBytes>& all, const SplitInputs& in);

// The plan of `r`'s layers alone (layer i of the result is layer r.begin + i of the model): by the
// budgets over those layers, or (`resident` given) the model's first `resident` layers whole in VRAM,
// those of them in r, the rest streamed: --resident N keeps its one-GPU meaning.
ResidencyPlan plan_range(const std::vector<LayerBytes>& all, LayerRange r, const Budgets& b, const KvPlan& kv = {});
ResidencyPlan plan_range_first(const std::vector<LayerBytes>& all, LayerRange r, uint32_t resident);
// A range's plan as a plan of the whole model (`n_layer` layers): the other GPUs' layers hold no bytes
// here and nothing of them is placed, read or fetched (VRAM with no bytes; whoever runs the range
// skips them). What the executor of one range indexes by model layer.
ResidencyPlan range_in_model(const ResidencyPlan& part, LayerRange r, uint32_t n_layer);
// The whole model's plan from the GPUs' plans in layer order (the totals of every GPU).
ResidencyPlan join_plans(const std::vector<ResidencyPlan>& parts);

// What one GPU holds, as the tool prints it and writes it to the JSON.
struct GpuShare {
  uint32_t gpu = 0;  // its CUDA device id (the list is in pipeline order)
  LayerRange layers;
  ResidencyPlan plan;         // of its layers alone (plan_range)
  uint64_t vram_budget = 0;   // the budget its plan was made with (0: --resident N)
  uint64_t resident_bytes = 0;  // weights it read into GPU memory at start (its layers, embeddings or head)
  // MoE, its own layers' fetches: experts routed and found in the cache; what its prefetches read, and
  // of that, what the next fetch used or not; the one-token-lag counters (expert_lag.h).
  uint64_t experts_requested = 0, expert_hits = 0, prefetch_reads = 0, prefetch_hits = 0, prefetch_wasted = 0;
  LagCounts lag;
  std::string device;  // the namespace it streams from (its controller's name)
  uint32_t stream_slots = 0;  // its streaming slots (stream_slots.h; 0: it streams nothing, or not known)
  uint64_t slot_bytes = 0;    // one slot's pinned host bytes
  uint64_t expert_bytes_read = 0;  // what its own layers' expert fetches read (its drive's, with a drive per GPU)
};
struct ExecStats;
// GPU `gpu`'s share from its executor's stats (the JSON's and the table's entry), of layers r.
GpuShare gpu_share(const ExecStats& s, int gpu, LayerRange r);
// The GPUs' stats (per[g]: GPU g's executor, of layers ranges[g]) as one executor's: counts, bytes, times
// and the MoE fetch, prefetch and lag counters summed (per-layer stalls element by element; the lag's
// tokens are the most any GPU compared, each GPU comparing the same tokens at its own layers), the plans
// joined, the option echoes and load checks the first fetching GPU's (else GPU 0's), each GPU's share in gpus.
ExecStats sum_gpu_stats(const std::vector<ExecStats>& per, const std::vector<LayerRange>& ranges);

// The I/O floor of a token over the GPUs' plans, in seconds (residency_plan.h's rule per GPU): each GPU
// has a host link of its own (link bytes / h2d each); the NVMe bytes of all of them cross one drive
// (`drive_per_gpu` false: their sum / the drive's rate) or each GPU's its own drive (the most of any GPU,
// and at least turns_floor_seconds). The GPUs' stages overlap their reads, so the slowest bounds the
// token. Of one GPU: its plan's bound.
double gpus_bound_seconds(const std::vector<GpuShare>& g, double drive_bytes_per_s, double h2d_bytes_per_s, bool drive_per_gpu);

// The pipeline's floor with a drive per GPU, in seconds: one sequence's pass runs the GPUs' ranges in
// turn, and during the other GPUs' turns a GPU's drive reads ahead only into its streaming slots (at most
// its `stream_slots` largest streamed dense parts); the rest of its streamed dense bytes is read in its
// own turn. The turns do not overlap, so a token takes at least the sum over the GPUs of those bytes /
// the drive's rate. 0 where every GPU's slots hold its streamed layers (auto's aim, stream_slots.h). A
// GPU whose slots are not known (0) adds nothing; MoE experts fetched after routing are not counted (a
// prefetch may read them in the other turns).
double turns_floor_seconds(const std::vector<GpuShare>& g, double drive_bytes_per_s);

std::string gpus_table(const std::vector<GpuShare>& g);
std::string gpus_json(const std::vector<GpuShare>& g);

}  // namespace gpunvme::llm
