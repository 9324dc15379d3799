#include "examples/llm/engine/residency_plan.h"

#include <algorithm>
#include <cstdio>
#include <stdexcept>

#include "examples/llm/compute/kv_cache_shape.h"
#include "host/text/escape.h"
#include "host/text/human_bytes.h"

namespace gpunvme::llm {
namespace {

// k of the candidates, spread evenly: candidate (i + 1/2) m / k for i < k.
std::vector<uint32_t> spread(const std::vector<uint32_t>& candidates, size_t k) {
  std::vector<uint32_t> out;
  const size_t m = candidates.size();
  for (size_t i = 0; i < k; ++i) out.push_back(candidates[(2 * i + 1) * m / (2 * k)]);
  return out;
}

// The most candidates, spread evenly, whose `cost` fits `budget`; they are removed from `candidates`.
template <class Cost>
std::vector<uint32_t> take_spread(std::vector<uint32_t>& candidates, uint64_t budget, Cost cost) {
  for (size_t k = candidates.size(); k > 0; --k) {
    std::vector<uint32_t> pick = spread(candidates, k);
    uint64_t sum = 0;
    for (uint32_t i : pick) sum += cost(i);
    if (sum > budget) continue;
    std::erase_if(candidates, [&](uint32_t i) { return std::find(pick.begin(), pick.end(), i) != pick.end(); });
    return pick;
  }
  return {};
}

uint64_t sum_dense(const std::vector<LayerBytes>& b, const std::vector<uint32_t>& ids) {
  uint64_t s = 0;
  for (uint32_t i : ids) s += b[i].dense;
  return s;
}

// "0-3,8,10-12"
std::string ranges(const std::vector<uint32_t>& ids) {
  std::string s;
  for (size_t i = 0; i < ids.size();) {
    size_t j = i;
    while (j + 1 < ids.size() && ids[j + 1] == ids[j] + 1) ++j;
    s += (s.empty() ? "" : ",") + std::to_string(ids[i]) + (j > i ? "-" + std::to_string(ids[j]) : "");
    i = j + 1;
  }
  return s.empty() ? "-" : s;
}

std::vector<uint32_t> layers_in(const ResidencyPlan& p, Tier t) {
  std::vector<uint32_t> ids;
  for (uint32_t i = 0; i < p.layers.size(); ++i)
    if (p.layers[i].dense == t) ids.push_back(i);
  return ids;
}

// Routed-expert bytes the fetcher reads (layers whose experts are not resident).
uint64_t fetched_expert_bytes(const ResidencyPlan& p) {
  uint64_t s = 0;
  for (size_t i = 0; i < p.layers.size(); ++i)
    if (!p.layers[i].experts_in_vram) s += p.bytes[i].experts;
  return s;
}

void check(const std::vector<LayerBytes>& layers) {
  if (layers.empty()) throw std::invalid_argument("residency plan: the model has no layers");
  for (const LayerBytes& l : layers)
    if (l.experts && (l.n_expert == 0 || l.n_used == 0 || l.n_used > l.n_expert))
      throw std::invalid_argument("residency plan: a MoE layer needs 0 < experts used <= experts");
}

}  // namespace

const char* tier_name(Tier t) {
  switch (t) {
    case Tier::kVram: return "VRAM";
    case Tier::kRam: return "RAM";
    case Tier::kNvme: return "NVMe";
  }
  return "?";
}

ResidencyPlan plan_residency(const std::vector<LayerBytes>& layers, const Budgets& budgets, const KvPlan& kv) {
  check(layers);
  if (!kv.host && kv.bytes > budgets.vram)
    throw std::invalid_argument(kv_does_not_fit(kv.slots, kv.ctx, kv.bytes, false, "the VRAM budget is " + text::human_bytes(double(budgets.vram))));
  Budgets b = budgets;
  if (!kv.host) b.vram -= kv.bytes;  // the cache first: a pass cannot run without it
  ResidencyPlan p;
  p.bytes = layers;
  p.layers.resize(layers.size());
  p.rule = "budgets";
  p.kv = kv;
  p.vram_budget = budgets.vram;
  std::vector<uint32_t> rest(layers.size());
  for (uint32_t i = 0; i < rest.size(); ++i) rest[i] = i;
  // 1. VRAM: dense parts (1 byte of traffic per byte), then whole layers' experts (k/n).
  const std::vector<uint32_t> vram = take_spread(rest, b.vram, [&](uint32_t i) { return layers[i].dense; });
  for (uint32_t i : vram) p.layers[i].dense = Tier::kVram;
  if (rest.empty()) {
    std::vector<uint32_t> with_experts;
    for (uint32_t i : vram)
      if (layers[i].experts) with_experts.push_back(i);
    const uint64_t left = b.vram - sum_dense(layers, vram);
    for (uint32_t i : take_spread(with_experts, left, [&](uint32_t j) { return layers[j].experts; })) p.layers[i].experts_in_vram = true;
  }
  for (size_t i = 0; i < layers.size(); ++i)
    if (!layers[i].experts) p.layers[i].experts_in_vram = p.layers[i].dense == Tier::kVram;  // nothing to fetch
  // 2. RAM: the remaining dense parts, then the expert cache.
  const std::vector<uint32_t> ram = take_spread(rest, b.ram, [&](uint32_t i) { return layers[i].dense; });
  for (uint32_t i : ram) p.layers[i].dense = Tier::kRam;
  if (p.any_fetched_experts()) {
    // Less than two fetches' worth is no cache (each fetch would evict the last; the fetcher also needs
    // one fetch's experts, page-aligned, to fit): the rest of RAM then stays unused.
    uint64_t fetch = 0;
    for (const LayerBytes& l : layers)
      if (l.experts) fetch = std::max(fetch, l.experts / l.n_expert * l.n_used);
    p.expert_cache_bytes = std::min(b.ram - sum_dense(layers, ram), fetched_expert_bytes(p));
    if (p.expert_cache_bytes < 2 * fetch) p.expert_cache_bytes = 0;
  }
  return p;
}

uint32_t auto_kv_slots(const std::vector<LayerBytes>& layers, uint64_t vram_budget, uint64_t slot_bytes, uint32_t n_ctx, uint32_t cap) {
  if (slot_bytes == 0 || cap == 0) throw std::invalid_argument("auto KV slots: a slot of 0 bytes, or a cap of 0");
  if (slot_bytes > vram_budget)
    throw std::invalid_argument(kv_does_not_fit(1, n_ctx, slot_bytes, false, "the VRAM budget is " + text::human_bytes(double(vram_budget)) +
                                                                              " (--max-seqs auto sizes the cache from it)"));
  uint64_t model = 0;
  for (const LayerBytes& l : layers) model += l.dense + l.experts;
  const uint64_t share = std::max(vram_budget > model ? vram_budget - model : 0, vram_budget / 4);
  return uint32_t(std::clamp<uint64_t>(share / slot_bytes, 1, cap));
}

KvPlan plan_kv(const ModelConfig& c, const std::vector<LayerBytes>& layers, uint32_t n_ctx, uint32_t slots, bool host,
               uint64_t vram_budget, uint32_t cap) {
  if (!slots && host)
    throw std::invalid_argument("--max-seqs auto sizes the KV cache from the VRAM budget: with the cache in pinned host memory "
                                "(--kv-host) give a count");
  const uint64_t slot = kv_slot_bytes(c, uint32_t(layers.size()), n_ctx);
  KvPlan kv{slots ? slots : auto_kv_slots(layers, vram_budget, slot, n_ctx, cap), n_ctx, 0, host, slots == 0};
  kv.bytes = kv.slots * slot;
  if (!host && kv.bytes > vram_budget)
    throw std::invalid_argument(kv_does_not_fit(kv.slots, n_ctx, kv.bytes, false, "the VRAM budget is " + text::human_bytes(double(vram_budget))));
  return kv;
}

ResidencyPlan plan_first_layers(const std::vector<LayerBytes>& layers, uint32_t n) {
  check(layers);
  ResidencyPlan p;
  p.bytes = layers;
  p.layers.resize(layers.size());
  p.rule = "--resident " + std::to_string(n);
  for (uint32_t i = 0; i < layers.size() && i < n; ++i) p.layers[i] = {Tier::kVram, true};
  return p;
}

uint32_t ResidencyPlan::count(Tier t) const { return uint32_t(layers_in(*this, t).size()); }

uint64_t ResidencyPlan::placed_bytes(Tier t) const {
  uint64_t s = t == Tier::kRam ? expert_cache_bytes : 0;
  for (size_t i = 0; i < layers.size(); ++i) {
    if (layers[i].dense == t) s += bytes[i].dense;
    if (t == Tier::kVram && layers[i].experts_in_vram) s += bytes[i].experts;
    if (t == Tier::kNvme && !layers[i].experts_in_vram) s += bytes[i].experts;
  }
  return s;
}

namespace {

// The share of the fetched experts the cache holds (uniform router).
double cached_share(const ResidencyPlan& p) {
  const uint64_t fetched = fetched_expert_bytes(p);
  return fetched ? double(std::min(p.expert_cache_bytes, fetched)) / double(fetched) : 0;
}

// Expected routed-expert bytes per token of the fetched layers.
double routed_bytes(const ResidencyPlan& p) {
  double s = 0;
  for (size_t i = 0; i < p.layers.size(); ++i)
    if (!p.layers[i].experts_in_vram && p.bytes[i].experts)
      s += double(p.bytes[i].experts) * p.bytes[i].n_used / p.bytes[i].n_expert;
  return s;
}

double dense_in(const ResidencyPlan& p, Tier t) {
  double s = 0;
  for (size_t i = 0; i < p.layers.size(); ++i)
    if (p.layers[i].dense == t) s += double(p.bytes[i].dense);
  return s;
}

}  // namespace

double ResidencyPlan::ram_bytes_per_token() const { return dense_in(*this, Tier::kRam) + cached_share(*this) * routed_bytes(*this); }

double ResidencyPlan::nvme_bytes_per_token() const {
  return dense_in(*this, Tier::kNvme) + (1 - cached_share(*this)) * routed_bytes(*this);
}

double io_bound_seconds(double nvme_bytes, double link_bytes, double drive_bytes_per_s, double h2d_bytes_per_s) {
  const double nvme = drive_bytes_per_s > 0 ? nvme_bytes / drive_bytes_per_s : 0;
  const double link = h2d_bytes_per_s > 0 ? link_bytes / h2d_bytes_per_s : 0;
  return std::max(nvme, link);
}

double ResidencyPlan::bound_seconds(double drive_bytes_per_s, double h2d_bytes_per_s) const {
  return io_bound_seconds(nvme_bytes_per_token(), link_bytes_per_token(), drive_bytes_per_s, h2d_bytes_per_s);
}

bool ResidencyPlan::any_fetched_experts() const {
  for (size_t i = 0; i < layers.size(); ++i)
    if (bytes[i].experts && !layers[i].experts_in_vram) return true;
  return false;
}

std::string plan_table(const ResidencyPlan& p) {
  std::string s = "residency plan (" + p.rule + "):\n  tier  layers  stored      per token   which layers\n";
  char b[160];
  for (Tier t : {Tier::kVram, Tier::kRam, Tier::kNvme}) {
    const double per_token = t == Tier::kVram ? 0 : t == Tier::kRam ? p.ram_bytes_per_token() : p.nvme_bytes_per_token();
    const std::vector<uint32_t> ids = layers_in(p, t);
    std::snprintf(b, sizeof b, "  %-5s %6zu  %-11s %-11s ", tier_name(t), ids.size(), text::human_bytes(double(p.placed_bytes(t))).c_str(),
                  text::human_bytes(per_token).c_str());
    s += b + ranges(ids) + "\n";
  }
  if (p.kv.slots) {
    s += "  KV cache: " + std::to_string(p.kv.slots) + " sequence slot(s)" + (p.kv.auto_slots ? " (auto: from the VRAM budget)" : "") + " x " +
         std::to_string(p.kv.ctx) + " positions, " + text::human_bytes(double(p.kv.bytes)) +
         (p.kv.host ? " in pinned host memory" : " in VRAM");
    if (p.vram_budget)
      s += std::string(" (of the VRAM budget ") + text::human_bytes(double(p.vram_budget)) + ", layers get " +
           text::human_bytes(double(p.vram_budget - (p.kv.host ? 0 : p.kv.bytes))) + ")";
    s += "\n";
  }
  if (p.any_fetched_experts() || p.expert_cache_bytes) {
    std::vector<uint32_t> whole;
    for (uint32_t i = 0; i < p.layers.size(); ++i)
      if (p.layers[i].experts_in_vram && p.bytes[i].experts) whole.push_back(i);
    s += "  MoE experts: whole layers in VRAM " + ranges(whole) + "; LRU cache in pinned RAM " +
         text::human_bytes(double(p.expert_cache_bytes)) + "; the rest read from NVMe after routing\n";
  }
  return s;
}

std::string plan_json(const ResidencyPlan& p) {
  std::string tiers, experts, dense_bytes, expert_bytes;
  for (size_t i = 0; i < p.layers.size(); ++i) {
    const std::string sep = i ? "," : "";
    tiers += sep + "\"" + tier_name(p.layers[i].dense) + "\"";
    experts += sep + (p.layers[i].experts_in_vram ? "true" : "false");
    dense_bytes += sep + std::to_string(p.bytes[i].dense);
    expert_bytes += sep + std::to_string(p.bytes[i].experts);
  }
  char b[512];
  std::snprintf(b, sizeof b,
                "{\"rule\":%s,\"vram_bytes\":%llu,\"ram_bytes\":%llu,\"nvme_bytes\":%llu,\"expert_cache_bytes\":%llu,"
                "\"ram_bytes_per_token\":%.0f,\"nvme_bytes_per_token\":%.0f,\"link_bytes_per_token\":%.0f,",
                text::json_string(p.rule).c_str(), (unsigned long long)p.placed_bytes(Tier::kVram),
                (unsigned long long)p.placed_bytes(Tier::kRam), (unsigned long long)p.placed_bytes(Tier::kNvme),
                (unsigned long long)p.expert_cache_bytes, p.ram_bytes_per_token(), p.nvme_bytes_per_token(),
                p.link_bytes_per_token());
  const std::string kv = !p.kv.slots ? std::string("null")
                                      : "{\"slots\":" + std::to_string(p.kv.slots) + ",\"ctx\":" + std::to_string(p.kv.ctx) +
                                            ",\"bytes\":" + std::to_string(p.kv.bytes) + ",\"where\":\"" + (p.kv.host ? "host" : "VRAM") +
                                            "\",\"auto\":" + (p.kv.auto_slots ? "true" : "false") + "}";
  return b + ("\"kv\":" + kv + ",\"vram_budget_bytes\":" + std::to_string(p.vram_budget) + ",\"layer_tiers\":[" + tiers + "],\"layer_experts_in_vram\":[" + experts + "],\"layer_dense_bytes\":[" +
               dense_bytes + "],\"layer_expert_bytes\":[" + expert_bytes + "]}");
}

}  // namespace gpunvme::llm
