#include "runtime/stream/expert_fetcher.h"

#include <algorithm>
#include <string>

#include "host/error.h"
#include "runtime/stream/layer_streamer.h"

namespace gpunvme::stream {

const std::vector<ExpertPart>& ExpertCatalog::of(uint32_t layer, uint32_t expert) const {
  if (layer >= n_layers || expert >= n_experts)
    throw Error(ErrorKind::kInvalidArgument, "expert " + std::to_string(expert) + " of layer " + std::to_string(layer) +
                                                 " does not exist (" + std::to_string(n_layers) + " layers, " +
                                                 std::to_string(n_experts) + " experts)");
  return parts[size_t(layer) * n_experts + expert];
}

ExpertCatalog ExpertCatalog::from_map(const model::LbaMap& map, ExpertParts which) {
  ExpertCatalog c;
  for (const model::ExpertExtent& e : map.experts()) {
    c.n_layers = std::max(c.n_layers, e.layer + 1);
    c.n_experts = std::max(c.n_experts, e.expert + 1);
  }
  c.parts.resize(size_t(c.n_layers) * c.n_experts);
  for (const model::ExpertExtent& e : map.experts()) {
    if (which == ExpertParts::kDownOnly && e.proj != model::Projection::kDown) continue;
    if (e.extent.byte_length == 0) continue;
    c.parts[size_t(e.layer) * c.n_experts + e.expert].push_back(ExpertPart{e.proj, e.extent});
  }
  return c;
}

ExpertFetcher::ExpertFetcher(host::Controller& controller, Submitter& submitter, ExpertCatalog catalog,
                             const FetcherOptions& options)
    : controller_(controller), submitter_(submitter), catalog_(std::move(catalog)), options_(options) {
  if (catalog_.n_experts == 0) throw Error(ErrorKind::kInvalidArgument, "expert fetcher: the model has no experts");
  if (options_.max_experts_per_fetch == 0)
    throw Error(ErrorKind::kInvalidArgument, "expert fetcher: max_experts_per_fetch must be at least 1");
  const auto& ns = controller.namespace_info(options_.nsid);
  geometry_.nsid = options_.nsid;
  geometry_.lba_bytes = ns.lba_bytes;
  geometry_.max_blocks = command_block_limit(controller, options_.nsid, options_.max_command_bytes);
  page_ = controller.page_bytes();
  for (const auto& parts : catalog_.parts) {
    std::vector<model::Extent> ex;
    for (const auto& p : parts) {
      if (p.extent.end_lba() > ns.blocks)
        throw Error(ErrorKind::kInvalidArgument, "expert fetcher: an expert slice at LBA " +
                                                     std::to_string(p.extent.first_lba) + " runs past the namespace end");
      ex.push_back(p.extent);
    }
    expert_bytes_ = std::max(expert_bytes_, plan::packed_bytes(ex, geometry_.lba_bytes, page_));
  }
  if (expert_bytes_ == 0) throw Error(ErrorKind::kInvalidArgument, "expert fetcher: every expert slice is empty");
  expert_bytes_ = (expert_bytes_ + page_ - 1) / page_ * page_;
  uint64_t scratch_bytes;
  if (options_.cache_bytes > 0) {
    capacity_ = uint32_t(std::min<uint64_t>(options_.cache_bytes / expert_bytes_, uint64_t(catalog_.n_layers) * catalog_.n_experts));
    if (capacity_ < options_.max_experts_per_fetch)
      throw Error(ErrorKind::kInvalidArgument,
                  "expert fetcher: a cache of " + std::to_string(options_.cache_bytes) + " bytes holds " +
                      std::to_string(capacity_) + " experts of " + std::to_string(expert_bytes_) +
                      " bytes; one fetch needs room for " + std::to_string(options_.max_experts_per_fetch));
    scratch_bytes = uint64_t(capacity_) * expert_bytes_;
    cache_.resize(capacity_);
    for (uint32_t i = 0; i < capacity_; ++i) {
      lru_.push_back(i);
      cache_[i].lru = std::prev(lru_.end());
    }
  } else {
    scratch_bytes = uint64_t(options_.max_experts_per_fetch) * expert_bytes_;
  }
  host::DmaOptions mem{host::HugePages::kAuto};
  mem.gpu_mapped = options_.gpu_mapped && host::cuda_device_available();
  scratch_ = host::DmaBuffer(controller.transport(), scratch_bytes, mem);
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
  const bool steady = options_.warmup_tokens > 0 ? metrics_.tokens >= options_.warmup_tokens
                                                 : (capacity_ == 0 ? true : cache_filled_);
  result_.clear();
  plans_.clear();
  tickets_.clear();
  result_.resize(sel.size());
  plans_.resize(sel.size());
  tickets_.assign(sel.size(), 0);
  std::vector<uint64_t> keys(sel.size());
  for (size_t i = 0; i < sel.size(); ++i) keys[i] = key(layer, sel[i]);
  std::vector<uint64_t> base(sel.size(), 0);
  std::vector<bool> fault(sel.size(), true);
  if (capacity_ > 0) {
    // Hits first, so the victims chosen below are never experts of this fetch.
    for (size_t i = 0; i < sel.size(); ++i) {
      auto it = where_.find(keys[i]);
      if (it == where_.end()) continue;
      fault[i] = false;
      CacheSlot& s = cache_[it->second];
      lru_.splice(lru_.begin(), lru_, s.lru);
      base[i] = uint64_t(it->second) * expert_bytes_;
    }
    for (size_t i = 0; i < sel.size(); ++i) {
      if (!fault[i]) continue;
      // Least recently used slot whose expert is not part of this fetch (empty slots sit at the back).
      auto v = lru_.end();
      do {
        --v;
      } while (std::find(keys.begin(), keys.end(), cache_[*v].key) != keys.end());
      CacheSlot& s = cache_[*v];
      if (s.key != ~0ull) where_.erase(s.key);
      s.key = keys[i];
      where_[keys[i]] = *v;
      base[i] = uint64_t(*v) * expert_bytes_;
      lru_.splice(lru_.begin(), lru_, v);
    }
    cache_filled_ = where_.size() == capacity_;
  } else {
    for (size_t i = 0; i < sel.size(); ++i) base[i] = uint64_t(i) * expert_bytes_;
  }
  uint32_t faults = 0;
  for (size_t i = 0; i < sel.size(); ++i) {
    const auto& parts = catalog_.of(layer, sel[i]);
    FetchedExpert& r = result_[i];
    r.expert = sel[i];
    r.offset = base[i];
    r.hit = !fault[i];
    std::vector<model::Extent> ex;
    for (const auto& p : parts) ex.push_back(p.extent);
    uint64_t end = 0;
    const std::vector<uint64_t> at = plan::pack_extents(ex, geometry_.lba_bytes, page_, base[i], &end);
    r.bytes = end - base[i];
    for (size_t k = 0; k < parts.size(); ++k)
      r.parts.push_back(FetchedPart{parts[k].proj, at[k] + parts[k].extent.byte_in_first, parts[k].extent.byte_length});
    if (!fault[i]) continue;
    ++faults;
    plan::CommandPlan& p = plans_[i];
    for (size_t k = 0; k < ex.size(); ++k) plan::append_extent(p, ex[k], at[k], geometry_, table_);
    metrics_.bytes_read += p.read_bytes;
    tickets_[i] = submitter_.issue(p.commands);
  }
  metrics_.tokens += 1;
  metrics_.requested += sel.size();
  metrics_.faults += faults;
  metrics_.hits += sel.size() - faults;
  metrics_.last_faults = faults;
  if (steady) {
    metrics_.steady_tokens += 1;
    metrics_.steady_faults += faults;
  }
  return result_;
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
    // The slot's bytes are undefined: never report it as resident.
    if (capacity_ > 0) {
      for (auto w = where_.begin(); w != where_.end(); ++w) {
        if (uint64_t(w->second) * expert_bytes_ == result_[i].offset) {
          cache_[w->second].key = ~0ull;
          lru_.splice(lru_.end(), lru_, cache_[w->second].lru);
          where_.erase(w);
          break;
        }
      }
      cache_filled_ = false;
    }
    throw;
  }
}

void ExpertFetcher::wait_all() {
  for (size_t i = 0; i < tickets_.size(); ++i) wait(i);
}

std::vector<uint32_t> ExpertFetcher::resident_per_layer() const {
  std::vector<uint32_t> out(catalog_.n_layers, 0);
  for (const auto& kv : where_) out[kv.first / catalog_.n_experts] += 1;
  return out;
}

bool ExpertFetcher::resident(uint32_t layer, uint32_t expert) const { return where_.count(key(layer, expert)) > 0; }

}  // namespace gpunvme::stream
