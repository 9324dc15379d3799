#include "examples/llm/engine/gpu_ids.h"

#include <algorithm>
#include <stdexcept>

#include "host/text/lists.h"
#include "host/text/escape.h"

namespace gpunvme::llm {
namespace {

// More ids than any host has GPUs: an id past it is a typo, refused as text rather than as a GPU.
constexpr uint64_t kMaxId = 1023;
constexpr std::string_view kDevicePrefix = "device=";

std::string join(std::span<const int> ids) {
  std::string s;
  for (int id : ids) s += (s.empty() ? "" : ",") + std::to_string(id);
  return s;
}

}  // namespace

GpuChoice parse_gpus(std::string_view text) {
  const bool prefixed = text.starts_with(kDevicePrefix);
  const std::string_view list = prefixed ? text.substr(kDevicePrefix.size()) : text;
  const std::string given = "--gpus " + text::printable(std::string(text));
  try {
    if (!prefixed && list.find(',') == std::string_view::npos) {  // a count
      const uint64_t n = text::parse_u64("--gpus", list);
      if (n == 0) throw std::invalid_argument("--gpus 0: give a count of 1 or more, or device ids (device=0 for GPU 0 alone, 0,2 for two)");
      if (n > kMaxId + 1) throw std::invalid_argument(given + ": more GPUs than a host has");
      return {uint32_t(n), {}};
    }
    GpuChoice c;
    for (uint64_t id : text::parse_u64_list("--gpus", list, 0, kMaxId)) {
      if (std::find(c.ids.begin(), c.ids.end(), int(id)) != c.ids.end())
        throw std::invalid_argument(given + ": GPU " + std::to_string(id) + " is listed twice: give each GPU once");
      c.ids.push_back(int(id));
    }
    c.count = uint32_t(c.ids.size());
    return c;
  } catch (const text::ParseError& e) {
    throw std::invalid_argument(std::string(e.what()) +
                                " (--gpus takes a count, 2, or CUDA device ids: 0,2, or device=1 for one GPU)");
  }
}

std::vector<int> gpu_devices(uint32_t count, std::span<const int> ids) {
  if (!ids.empty()) {
    if (ids.size() != count) throw std::logic_error("gpu_devices: " + std::to_string(ids.size()) + " ids for " + std::to_string(count) + " GPUs");
    return {ids.begin(), ids.end()};
  }
  std::vector<int> d(count);
  for (uint32_t g = 0; g < count; ++g) d[g] = int(g);
  return d;
}

std::string gpus_option(uint32_t count, std::span<const int> ids) {
  if (ids.empty()) return "--gpus " + std::to_string(count);
  return std::string("--gpus ") + (ids.size() == 1 ? "device=" : "") + join(ids);
}

void check_gpus_present(uint32_t count, std::span<const int> ids, int visible, const char* visible_env) {
  std::vector<int> missing;
  for (int id : gpu_devices(count, ids))
    if (id >= visible) missing.push_back(id);
  if (missing.empty()) return;
  std::string sees = visible == 0 ? "CUDA sees no GPU here"
                   : visible == 1 ? "CUDA sees 1 GPU here (id 0)"
                                  : "CUDA sees " + std::to_string(visible) + " GPUs here (ids 0 to " + std::to_string(visible - 1) + ")";
  if (visible_env) sees += ", CUDA_VISIBLE_DEVICES=" + text::printable(visible_env) + " chooses and renumbers them";
  const std::string fix = visible == 0 ? "use --path cpu"
                          : ids.empty() ? "use --gpus " + std::to_string(visible) + " or fewer"
                                        : "give ids below " + std::to_string(visible);
  throw std::runtime_error(gpus_option(count, ids) + ": no GPU " + join(missing) + ": " + sees + ": " + fix);
}

}  // namespace gpunvme::llm
