// The start's reads of model bytes, many at once: the VRAM tier's copies, the RAM tier, the CPU
// executor's whole model and the bytes only the load check reads (load_check.h) all come through here.
// One command at a time on the one CPU queue held a namespace to a fraction of its rate (0.5-0.7 GB/s
// on an H200 host: the emulator serves each queue on one of its threads, 1.85 GB/s each there, and a
// drive wants many commands in flight). So: N workers, each a host thread with an NVMe
// I/O queue of its own (one on every member of a striped set, read through a model::StripeSet of its
// own) and a staging buffer in DMA memory that its reads land in, take the pieces of the ranges asked
// for in turn; each piece goes to the caller's callback on the worker's thread, so that one worker's
// copy and CRC overlap the others' reads. The queues are made on the highest free queue ids (the GPU's
// start at 2, after the CPU queue's 1) and deleted when the reader goes, before the GPU's are made.
// A controller with no free queue id leaves one worker reading through the CPU queue (m.io).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "examples/llm/engine/model_on_device.h"

namespace gpunvme::llm {

struct ModelReaderOptions {
  // Workers (and queues per namespace): 0 is GPUNVME_LOAD_QUEUES where set (1: one queue, one piece at a
  // time, as before the reader), else min(16, the host's hardware threads).
  uint32_t workers = 0;
  // The staging buffers registered with CUDA (pinned): what the GPU executor copies from is then DMA'd.
  bool gpu_mapped = false;
  // A piece: at most this many bytes (a multiple of the LBA size; tests cut small models finer).
  uint64_t piece_bytes = 8ull << 20;  // 8 commands of 1 MiB in flight per queue
  // The controllers to read through, one per namespace of m.members (the GPU executor's: a bench's
  // modeled drive serves the load as it serves the tokens); empty: m.members' own.
  std::vector<host::Controller*> controllers;
};

class ModelReader {
 public:
  struct Range {
    uint64_t offset = 0, len = 0;  // model file bytes
  };
  // Called on a worker's thread, several at once: model bytes [offset, offset + len) at `data`, valid
  // during the call. Pieces never cross a multiple of piece_bytes nor a range's ends.
  using Each = std::function<void(const uint8_t* data, uint64_t offset, uint64_t len)>;

  ModelReader(const ModelOnDevice& m, const ModelReaderOptions& o = {});
  ~ModelReader();  // deletes its queues
  ModelReader(const ModelReader&) = delete;
  ModelReader& operator=(const ModelReader&) = delete;

  uint32_t workers() const { return uint32_t(workers_.size()); }
  bool own_queues() const { return own_queues_; }
  // Reads every range (disjoint) and returns once each piece was handed to `each`. The first failure
  // (a read error, with the device's message and the model bytes and tensors it was reading; or what
  // `each` threw) is thrown once the other workers stopped.
  void read(std::span<const Range> ranges, const Each& each);
  void read(uint64_t offset, uint64_t len, const Each& each) {
    const Range r{offset, len};
    read(std::span<const Range>(&r, 1), each);
  }

 private:
  struct Worker;

  const ModelOnDevice& m_;
  uint64_t piece_bytes_;
  std::vector<std::unique_ptr<Worker>> workers_;
  bool own_queues_ = false;
};

}  // namespace gpunvme::llm
