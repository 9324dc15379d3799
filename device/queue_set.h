// Host side of GPU-initiated I/O: hands I/O queue pairs to kernels as DeviceQueue structs in device
// memory, and describes DMA buffers to kernels (DeviceBuffer). Requires a CUDA build.
//
// A DeviceQueue is built from host::QueuePair::view() (rings in DMA memory mapped into the GPU: create
// the queue pairs with DmaOptions::gpu_mapped), its doorbells (the GPU mapping of BAR0 from
// Transport::bar0_for_gpu plus the doorbell offsets, or -- doorbell=cpu -- slots of a host mailbox
// that the set's DoorbellForwarder thread copies to BAR0), command-id tables in device memory and a PRP-list area in GPU-mapped DMA memory.
// From then on the queue pair belongs to kernels: do not use its CPU path (enqueue/poll/wait).
//
// Recovery: the set owns the words kernels and host use for a controller reset under running
// kernels (device_queue.h RecoveryControl, QueueHealth; the kernels' side is device/warp_recovery.cuh):
//   quiesce(bound)   every warp that holds a queue parks (stops submitting); true once none runs
//   (the caller resets the controller: host::Controller::reset recreates the queue pairs in place)
//   resume(ok)       ok: a new generation, parked warps restart their rings and re-issue what was in
//                    flight; !ok: they end with fault::kControllerLost, as does any later claim
// With doorbell=cpu, quiesce also pauses the forwarder once the warps parked (nothing stale reaches a
// recreated queue), and resume(true) restarts its slots at the new rings' positions (0).
#pragma once
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "device/cuda_check.h"
#include "device/device_queue.h"
#include "device/doorbell_mode.h"
#include "host/controller.h"
#include "host/dma_memory.h"
#include "host/doorbell_forwarder.h"
#include "host/queue_pair.h"

namespace gpunvme::device {

struct DeviceQueueOptions {
  // Largest transfer of one command (further capped by MDTS and NLB). Sets the PRP-list area per
  // command id: (max_command_bytes / page) * 8 bytes, rounded up to a power of two.
  uint64_t max_command_bytes = 1ull << 20;
  // Who writes the doorbells (device/doorbell_mode.h). auto: the GPU where BAR0 maps into it.
  DoorbellMode doorbell = DoorbellMode::kAuto;
  host::DoorbellForwarderOptions forwarder{};  // doorbell=cpu: the forwarding thread's polling
  // Error statuses with DNR clear are re-issued by the kernels under this rule (the CPU path's).
  nvme::RetryPolicy retry = nvme::kDefaultRetryPolicy;
  // How long a parked warp waits for resume() before it ends with fault::kParkTimedOut (at least
  // two CAP.TO and 5 s: a reset's disable and enable, and the queues' re-creation).
  std::chrono::milliseconds park_timeout{10'000};
};

class DeviceQueueSet {
 public:
  // Throws gpunvme::Error (kUnsupported without a GPU, without GPU-mapped queue memory, or with
  // doorbell=gpu where BAR0 cannot be mapped into the GPU).
  DeviceQueueSet(host::Controller& controller, const std::vector<host::QueuePair*>& queues, uint32_t nsid,
                 const DeviceQueueOptions& options = {});
  ~DeviceQueueSet();
  DeviceQueueSet(const DeviceQueueSet&) = delete;
  DeviceQueueSet& operator=(const DeviceQueueSet&) = delete;

  uint32_t size() const { return uint32_t(host_.size()); }
  // The array of queues in device memory: pass to kernels; queue i belongs to one warp at a time.
  DeviceQueue* device() const { return device_; }
  DeviceQueue* device(uint32_t i) const { return device_ + i; }
  uint32_t max_blocks_per_command() const { return max_blocks_; }
  uint32_t lba_bytes() const { return lba_bytes_; }
  uint32_t nsid() const { return nsid_; }
  uint64_t page_bytes() const { return page_bytes_; }
  // Current state of every queue, copied back from the device (synchronizes the device).
  std::vector<DeviceQueue> snapshot() const;
  // Who writes the doorbells: kGpu or kCpu (auto resolved), and one line saying why.
  DoorbellMode doorbell_mode() const { return doorbell_mode_; }
  const std::string& doorbell_note() const { return doorbell_note_; }
  // The forwarding thread (doorbell=cpu), else nullptr.
  const host::DoorbellForwarder* forwarder() const { return forwarder_.get(); }

  // ---- Recovery (see the top of this file) ----
  // Queue i's health word as its warp last wrote it (mapped host memory; no GPU synchronization).
  QueueHealth health(uint32_t i) const;
  // Asks every warp to park; true once no queue's warp runs, false if one still runs after `bound`
  // (the set stays quiesced: call resume either way).
  bool quiesce(std::chrono::milliseconds bound);
  // Lets the warps go again after a controller reset: controller_ok bumps the generation (each warp
  // restarts its rings and re-issues its commands that were in flight); !controller_ok makes parked
  // warps, and every later claim, end with fault::kControllerLost.
  void resume(bool controller_ok);
  uint32_t generation() const { return control_host_->generation; }
  // Queue i's oldest in-flight command (pack_oldest), asked of its warp (RecoveryControl::oldest_request:
  // every running warp answers within one pump pass); kNoOldest when none answered within `bound` or
  // the queue has nothing in flight.
  uint64_t ask_oldest(uint32_t i, std::chrono::milliseconds bound);
  // Queue i's queue id (an Admin Abort names it as the SQID).
  uint16_t qid(uint32_t i) const { return host_[i].qid; }

 private:
  // Resolves options.doorbell; returns the GPU view of BAR0 for kGpu, nullptr for kCpu.
  volatile uint32_t* choose_doorbells(host::Controller& controller, DoorbellMode wanted);
  void make_recovery_words(uint32_t queues, std::chrono::milliseconds park_timeout);
  void write_control(std::chrono::milliseconds bound);  // control_host_ -> device, waited for


  std::vector<DeviceQueue> host_;
  DeviceQueue* device_ = nullptr;
  std::vector<void*> device_allocs_;
  host::DmaBuffer prp_lists_;
  uint32_t max_blocks_ = 0;
  uint32_t lba_bytes_ = 0;
  uint32_t nsid_ = 0;
  uint64_t page_bytes_ = 4096;
  DoorbellMode doorbell_mode_ = DoorbellMode::kGpu;
  std::string doorbell_note_;
  std::unique_ptr<host::DoorbellForwarder> forwarder_;  // destroyed after the destructor syncs the GPU
  RecoveryControl* control_device_ = nullptr;  // read by kernels
  RecoveryControl* control_host_ = nullptr;    // pinned: the copy the host edits, then sends
  QueueHealth* health_host_ = nullptr;         // mapped pinned, [size()]: written by kernels
  void* control_stream_ = nullptr;             // cudaStream_t: control writes go around running kernels
};

// A DMA buffer described for kernels: the GPU view plus the bus address of each page (a table in
// device memory, built once, only where the IOVA range is not contiguous).
class DeviceBufferMap {
 public:
  DeviceBufferMap(const host::DmaBuffer& buffer, uint64_t page_bytes);
  // The same buffer as another controller reaches it (host::DmaMapping's translation: a striped set).
  DeviceBufferMap(const host::DmaBuffer& buffer, const host::DmaTranslation& translation, uint64_t page_bytes);
  ~DeviceBufferMap();
  DeviceBufferMap(const DeviceBufferMap&) = delete;
  DeviceBufferMap& operator=(const DeviceBufferMap&) = delete;
  const DeviceBuffer& get() const { return desc_; }

 private:
  DeviceBuffer desc_;
  uint64_t* table_ = nullptr;
};

// Text of a queue's fault bits, e.g. "timed out, wrong command id".
std::string describe_faults(uint32_t faults);

}  // namespace gpunvme::device
