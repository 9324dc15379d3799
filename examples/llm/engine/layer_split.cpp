#include "examples/llm/engine/layer_split.h"

#include <algorithm>
#include <cstdio>
#include <functional>
#include <limits>
#include <optional>
#include <stdexcept>

#include "examples/llm/engine/executor.h"
#include "host/text/escape.h"
#include "host/text/human_bytes.h"

namespace gpunvme::llm {
namespace {

// The part of a whole model's plan (or bytes) in r.
ResidencyPlan slice(const ResidencyPlan& p, LayerRange r) {
  ResidencyPlan s;
  s.layers.assign(p.layers.begin() + r.begin, p.layers.begin() + r.end);
  s.bytes.assign(p.bytes.begin() + r.begin, p.bytes.begin() + r.end);
  s.expert_cache_bytes = p.expert_cache_bytes;
  s.rule = p.rule;
  return s;
}

void check_range(const std::vector<LayerBytes>& all, LayerRange r) {
  if (r.begin >= r.end || r.end > all.size())
    throw std::invalid_argument("layer range " + std::to_string(r.begin) + ".." + std::to_string(r.end) + " of a model of " +
                                std::to_string(all.size()) + " layers");
}

constexpr double kNoFit = std::numeric_limits<double>::infinity();  // a range whose KV cache its budget does not hold

// Per-token link bytes of GPU g running layers [a, b) with its budgets less the range's KV cache, each
// computed once; kNoFit where the budget does not hold that cache.
class RangeCost {
 public:
  RangeCost(const std::vector<LayerBytes>& all, const std::vector<Budgets>& b, uint64_t kv_per_layer)
      : all_(all), b_(b), kv_(kv_per_layer), n_(uint32_t(all.size())), memo_(b.size() * (n_ + 1) * (n_ + 1), -1) {}
  double operator()(uint32_t g, uint32_t a, uint32_t b) {
    double& c = memo_[(size_t(g) * (n_ + 1) + a) * (n_ + 1) + b];
    if (c < 0) {
      const uint64_t kv = kv_ * (b - a);
      c = kv > b_[g].vram ? kNoFit : plan_range(all_, {a, b}, {.vram = b_[g].vram - kv, .ram = b_[g].ram}).link_bytes_per_token();
    }
    return c;
  }

 private:
  const std::vector<LayerBytes>& all_;
  const std::vector<Budgets>& b_;
  uint64_t kv_;
  uint32_t n_;
  std::vector<double> memo_;
};

double largest(RangeCost& cost, const std::vector<LayerRange>& r) {
  double t = 0;
  for (uint32_t g = 0; g < r.size(); ++g) t = std::max(t, cost(g, r[g].begin, r[g].end));
  return t;
}

// The split whose ranges each cost at most t and hold at most k layers, or none. Greedy, each GPU as
// many layers as the limits allow (leaving one for each GPU after it): a range's cost grows with its
// layers, so taking fewer never lets a later GPU fit where the greedy split did not.
std::optional<std::vector<LayerRange>> fit(RangeCost& cost, uint32_t n_layer, uint32_t gpus, double t, uint32_t k) {
  std::vector<LayerRange> r;
  uint32_t at = 0;
  for (uint32_t g = 0; g < gpus; ++g) {
    const uint32_t last_end = n_layer - (gpus - 1 - g);  // the most this GPU may end at
    uint32_t end = g + 1 == gpus ? n_layer : at + 1;
    if (end - at > k || cost(g, at, end) > t) return std::nullopt;
    while (end < last_end && end + 1 - at <= k && cost(g, at, end + 1) <= t) ++end;
    r.push_back({at, end});
    at = end;
  }
  return r;
}

}  // namespace

std::vector<uint64_t> budgets_per_gpu(const std::vector<uint64_t>& list, uint32_t gpus) {
  if (list.size() == 1) return std::vector<uint64_t>(gpus, list[0]);
  if (list.size() != gpus)
    throw std::invalid_argument("--vram-budget has " + std::to_string(list.size()) + " values for --gpus " + std::to_string(gpus) +
                                ": give one (every GPU's) or " + std::to_string(gpus) + " (one per GPU, in order, e.g. 22G,40G)");
  return list;
}

std::vector<LayerRange> split_by_budgets(const std::vector<LayerBytes>& all, const std::vector<Budgets>& per_gpu,
                                         uint64_t kv_per_layer) {
  const uint32_t n = uint32_t(all.size()), gpus = uint32_t(per_gpu.size());
  std::vector<LayerRange> even = split_layers(n, gpus);  // its refusals
  RangeCost cost(all, per_gpu, kv_per_layer);
  // A split whose every range's KV cache fits (the most layers on each GPU in turn), or none does.
  const std::optional<std::vector<LayerRange>> any = fit(cost, n, gpus, std::numeric_limits<double>::max(), n);
  if (!any)
    throw std::invalid_argument("the VRAM budgets hold the KV cache of fewer layers than the model's " + std::to_string(n) +
                                " (each layer's: " + text::human_bytes(double(kv_per_layer)) +
                                "): give larger budgets, a shorter --ctx, or more GPUs");
  // The least largest cost: bisection between 0 and that split's (or the even split's, the lower).
  const double even_cost = largest(cost, even);
  double lo = 0, hi = std::min(largest(cost, *any), even_cost);
  if (fit(cost, n, gpus, 0, n)) hi = 0;
  for (int i = 0; i < 200 && hi > 0 && hi - lo > hi * 1e-12; ++i) {
    const double mid = lo + (hi - lo) / 2;
    (fit(cost, n, gpus, mid, n) ? hi : lo) = mid;
  }
  std::vector<LayerRange> best = *fit(cost, n, gpus, hi, n);
  const double t = largest(cost, best);  // the split's own largest cost (hi may lie above it by the bisection's last step)
  // The even split where it reaches that cost: no range can have fewer layers than its largest.
  if (even_cost <= t) return even;
  // Else the fewest layers in the largest range at that cost.
  uint32_t klo = (n + gpus - 1) / gpus, khi = n;
  while (klo < khi) {
    const uint32_t k = klo + (khi - klo) / 2;
    if (std::optional<std::vector<LayerRange>> r = fit(cost, n, gpus, t, k)) {
      best = std::move(*r);
      khi = k;
    } else {
      klo = k + 1;
    }
  }
  return best;
}

GpuSplit split_gpus(const std::vector<LayerBytes>& all, const SplitInputs& in) {
  const uint32_t gpus = uint32_t(in.devices.size()), n = uint32_t(all.size());
  const auto name = [&](uint32_t g) { return "GPU " + std::to_string(in.devices[g]); };
  if (gpus > n)
    throw std::invalid_argument(std::to_string(gpus) + " GPUs for a model of " + std::to_string(n) + " layers: " + name(n) +
                                (gpus > n + 1 ? " and those after it" : "") + " would hold none: use --gpus " + std::to_string(n) +
                                " or fewer (or as many ids)");
  if (in.by_count) return {split_layers(n, gpus), {}, "equal layer counts"};
  const auto hb = [](uint64_t b) { return text::human_bytes(double(b)); };
  GpuSplit s;
  if (!in.vram.empty()) {
    if (in.vram.size() != gpus) throw std::invalid_argument("split_gpus: " + std::to_string(in.vram.size()) + " budgets for " + std::to_string(gpus) + " GPUs");
    s.vram = in.vram, s.rule = "the budgets";
    for (uint32_t g = 0; g < gpus; ++g)
      if (s.vram[g] < in.kv_per_layer)
        throw std::invalid_argument("--vram-budget gives " + name(g) + " " + hb(s.vram[g]) + ", less than one layer's KV cache (" +
                                    hb(in.kv_per_layer) + "): it would hold no layer: give it more, or leave it out of --gpus");
  } else {
    if (in.free.size() != gpus) throw std::invalid_argument("split_gpus: " + std::to_string(in.free.size()) + " free sizes for " + std::to_string(gpus) + " GPUs");
    s.rule = "each GPU's free memory";
    for (uint32_t g = 0; g < gpus; ++g) {
      const uint64_t globals = (g == 0 ? in.first_globals : 0) + (g + 1 == gpus ? in.last_globals : 0);
      const uint64_t need = in.kept_back + globals + in.kv_per_layer;
      if (in.free[g] < need)
        throw std::invalid_argument(name(g) + " has " + hb(in.free[g]) + " free, less than the " + hb(need) + " a layer needs there (" +
                                    hb(in.kept_back) + " its executor keeps back" + (globals ? ", " + hb(globals) + " of global weights" : "") +
                                    ", " + hb(in.kv_per_layer) + " of one layer's KV cache): it would hold no layer: "
                                    "free memory on it, or leave it out of --gpus");
      s.vram.push_back(in.free[g] - in.kept_back - globals);
    }
  }
  std::vector<Budgets> per;
  for (uint64_t v : s.vram) per.push_back({.vram = v, .ram = in.ram / gpus});
  s.ranges = split_by_budgets(all, per, in.kv_per_layer);
  return s;
}

std::vector<LayerRange> split_layers(uint32_t n_layer, uint32_t gpus) {
  if (gpus == 0) throw std::invalid_argument("--gpus 0: give 1 or more");
  if (gpus > n_layer)
    throw std::invalid_argument("--gpus " + std::to_string(gpus) + ": the model has " + std::to_string(n_layer) +
                                " layers, so a GPU would hold none: use --gpus " + std::to_string(n_layer) + " or fewer");
  std::vector<LayerRange> r;
  uint32_t at = 0;
  for (uint32_t g = 0; g < gpus; ++g) {
    const uint32_t n = n_layer / gpus + (g < n_layer % gpus ? 1 : 0);
    r.push_back({at, at + n});
    at += n;
  }
  return r;
}

ResidencyPlan plan_range(const std::vector<LayerBytes>& all, LayerRange r, const Budgets& b, const KvPlan& kv) {
  check_range(all, r);
  return plan_residency(std::vector<LayerBytes>(all.begin() + r.begin, all.begin() + r.end), b, kv);
}

ResidencyPlan plan_range_first(const std::vector<LayerBytes>& all, LayerRange r, uint32_t resident) {
  check_range(all, r);
  return slice(plan_first_layers(all, resident), r);
}

ResidencyPlan range_in_model(const ResidencyPlan& part, LayerRange r, uint32_t n_layer) {
  if (r.end > n_layer || part.layers.size() != r.size()) throw std::invalid_argument("range_in_model: the plan is not of the range");
  ResidencyPlan p;
  p.layers.assign(n_layer, LayerPlacement{Tier::kVram, true});
  p.bytes.assign(n_layer, LayerBytes{});
  for (uint32_t i = 0; i < r.size(); ++i) {
    p.layers[r.begin + i] = part.layers[i];
    p.bytes[r.begin + i] = part.bytes[i];
  }
  p.expert_cache_bytes = part.expert_cache_bytes;
  p.rule = part.rule;
  p.kv = part.kv;
  p.vram_budget = part.vram_budget;
  return p;
}

ResidencyPlan join_plans(const std::vector<ResidencyPlan>& parts) {
  ResidencyPlan p;
  for (const ResidencyPlan& q : parts) {
    p.layers.insert(p.layers.end(), q.layers.begin(), q.layers.end());
    p.bytes.insert(p.bytes.end(), q.bytes.begin(), q.bytes.end());
    p.expert_cache_bytes += q.expert_cache_bytes;
    if (p.rule.empty()) p.rule = q.rule, p.kv = q.kv;
    else p.kv.bytes += q.kv.bytes;  // each GPU caches its own layers' K and V, of the same slots
    p.vram_budget += q.vram_budget;
  }
  return p;
}

namespace {

void add(std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() < b.size()) a.resize(b.size());
  for (size_t i = 0; i < b.size(); ++i) a[i] += b[i];
}

void add(stream::PrefetchMetrics& a, const stream::PrefetchMetrics& b) {
  a.prefetches += b.prefetches, a.reads += b.reads, a.bytes_read += b.bytes_read, a.hits += b.hits, a.wasted += b.wasted;
  a.wasted_bytes += b.wasted_bytes, a.cut += b.cut, a.cut_bytes += b.cut_bytes, a.unsettled += b.unsettled;
  add(a.stall_seconds, b.stall_seconds), add(a.read_seconds, b.read_seconds), add(a.tail_seconds, b.tail_seconds);
}

void add(stream::FetcherMetrics& a, const stream::FetcherMetrics& b) {
  a.tokens += b.tokens, a.requested += b.requested, a.faults += b.faults, a.hits += b.hits, a.bytes_read += b.bytes_read;
  a.last_faults += b.last_faults, a.steady_tokens += b.steady_tokens, a.steady_faults += b.steady_faults;
}

void add(LagCounts& a, const LagCounts& b) {
  a.tokens = std::max(a.tokens, b.tokens);
  a.routed += b.routed, a.predicted_hits += b.predicted_hits, a.wasted += b.wasted, a.wasted_bytes += b.wasted_bytes;
}

}  // namespace

GpuShare gpu_share(const ExecStats& p, int gpu, LayerRange r) {
  return {uint32_t(gpu), r, p.plan, p.vram_budget, p.resident_bytes, p.experts.requested, p.experts.hits, p.prefetch.reads,
          p.prefetch.hits, p.prefetch.wasted, p.lag, "", p.stream_slots, p.slot_bytes, p.experts.bytes_read};
}

ExecStats sum_gpu_stats(const std::vector<ExecStats>& per, const std::vector<LayerRange>& ranges) {
  if (per.empty() || per.size() != ranges.size()) throw std::invalid_argument("sum_gpu_stats: one stats and range per GPU");
  // The option echoes (and the load checks) of the first GPU that fetched experts, else GPU 0's: a GPU
  // whose experts are all in VRAM reports no prefetch whatever the options. The sums start from nothing.
  const auto fetching = std::find_if(per.begin(), per.end(), [](const ExecStats& p) { return p.has_experts; });
  ExecStats s = fetching != per.end() ? *fetching : per.front();
  s.streamed_bytes = 0, s.io_seconds = 0, s.stall_seconds = 0, s.resident_bytes = 0, s.bytes_per_step = 0;
  s.ram_bytes = 0, s.ram_bytes_per_step = 0, s.ram_copied_bytes = 0, s.resident_layers = 0, s.ram_layers = 0, s.streamed_layers = 0;
  s.recovery = {}, s.experts = {}, s.prefetch = {}, s.lag = {}, s.has_experts = false, s.pregate_passes = 0;
  s.stream_slots = 0, s.slot_bytes = 0;  // each GPU's own, in gpus
  s.gpus.clear();
  std::vector<ResidencyPlan> plans;
  for (uint32_t g = 0; g < per.size(); ++g) {
    const ExecStats& p = per[g];
    plans.push_back(p.plan);
    s.gpus.push_back(gpu_share(p, int(g), ranges[g]));
    s.streamed_bytes += p.streamed_bytes, s.io_seconds += p.io_seconds, s.stall_seconds += p.stall_seconds;
    s.resident_bytes += p.resident_bytes, s.bytes_per_step += p.bytes_per_step;
    s.ram_bytes += p.ram_bytes, s.ram_bytes_per_step += p.ram_bytes_per_step, s.ram_copied_bytes += p.ram_copied_bytes;
    s.resident_layers += p.resident_layers, s.ram_layers += p.ram_layers, s.streamed_layers += p.streamed_layers;
    s.recovery += p.recovery;
    s.has_experts = s.has_experts || p.has_experts;
    add(s.experts, p.experts), add(s.prefetch, p.prefetch), add(s.lag, p.lag);
    s.pregate_passes += p.pregate_passes;
  }
  s.plan = join_plans(plans);
  return s;
}

double gpus_bound_seconds(const std::vector<GpuShare>& g, double drive_bytes_per_s, double h2d_bytes_per_s, bool drive_per_gpu) {
  double worst = 0, nvme = 0;
  for (const GpuShare& x : g) {
    const double n = x.plan.nvme_bytes_per_token();
    nvme += n;
    worst = std::max(worst, io_bound_seconds(drive_per_gpu ? n : 0, x.plan.link_bytes_per_token(), drive_bytes_per_s, h2d_bytes_per_s));
  }
  return drive_per_gpu ? std::max(worst, turns_floor_seconds(g, drive_bytes_per_s))
                       : std::max(worst, io_bound_seconds(nvme, 0, drive_bytes_per_s, h2d_bytes_per_s));
}

double turns_floor_seconds(const std::vector<GpuShare>& g, double drive_bytes_per_s) {
  if (drive_bytes_per_s <= 0) return 0;
  double own_turns = 0;
  for (const GpuShare& x : g) {
    if (!x.stream_slots) continue;
    std::vector<uint64_t> streamed;
    for (size_t i = 0; i < x.plan.layers.size(); ++i)
      if (x.plan.layers[i].dense == Tier::kNvme) streamed.push_back(x.plan.bytes[i].dense);
    std::sort(streamed.begin(), streamed.end(), std::greater<>());
    for (size_t i = x.stream_slots; i < streamed.size(); ++i) own_turns += double(streamed[i]);
  }
  return own_turns / drive_bytes_per_s;
}

std::string gpus_table(const std::vector<GpuShare>& g) {
  std::string s = g.size() == 1 ? std::string("GPU (chosen by id):\n")
                                : "GPUs (" + std::to_string(g.size()) + ", hidden state passed by NCCL send/recv):\n";
  char b[200];
  for (const GpuShare& x : g) {
    std::snprintf(b, sizeof b, "GPU %u: layers %u-%u (its plan numbers them from 0), VRAM budget %s, weights in GPU memory %s",
                  x.gpu, x.layers.begin, x.layers.end - 1, x.vram_budget ? text::human_bytes(double(x.vram_budget)).c_str() : "(--resident)",
                  text::human_bytes(double(x.resident_bytes)).c_str());
    s += b;
    if (x.stream_slots)
      s += ", " + std::to_string(x.stream_slots) + " streaming slot(s) of " + text::human_bytes(double(x.slot_bytes)) + " in pinned host memory";
    s += (x.device.empty() ? std::string() : ", streams from " + text::printable(x.device)) + "\n";
    if (x.experts_requested) {
      std::snprintf(b, sizeof b, "  its experts: %llu routed, %llu cache hits; prefetched %llu (%llu used, %llu wasted)\n",
                    (unsigned long long)x.experts_requested, (unsigned long long)x.expert_hits, (unsigned long long)x.prefetch_reads,
                    (unsigned long long)x.prefetch_hits, (unsigned long long)x.prefetch_wasted);
      s += b;
    }
    s += plan_table(x.plan);
  }
  return s;
}

std::string gpus_json(const std::vector<GpuShare>& g) {
  std::string s = "[";
  for (const GpuShare& x : g) {
    if (s.size() > 1) s += ",";
    s += "{\"gpu\":" + std::to_string(x.gpu) + ",\"first_layer\":" + std::to_string(x.layers.begin) +
         ",\"end_layer\":" + std::to_string(x.layers.end) + ",\"vram_budget\":" + std::to_string(x.vram_budget) +
         ",\"resident_bytes\":" + std::to_string(x.resident_bytes) + ",\"plan\":" + plan_json(x.plan) +
         ",\"experts_requested\":" + std::to_string(x.experts_requested) + ",\"expert_hits\":" + std::to_string(x.expert_hits) +
         ",\"prefetch_reads\":" + std::to_string(x.prefetch_reads) + ",\"prefetch_hits\":" + std::to_string(x.prefetch_hits) +
         ",\"prefetch_wasted\":" + std::to_string(x.prefetch_wasted) + ",\"lag_tokens\":" + std::to_string(x.lag.tokens) +
         ",\"lag_routed\":" + std::to_string(x.lag.routed) + ",\"lag_predicted_hits\":" + std::to_string(x.lag.predicted_hits) +
         ",\"stream_slots\":" + std::to_string(x.stream_slots) + ",\"slot_bytes\":" + std::to_string(x.slot_bytes) +
         ",\"device\":" + text::json_string(x.device) + "}";
  }
  return s + "]";
}

}  // namespace gpunvme::llm
