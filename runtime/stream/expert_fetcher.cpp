#include "runtime/stream/expert_fetcher.h"

#include <algorithm>
#include <string>

#include "host/cuda_device.h"
#include "host/error.h"
#include "runtime/stream/layer_streamer.h"

namespace gpunvme::stream {

namespace {
ExpertLayoutSpec layout_spec(const host::Controller& controller, const FetcherOptions& o) {
  const auto& ns = controller.namespace_info(o.nsid);
  ExpertLayoutSpec spec;
  spec.lba_bytes = ns.lba_bytes;
  spec.namespace_blocks = ns.blocks;
  spec.page = controller.page_bytes();
  spec.max_experts_per_fetch = o.max_experts_per_fetch;
  spec.cache_bytes = o.cache_bytes;
  spec.min_cache_experts = o.min_cache_experts;
  return spec;
}
}  // namespace

ExpertFetcher::ExpertFetcher(host::Controller& controller, Submitter& submitter, ExpertCatalog catalog,
                             const FetcherOptions& options)
    : controller_(controller),
      submitter_(submitter),
      catalog_(std::move(catalog)),
      options_(options),
      page_(controller.page_bytes()),
      layout_(catalog_, layout_spec(controller, options_), "expert fetcher"),
      expert_bytes_(layout_.slot_bytes()),
      capacity_(layout_.capacity()),
      cache_(capacity_, layout_.keys()) {
  const auto& ns = controller.namespace_info(options_.nsid);
  geometry_.nsid = options_.nsid;
  geometry_.lba_bytes = ns.lba_bytes;
  geometry_.max_blocks = command_block_limit(controller, options_.nsid, options_.max_command_bytes);
  geometry_.namespace_blocks = ns.blocks;
  host::DmaOptions mem{host::HugePages::kAuto};
  mem.gpu_mapped = options_.gpu_mapped && host::cuda_device_available();
  scratch_ = host::DmaBuffer(controller.transport(), layout_.scratch_bytes(), mem);
  table_ = plan::PrpTable(controller.transport(), scratch_, page_);
}

ExpertFetcher::~ExpertFetcher() {
  // Reads must not land in a freed scratchpad: drain what is still in flight.
  for (size_t i = 0; i < tickets_.size(); ++i) {
    try {
      if (tickets_[i]) submitter_.wait(tickets_[i]);
    } catch (...) {
    }
  }
}

const std::vector<FetchedExpert>& ExpertFetcher::fetch(uint32_t layer, std::span<const uint32_t> experts) {
  wait_all();  // the previous token is over
  const std::vector<uint32_t> sel = select(layer, experts);
  const bool steady = options_.warmup_tokens > 0 ? metrics_.tokens >= options_.warmup_tokens
                                                 : (capacity_ == 0 ? true : cache_.full());
  std::vector<uint64_t> keys(sel.size());
  for (size_t i = 0; i < sel.size(); ++i) keys[i] = key(layer, sel[i]);
  const std::vector<CachePlacement> placement = place(keys);
  build_results(layer, sel, placement);
  issue_reads(keys, placement);
  uint32_t faults = 0;
  for (const CachePlacement& p : placement) faults += p.hit ? 0 : 1;
  count(sel.size(), faults, steady);
  return result_;
}

// Distinct experts in request order; refuses too many and experts with no slices.
std::vector<uint32_t> ExpertFetcher::select(uint32_t layer, std::span<const uint32_t> experts) const {
  std::vector<uint32_t> sel;
  for (uint32_t e : experts)
    if (std::find(sel.begin(), sel.end(), e) == sel.end()) sel.push_back(e);
  if (sel.size() > options_.max_experts_per_fetch)
    throw Error(ErrorKind::kInvalidArgument, "expert fetcher: " + std::to_string(sel.size()) +
                                                 " distinct experts in one fetch; max_experts_per_fetch is " +
                                                 std::to_string(options_.max_experts_per_fetch));
  for (uint32_t e : sel)
    if (catalog_.of(layer, e).empty())
      throw Error(ErrorKind::kInvalidArgument, "expert fetcher: expert " + std::to_string(e) + " of layer " +
                                                   std::to_string(layer) + " has no slices in the model");
  return sel;
}

// Cache slots (LRU policy), or packed positions 0, 1, ... without a cache (every expert a fault).
std::vector<CachePlacement> ExpertFetcher::place(std::span<const uint64_t> keys) const {
  if (capacity_ > 0) return cache_.choose(keys);
  std::vector<CachePlacement> out(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) out[i].slot = uint32_t(i);
  return out;
}

// Results (offsets of every part) and the plans of the faults; changes neither the cache nor the device.
void ExpertFetcher::build_results(uint32_t layer, std::span<const uint32_t> sel,
                                  std::span<const CachePlacement> placement) {
  result_.assign(sel.size(), FetchedExpert{});
  plans_.assign(sel.size(), plan::CommandPlan{});
  tickets_.assign(sel.size(), 0);
  keys_.resize(sel.size());
  for (size_t i = 0; i < sel.size(); ++i) {
    const uint64_t k = key(layer, sel[i]);
    const auto& parts = catalog_.of(layer, sel[i]);
    const uint64_t base = uint64_t(placement[i].slot) * expert_bytes_;
    FetchedExpert& r = result_[i];
    keys_[i] = k;
    r.expert = sel[i];
    r.offset = base;
    r.hit = placement[i].hit;
    r.bytes = layout_.data_end(k);
    for (size_t j = 0; j < parts.size(); ++j) {
      const uint64_t at = base + layout_.part_offset(k, j);
      r.parts.push_back(FetchedPart{parts[j].proj, at + parts[j].extent.byte_in_first, parts[j].extent.byte_length});
      if (!r.hit) plan::append_extent(plans_[i], parts[j].extent, at, geometry_, table_);
    }
  }
}

// Records the placement and starts the faults' reads; an expert whose read never started leaves the cache.
void ExpertFetcher::issue_reads(std::span<const uint64_t> keys, std::span<const CachePlacement> placement) {
  if (capacity_ > 0) cache_.commit(keys, placement);
  size_t i = 0;
  try {
    for (; i < keys.size(); ++i) {
      if (placement[i].hit) continue;
      metrics_.bytes_read += plans_[i].read_bytes;
      tickets_[i] = submitter_.issue(plans_[i].commands);
    }
  } catch (...) {
    for (; i < keys.size(); ++i)
      if (!placement[i].hit) cache_.forget(keys[i]);
    throw;
  }
}

void ExpertFetcher::count(size_t selected, uint32_t faults, bool steady) {
  metrics_.tokens += 1;
  metrics_.requested += selected;
  metrics_.faults += faults;
  metrics_.hits += selected - faults;
  metrics_.last_faults = faults;
  if (steady) {
    metrics_.steady_tokens += 1;
    metrics_.steady_faults += faults;
  }
}

bool ExpertFetcher::ready(size_t i) {
  if (i >= result_.size()) throw Error(ErrorKind::kInvalidArgument, "expert fetcher: no result " + std::to_string(i));
  return tickets_[i] == 0 || submitter_.done(tickets_[i]);
}

void ExpertFetcher::wait(size_t i) {
  if (i >= result_.size()) throw Error(ErrorKind::kInvalidArgument, "expert fetcher: no result " + std::to_string(i));
  if (tickets_[i] == 0) return;
  const uint64_t t = tickets_[i];
  tickets_[i] = 0;
  try {
    submitter_.wait(t);
  } catch (...) {
    cache_.forget(keys_[i]);  // the slot's bytes are undefined: never report it as resident
    throw;
  }
}

void ExpertFetcher::wait_all() {
  for (size_t i = 0; i < tickets_.size(); ++i) wait(i);
}

std::vector<uint32_t> ExpertFetcher::resident_per_layer() const {
  std::vector<uint32_t> out(catalog_.n_layers, 0);
  const std::vector<int32_t>& where = cache_.where();
  for (size_t k = 0; k < where.size(); ++k)
    if (where[k] >= 0) out[k / catalog_.n_experts] += 1;
  return out;
}

bool ExpertFetcher::resident(uint32_t layer, uint32_t expert) const {
  return layer < catalog_.n_layers && expert < catalog_.n_experts && cache_.resident(key(layer, expert));
}

}  // namespace gpunvme::stream
