// Who writes a GPU queue's doorbells (DeviceQueueOptions::doorbell, the benches' --doorbell):
//   gpu   kernels store to BAR0 directly (the BAR must map into the GPU: Transport::bar0_for_gpu)
//   cpu   kernels store to a host mailbox; a CPU thread forwards to BAR0 (host/doorbell_forwarder.h)
//   auto  gpu where BAR0 maps into the GPU, otherwise cpu, and the queue set says which and why
// Header-only and CUDA-free, so argument parsers of non-CUDA builds can use it.
#pragma once
#include <optional>
#include <string_view>

namespace gpunvme::device {

enum class DoorbellMode { kAuto, kGpu, kCpu };

inline const char* doorbell_mode_name(DoorbellMode m) {
  switch (m) {
    case DoorbellMode::kAuto: return "auto";
    case DoorbellMode::kGpu: return "gpu";
    case DoorbellMode::kCpu: return "cpu";
  }
  return "?";
}

// "auto" / "gpu" / "cpu"; nullopt for anything else.
inline std::optional<DoorbellMode> parse_doorbell_mode(std::string_view text) {
  if (text == "auto") return DoorbellMode::kAuto;
  if (text == "gpu") return DoorbellMode::kGpu;
  if (text == "cpu") return DoorbellMode::kCpu;
  return std::nullopt;
}

}  // namespace gpunvme::device
