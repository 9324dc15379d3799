#include "host/text/lists.h"

#include <algorithm>

namespace gpunvme::text {

std::vector<std::string> split_list(std::string_view what, std::string_view text) {
  std::vector<std::string> items;
  size_t i = 0;
  while (true) {
    const size_t j = std::min(text.find(',', i), text.size());
    if (j == i && text.find_first_not_of(',') == std::string_view::npos) throw ParseError(std::string(what) + " is empty");
    if (j == i)
      throw ParseError(std::string(what) + ": '" + std::string(text) + "' has an empty item (a list is items separated by single commas, e.g. 1,2,4)");
    items.emplace_back(text.substr(i, j - i));
    if (j == text.size()) return items;
    i = j + 1;
  }
}

std::vector<uint64_t> parse_u64_list(std::string_view what, std::string_view text, uint64_t lo, uint64_t hi) {
  std::vector<uint64_t> out;
  for (const std::string& item : split_list(what, text)) {
    const uint64_t v = parse_u64(what, item);
    if (v < lo || v > hi)
      throw ParseError(std::string(what) + ": " + item + " is not in " + std::to_string(lo) + ".." + std::to_string(hi));
    out.push_back(v);
  }
  return out;
}

std::vector<uint64_t> parse_size_list(std::string_view what, std::string_view text) {
  std::vector<uint64_t> out;
  for (const std::string& item : split_list(what, text)) out.push_back(parse_size(what, item));
  return out;
}

}  // namespace gpunvme::text
