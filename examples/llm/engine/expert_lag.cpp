#include "examples/llm/engine/expert_lag.h"

#include <algorithm>
#include <iterator>
#include <stdexcept>

namespace gpunvme::llm {

ExpertLag::ExpertLag(uint32_t k, std::vector<uint64_t> expert_bytes) : k_(k), bytes_(std::move(expert_bytes)), prev_(bytes_.size()) {
  if (k == 0) throw std::invalid_argument("ExpertLag: k must be at least 1");
}

void ExpertLag::token(std::span<const uint32_t> ids) {
  if (ids.size() != bytes_.size() * k_) throw std::invalid_argument("ExpertLag: one token needs layers x k ids");
  bool compared = false;
  for (size_t l = 0; l < bytes_.size(); ++l) {
    if (!bytes_[l]) continue;
    std::vector<uint32_t> cur(ids.begin() + l * k_, ids.begin() + (l + 1) * k_);
    std::sort(cur.begin(), cur.end());
    cur.erase(std::unique(cur.begin(), cur.end()), cur.end());
    if (!prev_[l].empty()) {
      std::vector<uint32_t> both, stale;
      std::set_intersection(cur.begin(), cur.end(), prev_[l].begin(), prev_[l].end(), std::back_inserter(both));
      std::set_difference(prev_[l].begin(), prev_[l].end(), cur.begin(), cur.end(), std::back_inserter(stale));
      c_.routed += cur.size();
      c_.predicted_hits += both.size();
      c_.wasted += stale.size();
      c_.wasted_bytes += stale.size() * bytes_[l];
      compared = true;
    }
    prev_[l] = std::move(cur);
  }
  c_.tokens += compared;
}

}  // namespace gpunvme::llm
