// A namespace opened through our own driver for the deploy/verify/ls commands: the controller, one
// A namespace opened through our own driver for the deploy/verify/ls commands: the controller, one
// I/O queue pair, CpuIo, and a model::BlockIo view (runtime/io/cpu_block_io.h, bounce-buffered) for
// the model/ code. Bulk transfers go straight through CpuIo on caller-owned DmaBuffers (see alloc()).
// Opened for writing it holds the device's exclusive lock, for reading a shared one
// (host/device_lock.h) for its whole life; reading opens emu: images read-only.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "host/controller.h"
#include "host/cpu_io.h"
#include "host/device_lock.h"
#include "host/dma_memory.h"
#include "host/open_device.h"
#include "runtime/model/block_io.h"

namespace gpunvme::deploy {

class Device {
 public:
  // `device`: emu:... or vfio:BDF (host/open_device.h). Throws gpunvme::Error when the controller
  // does not come up or the namespace does not exist (naming the namespaces that do), and
  // host::DeviceBusyError when another process writes it (or, for kReadWrite, reads it).
  explicit Device(const std::string& device, uint32_t nsid = 1, host::Access access = host::Access::kReadWrite);
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
  // emu:null: every write is thrown away (deploy refuses it).
  bool discards_writes() const { return discards_writes_; }

 private:
  std::string name_;
  uint32_t nsid_;
  bool discards_writes_ = false;
  host::DeviceLock lock_;
  std::unique_ptr<host::Controller> ctrl_;
  std::unique_ptr<host::QueuePair> qp_;
  std::unique_ptr<host::CpuIo> cpu_;
  model::BlockIo bio_;
};

}  // namespace gpunvme::deploy
