// `gpunvme ls`: what is on the device, from the device alone: the model (record or GGUF found by
// model/detect.h), its GGUF header read through the driver, and the tensor -> LBA map
// (model/lba_map.h) by layer, non-layer tensor, tensor and MoE expert. Text or JSON.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "runtime/gguf/gguf_file.h"
#include "runtime/model/block_io.h"
#include "runtime/model/detect.h"
#include "runtime/model/lba_map.h"

namespace gpunvme::deploy {

struct Listing {
  std::string device;
  uint32_t lba_size = 0;
  uint64_t n_lbas = 0;
  model::DetectedModel detected;
  std::unique_ptr<gguf::GgufFile> file;  // heap: the map points into it
  std::unique_ptr<model::LbaMap> map;

  std::string name() const;         // record name, else general.name, else ""
  uint64_t model_bytes() const;     // record length, else the header's data end
};

// Throws model::ModelError when no model is found, gguf::GgufError when its header is bad.
Listing list_model(const model::BlockIo& io, std::optional<uint64_t> start_lba = std::nullopt);

struct ListOptions {
  bool tensors = false;  // every tensor's extent
  bool experts = false;  // per-(layer, expert, projection) extents
  bool json = false;
};
std::string format_listing(const Listing& l, const ListOptions& opt);

}  // namespace gpunvme::deploy
