#include "examples/llm/engine/draft.h"

#include <algorithm>

namespace gpunvme::llm {

std::vector<uint32_t> draft_lookup(std::span<const uint32_t> context, const LookupOptions& o) {
  const size_t len = context.size();
  if (o.k == 0 || o.min_ngram == 0) return {};
  for (size_t n = std::min<size_t>(o.max_ngram, len > 0 ? len - 1 : 0); n >= o.min_ngram; --n) {
    const auto suffix = context.subspan(len - n);
    // An earlier occurrence starts at i with i + n < len (it is followed by at least one token);
    // scan from the most recent.
    for (size_t i = len - n; i-- > 0;) {
      if (!std::equal(suffix.begin(), suffix.end(), context.begin() + i)) continue;
      const size_t from = i + n, count = std::min<size_t>(o.k, len - from);
      return {context.begin() + from, context.begin() + from + count};
    }
  }
  return {};
}

}  // namespace gpunvme::llm
