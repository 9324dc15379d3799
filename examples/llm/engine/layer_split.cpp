#include "examples/llm/engine/layer_split.h"

#include <cstdio>
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

}  // namespace

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
