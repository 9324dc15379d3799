#include "device/queue_set.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <thread>

#include "driver/prp.h"
#include "host/cuda_device.h"
#include "host/error.h"

namespace gpunvme::device {

void check_cuda(int error, const char* what) {
  const auto e = static_cast<cudaError_t>(error);
  if (e == cudaSuccess) return;
  cudaGetLastError();
  throw Error(ErrorKind::kIo, std::string(what) + ": " + cudaGetErrorString(e));
}

std::string describe_faults(uint32_t faults) {
  std::string s;
  auto add = [&](uint32_t bit, const char* text) {
    if (!(faults & bit)) return;
    if (!s.empty()) s += ", ";
    s += text;
  };
  add(fault::kTimedOut, "timed out");
  add(fault::kWrongCid, "completion with a command id not in flight");
  add(fault::kBadSqHead, "completion with an SQ head outside the ring");
  add(fault::kNotOwner, "queue held by another warp");
  add(fault::kBadRequest, "invalid request (PRPs outside the rules)");
  add(fault::kControllerLost, "the controller could not be reset (removed, fatal or never ready)");
  add(fault::kParkTimedOut, "parked for a controller reset that did not finish in time");
  return s.empty() ? "none" : s;
}

namespace {

uint32_t pow2_at_least(uint64_t n) {
  uint32_t p = 1;
  while (p < n) p <<= 1;
  return p;
}

uint32_t log2_exact(uint64_t v) {
  uint32_t s = 0;
  while ((uint64_t(1) << s) < v) ++s;
  return s;
}

}  // namespace

DeviceQueueSet::DeviceQueueSet(host::Controller& controller, const std::vector<host::QueuePair*>& queues,
                               uint32_t nsid, const DeviceQueueOptions& options)
    : nsid_(nsid), page_bytes_(controller.page_bytes()) {
  std::string why;
  if (!host::cuda_device_available(&why)) throw Error(ErrorKind::kUnsupported, "GPU-initiated I/O needs a GPU: " + why);
  if (queues.empty()) throw Error(ErrorKind::kInvalidArgument, "DeviceQueueSet: no queues given");
  // Kernels keep a command's submissions in 8 bits next to its index (device_queue.h kCmdAttemptShift).
  if (options.retry.max_attempts < 1 || options.retry.max_attempts > 255)
    throw Error(ErrorKind::kInvalidArgument, "GPU queues: retry.max_attempts is " +
                                                 std::to_string(options.retry.max_attempts) + "; use 1..255");
  volatile uint32_t* bar = choose_doorbells(controller, options.doorbell);
  const host::NamespaceInfo& ns = controller.namespace_info(nsid);
  lba_bytes_ = ns.lba_bytes;
  const uint64_t page = page_bytes_;
  // PRP list area per command id: one entry per page of the largest command, a power of two that
  // divides the page, so a list never reaches a page's last slot with more to follow (no chaining).
  uint64_t max_bytes = std::max<uint64_t>(options.max_command_bytes, page);
  max_bytes = std::min<uint64_t>(max_bytes, page * (page / 8));
  const uint32_t list_bytes = std::max<uint32_t>(8, pow2_at_least(max_bytes / page * 8));
  max_blocks_ = std::min<uint32_t>(controller.max_blocks_per_command(nsid), uint32_t(max_bytes / ns.lba_bytes));
  max_blocks_ = std::min<uint32_t>(max_blocks_, nvme::kMaxBlocksPerCommand);

  uint64_t total_cids = 0;
  std::vector<uint32_t> cid_counts;
  for (host::QueuePair* qp : queues) {
    const host::QueueMemoryView v = qp->view();
    if (v.sq_device == nullptr || v.cq_device == nullptr)
      throw Error(ErrorKind::kUnsupported, "queue " + std::to_string(v.qid) +
                                               ": ring memory is not mapped into the GPU; create the queue pair "
                                               "with DmaOptions::gpu_mapped = true");
    if (qp->in_flight() != 0)
      throw Error(ErrorKind::kInvalidArgument, "queue " + std::to_string(v.qid) + " has commands in flight on the CPU path");
    cid_counts.push_back(std::min<uint32_t>(65536, pow2_at_least(v.entries)));
    total_cids += cid_counts.back();
  }
  host::DmaOptions lists;
  lists.gpu_mapped = true;
  prp_lists_ = host::DmaBuffer(controller.transport(), std::max<uint64_t>(page, total_cids * list_bytes), lists);
  std::memset(prp_lists_.host(), 0, prp_lists_.size());
  if (bar == nullptr) {
    // doorbell=cpu: slot 2i is queue i's SQ tail, slot 2i+1 its CQ head; both rings start at 0.
    std::vector<host::DoorbellRoute> routes;
    for (host::QueuePair* qp : queues) {
      const host::QueueMemoryView v = qp->view();
      routes.push_back({v.sq_doorbell, v.entries, 0});
      routes.push_back({v.cq_doorbell, v.entries, 0});
    }
    host::DoorbellForwarderOptions fo = options.forwarder;
    fo.gpu_mapped = true;
    forwarder_ = std::make_unique<host::DoorbellForwarder>(std::move(routes), fo);
  }
  uint64_t list_off = 0;
  for (size_t i = 0; i < queues.size(); ++i) {
    const host::QueueMemoryView v = queues[i]->view();
    DeviceQueue q{};
    q.sq = static_cast<nvme::SubmissionEntry*>(v.sq_device);
    q.cq = static_cast<nvme::CompletionEntry*>(v.cq_device);
    q.sq_doorbell = bar ? bar + v.sq_doorbell_offset / 4 : forwarder_->device_slot(uint32_t(2 * i));
    q.cq_doorbell = bar ? bar + v.cq_doorbell_offset / 4 : forwarder_->device_slot(uint32_t(2 * i + 1));
    q.cid_count = cid_counts[i];
    // Per id: tag and busy word (4 bytes each), command index and retry time (8 bytes each).
    void* mem = nullptr;
    const uint64_t table_bytes = uint64_t(q.cid_count) * (2 * sizeof(uint32_t) + 2 * sizeof(uint64_t));
    check_cuda(cudaMalloc(&mem, table_bytes), "cudaMalloc(command id tables)");
    device_allocs_.push_back(mem);
    check_cuda(cudaMemset(mem, 0, table_bytes), "cudaMemset(command id tables)");
    q.cid_cmd = static_cast<uint64_t*>(mem);
    q.cid_retry_at = q.cid_cmd + q.cid_count;
    q.cid_tag = reinterpret_cast<uint32_t*>(q.cid_retry_at + q.cid_count);
    q.cid_busy = q.cid_tag + q.cid_count;
    q.retry = options.retry;
    q.prp_lists = reinterpret_cast<uint64_t*>(static_cast<uint8_t*>(prp_lists_.device()) + list_off);
    q.prp_lists_bus = prp_lists_.bus(list_off);
    // A queue's list area must be bus-contiguous (always under an IOMMU; per chunk otherwise).
    if (prp_lists_.translation().contiguous_bytes_from(list_off, uint64_t(q.cid_count) * list_bytes) <
        uint64_t(q.cid_count) * list_bytes)
      throw Error(ErrorKind::kResource, "PRP list memory is not bus-contiguous per queue; use hugepages");
    q.prp_list_bytes = list_bytes;
    list_off += uint64_t(q.cid_count) * list_bytes;
    q.entries = v.entries;
    q.qid = v.qid;
    q.nsid = nsid;
    q.lba_shift = log2_exact(ns.lba_bytes);
    q.max_blocks = max_blocks_;
    q.page_shift = log2_exact(page);
    q.sq_ring.entries = v.entries;
    q.cq_ring.entries = v.entries;
    q.owner = kNoOwner;
    host_.push_back(q);
  }
  // A parked warp outwaits a whole reset: disable and enable, each bounded by CAP.TO, plus the queues.
  const std::chrono::milliseconds reset_bound{2ull * controller.cap().ready_timeout_ms() + 5000};
  make_recovery_words(uint32_t(host_.size()), std::max(options.park_timeout, reset_bound));
  for (size_t i = 0; i < host_.size(); ++i) {
    host_[i].control = control_device_;
    QueueHealth* gpu_view = nullptr;
    check_cuda(cudaHostGetDevicePointer(reinterpret_cast<void**>(&gpu_view), health_host_ + i, 0),
               "cudaHostGetDevicePointer(queue health)");
    host_[i].health = gpu_view;
  }
  check_cuda(cudaMalloc(reinterpret_cast<void**>(&device_), sizeof(DeviceQueue) * host_.size()), "cudaMalloc(queues)");
  check_cuda(cudaMemcpy(device_, host_.data(), sizeof(DeviceQueue) * host_.size(), cudaMemcpyHostToDevice),
             "cudaMemcpy(queues)");
}

volatile uint32_t* DeviceQueueSet::choose_doorbells(host::Controller& controller, DoorbellMode wanted) {
  const std::string name = controller.transport().name();
  if (wanted == DoorbellMode::kCpu) {
    doorbell_mode_ = DoorbellMode::kCpu;
    doorbell_note_ = "doorbell=cpu: kernels write a host mailbox, a CPU thread forwards to BAR0 of " + name;
    return nullptr;
  }
  std::string why;
  volatile uint32_t* bar = controller.transport().bar0_for_gpu(&why);
  if (bar != nullptr) {
    doorbell_mode_ = DoorbellMode::kGpu;
    doorbell_note_ = std::string("doorbell=") + doorbell_mode_name(wanted) + ": BAR0 of " + name +
                     " is mapped into the GPU; kernels write the doorbells";
    return bar;
  }
  if (wanted == DoorbellMode::kGpu)
    throw Error(ErrorKind::kUnsupported, name + ": BAR0 cannot be mapped into the GPU (doorbell=gpu): " + why);
  doorbell_mode_ = DoorbellMode::kCpu;
  doorbell_note_ = "doorbell=auto chose cpu: BAR0 of " + name + " cannot be mapped into the GPU: " + why;
  return nullptr;
}

DeviceQueueSet::~DeviceQueueSet() {
  cudaDeviceSynchronize();
  for (void* p : device_allocs_) cudaFree(p);
  if (device_) cudaFree(device_);
  if (control_stream_) cudaStreamDestroy(static_cast<cudaStream_t>(control_stream_));
  if (control_device_) cudaFree(control_device_);
  if (control_host_) cudaFreeHost(control_host_);
  if (health_host_) cudaFreeHost(health_host_);
}

void DeviceQueueSet::make_recovery_words(uint32_t queues, std::chrono::milliseconds park_timeout) {
  check_cuda(cudaHostAlloc(reinterpret_cast<void**>(&control_host_), sizeof(RecoveryControl), cudaHostAllocDefault),
             "cudaHostAlloc(recovery control)");
  new (control_host_) RecoveryControl{};
  control_host_->park_timeout_ns = uint64_t(park_timeout.count()) * 1'000'000;
  check_cuda(cudaMalloc(reinterpret_cast<void**>(&control_device_), sizeof(RecoveryControl)),
             "cudaMalloc(recovery control)");
  check_cuda(cudaMemcpy(control_device_, control_host_, sizeof(RecoveryControl), cudaMemcpyHostToDevice),
             "cudaMemcpy(recovery control)");
  check_cuda(cudaHostAlloc(reinterpret_cast<void**>(&health_host_), sizeof(QueueHealth) * queues, cudaHostAllocMapped),
             "cudaHostAlloc(queue health)");
  for (uint32_t i = 0; i < queues; ++i) new (health_host_ + i) QueueHealth{};
  cudaStream_t s = nullptr;
  check_cuda(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate(recovery control)");
  control_stream_ = s;
}

QueueHealth DeviceQueueSet::health(uint32_t i) const {
  const volatile QueueHealth* h = health_host_ + i;
  QueueHealth out;
  out.state = h->state;
  out.in_flight = h->in_flight;
  out.progress = h->progress;
  out.oldest = h->oldest;  // one 8-byte store by the warp, one 8-byte load here: never torn
  return out;
}

uint64_t DeviceQueueSet::ask_oldest(uint32_t i, std::chrono::milliseconds bound) {
  volatile QueueHealth* h = health_host_ + i;
  h->oldest = kNoOldest;  // the warp's answer replaces it
  control_host_->oldest_request += 1;
  const auto deadline = std::chrono::steady_clock::now() + bound;
  write_control(bound);
  for (;;) {
    const uint64_t oldest = h->oldest;
    if (oldest != kNoOldest || h->state != health_state::kRunning) return oldest;
    if (std::chrono::steady_clock::now() > deadline) return kNoOldest;
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

// The copy runs on a stream of its own, beside the kernels that poll the word (they never end
// while parked, so nothing may wait for them).
void DeviceQueueSet::write_control(std::chrono::milliseconds bound) {
  auto* s = static_cast<cudaStream_t>(control_stream_);
  check_cuda(cudaMemcpyAsync(control_device_, control_host_, sizeof(RecoveryControl), cudaMemcpyHostToDevice, s),
             "cudaMemcpyAsync(recovery control)");
  const auto deadline = std::chrono::steady_clock::now() + bound;
  cudaError_t e;
  while ((e = cudaStreamQuery(s)) == cudaErrorNotReady) {
    if (std::chrono::steady_clock::now() > deadline)
      throw Error(ErrorKind::kTimeout, "recovery: the GPU did not take the control word within " +
                                           std::to_string(bound.count()) + " ms");
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
  check_cuda(e, "recovery control write");
}

bool DeviceQueueSet::quiesce(std::chrono::milliseconds bound) {
  const auto t0 = std::chrono::steady_clock::now();
  control_host_->quiesce = 1;
  write_control(bound);
  // A warp publishes kRunning (system fence) before it reads quiesce: once the word is in device
  // memory, a warp that still reads kIdle here will see it before its first submission.
  for (;;) {
    bool running = false;
    for (uint32_t i = 0; i < size(); ++i) running |= health(i).state == health_state::kRunning;
    if (!running) {
      if (forwarder_) forwarder_->pause();  // the parked warps' last doorbell stores go out first
      return true;
    }
    if (std::chrono::steady_clock::now() - t0 > bound) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

void DeviceQueueSet::resume(bool controller_ok) {
  const std::chrono::milliseconds bound{5000};
  // Generation and verdict first, quiesce cleared after: a warp that sees quiesce 0 sees both.
  if (controller_ok) {
    control_host_->generation += 1;
    control_host_->failed = 0;
  } else {
    control_host_->failed = 1;
  }
  if (forwarder_ && forwarder_->paused()) {
    // A reset recreated every queue with SQ tail and CQ head 0, where the warps restart their rings.
    if (controller_ok)
      for (uint32_t slot = 0; slot < forwarder_->slots(); ++slot) forwarder_->rebase(slot, 0);
    forwarder_->resume();
  }
  write_control(bound);
  control_host_->quiesce = 0;
  write_control(bound);
}

std::vector<DeviceQueue> DeviceQueueSet::snapshot() const {
  std::vector<DeviceQueue> out(host_.size());
  check_cuda(cudaDeviceSynchronize(), "kernel");
  check_cuda(cudaMemcpy(out.data(), device_, sizeof(DeviceQueue) * out.size(), cudaMemcpyDeviceToHost),
             "cudaMemcpy(queue state)");
  return out;
}

DeviceBufferMap::DeviceBufferMap(const host::DmaBuffer& buffer, uint64_t page_bytes)
    : DeviceBufferMap(buffer, buffer.translation(), page_bytes) {}

DeviceBufferMap::DeviceBufferMap(const host::DmaBuffer& buffer, const host::DmaTranslation& translation,
                                 uint64_t page_bytes) {
  if (buffer.device() == nullptr)
    throw Error(ErrorKind::kUnsupported, "destination buffer is not mapped into the GPU (DmaOptions::gpu_mapped)");
  desc_.gpu = static_cast<uint8_t*>(buffer.device());
  desc_.bytes = buffer.size();
  desc_.page_shift = log2_exact(page_bytes);
  desc_.bus_base = translation.bus(0);
  if (!translation.is_contiguous()) {
    const uint64_t pages = (buffer.size() + page_bytes - 1) / page_bytes;
    std::vector<uint64_t> table(pages);
    for (uint64_t k = 0; k < pages; ++k) table[k] = translation.bus(k * page_bytes);
    check_cuda(cudaMalloc(reinterpret_cast<void**>(&table_), pages * 8), "cudaMalloc(page table)");
    check_cuda(cudaMemcpy(table_, table.data(), pages * 8, cudaMemcpyHostToDevice), "cudaMemcpy(page table)");
    desc_.page_bus = table_;
  }
}

DeviceBufferMap::~DeviceBufferMap() {
  if (table_) cudaFree(table_);
}

}  // namespace gpunvme::device
