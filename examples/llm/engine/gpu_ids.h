// Which GPUs of this host a run uses (`--gpus`, issue 35): a count, the first N CUDA devices, or a list
// of CUDA device ids in pipeline order (GPU ids[0] runs the first layers). Text and numbers only, so the
// tools, the executor and the tests without a GPU share one reading and one refusal.
//   --gpus 2            the first two GPUs CUDA sees (0 and 1)
//   --gpus 0,2          GPUs 0 and 2, layers split over them in that order
//   --gpus device=1     GPU 1 alone (docker's spelling: a lone number is a count); device=0,2 as 0,2
// Ids are CUDA's, after CUDA_VISIBLE_DEVICES (which renumbers the GPUs it leaves from 0).
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace gpunvme::llm {

struct GpuChoice {
  uint32_t count = 1;
  std::vector<int> ids;  // given as ids (then count == ids.size()); empty: the first `count`
};

// Throws std::invalid_argument naming the option, the text and the fix: a count of 0, an id listed
// twice, anything but digits and commas.
GpuChoice parse_gpus(std::string_view text);

// The CUDA device of each GPU of the pipeline: `ids`, or 0..count-1.
std::vector<int> gpu_devices(uint32_t count, std::span<const int> ids);

// "--gpus 0,2", "--gpus device=1" or "--gpus 3": the choice as the user spells it, for messages.
std::string gpus_option(uint32_t count, std::span<const int> ids);

// Throws std::runtime_error when a chosen GPU is not among the `visible` CUDA sees: the message names
// the missing ids, the count CUDA sees, CUDA_VISIBLE_DEVICES (`visible_env`, null when unset) and the fix.
void check_gpus_present(uint32_t count, std::span<const int> ids, int visible, const char* visible_env);

}  // namespace gpunvme::llm
