// A namespace opened through our own driver for the deploy/verify/ls commands: the controller, one
// I/O queue pair, CpuIo, and a model::BlockIo view (runtime/io/cpu_block_io.h, bounce-buffered) for
// the model/ code. Bulk transfers go straight through CpuIo on caller-owned DmaBuffers (see alloc()).
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "host/controller.h"
#include "host/cpu_io.h"
#include "host/dma_memory.h"
#include "runtime/model/block_io.h"

namespace gpunvme::deploy {

class Device {
 public:
  // `device`: emu:... or vfio:BDF (host/open_device.h). Throws gpunvme::Error when the controller
  // does not come up or the namespace does not exist (naming the namespaces that do).
  explicit Device(const std::string& device, uint32_t nsid = 1);
  ~Device();
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  const std::string& name() const { return name_; }
  uint32_t nsid() const { return nsid_; }
  uint32_t lba_size() const { return cpu_->lba_bytes(); }
  uint64_t n_lbas() const { return cpu_->blocks(); }
  uint64_t capacity_bytes() const { return n_lbas() * lba_size(); }

  host::Controller& controller() { return *ctrl_; }
  host::CpuIo& cpu() { return *cpu_; }
  // Whole-block reads/writes through a 4 MiB bounce buffer; `name` is "emu:... namespace N".
  const model::BlockIo& block_io() const { return bio_; }
  // A DMA buffer of `bytes` for bulk transfers with cpu().
  host::DmaBuffer alloc(uint64_t bytes) { return host::DmaBuffer(ctrl_->transport(), bytes); }
  void flush() { cpu_->flush(); }

 private:
  std::string name_;
  uint32_t nsid_;
  std::unique_ptr<host::Controller> ctrl_;
  std::unique_ptr<host::QueuePair> qp_;
  std::unique_ptr<host::CpuIo> cpu_;
  model::BlockIo bio_;
};

}  // namespace gpunvme::deploy
