#include "examples/llm/engine/layer_split.h"

#include <algorithm>
#include <cstdio>
#include <optional>
#include <stdexcept>

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

// Per-token link bytes of GPU g running layers [a, b) with its budgets, each computed once.
class RangeCost {
 public:
  RangeCost(const std::vector<LayerBytes>& all, const std::vector<Budgets>& b)
      : all_(all), b_(b), n_(uint32_t(all.size())), memo_(b.size() * (n_ + 1) * (n_ + 1), -1) {}
  double operator()(uint32_t g, uint32_t a, uint32_t b) {
    double& c = memo_[(size_t(g) * (n_ + 1) + a) * (n_ + 1) + b];
    if (c < 0) c = plan_range(all_, {a, b}, b_[g]).link_bytes_per_token();
    return c;
  }

 private:
  const std::vector<LayerBytes>& all_;
  const std::vector<Budgets>& b_;
  uint32_t n_;
  std::vector<double> memo_;
};

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

std::vector<LayerRange> split_by_budgets(const std::vector<LayerBytes>& all, const std::vector<Budgets>& per_gpu) {
  const uint32_t n = uint32_t(all.size()), gpus = uint32_t(per_gpu.size());
  std::vector<LayerRange> even = split_layers(n, gpus);  // its refusals
  RangeCost cost(all, per_gpu);
  // The least largest cost: bisection between 0 and the even split's, which fits by construction.
  double lo = 0, hi = 0;
  for (uint32_t g = 0; g < gpus; ++g) hi = std::max(hi, cost(g, even[g].begin, even[g].end));
  if (fit(cost, n, gpus, 0, n)) hi = 0;
  for (int i = 0; i < 200 && hi > 0 && hi - lo > hi * 1e-12; ++i) {
    const double mid = lo + (hi - lo) / 2;
    (fit(cost, n, gpus, mid, n) ? hi : lo) = mid;
  }
  std::vector<LayerRange> best = *fit(cost, n, gpus, hi, n);
  double t = 0;  // the split's own largest cost (hi may lie above it by the bisection's last step)
  for (uint32_t g = 0; g < gpus; ++g) t = std::max(t, cost(g, best[g].begin, best[g].end));
  // The even split where it reaches that cost: no range can have fewer layers than its largest.
  double even_cost = 0;
  for (uint32_t g = 0; g < gpus; ++g) even_cost = std::max(even_cost, cost(g, even[g].begin, even[g].end));
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

ResidencyPlan plan_range(const std::vector<LayerBytes>& all, LayerRange r, const Budgets& b) {
  check_range(all, r);
  return plan_residency(std::vector<LayerBytes>(all.begin() + r.begin, all.begin() + r.end), b);
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
  return p;
}

ResidencyPlan join_plans(const std::vector<ResidencyPlan>& parts) {
  ResidencyPlan p;
  for (const ResidencyPlan& q : parts) {
    p.layers.insert(p.layers.end(), q.layers.begin(), q.layers.end());
    p.bytes.insert(p.bytes.end(), q.bytes.begin(), q.bytes.end());
    p.expert_cache_bytes += q.expert_cache_bytes;
    if (p.rule.empty()) p.rule = q.rule;
  }
  return p;
}

std::string gpus_table(const std::vector<GpuShare>& g) {
  std::string s = "GPUs (" + std::to_string(g.size()) + ", hidden state passed by NCCL send/recv):\n";
  char b[200];
  for (const GpuShare& x : g) {
    std::snprintf(b, sizeof b, "GPU %u: layers %u-%u (its plan numbers them from 0), VRAM budget %s, weights in GPU memory %s\n",
                  x.gpu, x.layers.begin, x.layers.end - 1, x.vram_budget ? text::human_bytes(double(x.vram_budget)).c_str() : "(--resident)",
                  text::human_bytes(double(x.resident_bytes)).c_str());
    s += b + plan_table(x.plan);
  }
  return s;
}

std::string gpus_json(const std::vector<GpuShare>& g) {
  std::string s = "[";
  for (const GpuShare& x : g) {
    if (s.size() > 1) s += ",";
    s += "{\"gpu\":" + std::to_string(x.gpu) + ",\"first_layer\":" + std::to_string(x.layers.begin) +
         ",\"end_layer\":" + std::to_string(x.layers.end) + ",\"vram_budget\":" + std::to_string(x.vram_budget) +
         ",\"resident_bytes\":" + std::to_string(x.resident_bytes) + ",\"plan\":" + plan_json(x.plan) + "}";
  }
  return s + "]";
}

}  // namespace gpunvme::llm
