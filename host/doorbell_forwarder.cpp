#include "host/doorbell_forwarder.h"

#include <atomic>
#include <cstdlib>
#include <cstring>

#include "driver/memory_order.h"
#include "host/error.h"

#if GPUNVME_HAVE_CUDA
#include <cuda_runtime.h>
#endif
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace gpunvme::host {
namespace {

constexpr uint64_t kPage = 4096;

void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// The slot's newest value as the producer (a kernel over PCIe, or a CPU thread) left it.
uint32_t load_slot(uint32_t* slot) { return std::atomic_ref<uint32_t>(*slot).load(std::memory_order_acquire); }

}  // namespace

DoorbellForwarder::DoorbellForwarder(std::vector<DoorbellRoute> routes, const DoorbellForwarderOptions& options)
    : routes_(std::move(routes)), options_(options) {
  if (routes_.empty()) throw Error(ErrorKind::kInvalidArgument, "doorbell forwarder: no doorbells to serve");
  for (size_t i = 0; i < routes_.size(); ++i) {
    const DoorbellRoute& r = routes_[i];
    if (r.doorbell == nullptr || r.entries < 2 || r.initial >= r.entries)
      throw Error(ErrorKind::kInvalidArgument, "doorbell forwarder: route " + std::to_string(i) +
                                                   " needs a register, a ring of at least 2 entries and a start "
                                                   "position inside it");
  }
  mailbox_bytes_ = (routes_.size() * sizeof(uint32_t) + kPage - 1) / kPage * kPage;
  mailbox_ = static_cast<uint32_t*>(std::aligned_alloc(kPage, mailbox_bytes_));
  if (mailbox_ == nullptr) throw Error(ErrorKind::kResource, "doorbell forwarder: cannot allocate the mailbox");
  std::memset(mailbox_, 0, mailbox_bytes_);
  for (size_t i = 0; i < routes_.size(); ++i) {
    mailbox_[i] = routes_[i].initial;
    last_.push_back(routes_[i].initial);
  }
  if (options_.gpu_mapped) {
#if GPUNVME_HAVE_CUDA
    cudaError_t e = cudaHostRegister(mailbox_, mailbox_bytes_, cudaHostRegisterMapped | cudaHostRegisterPortable);
    cuda_registered_ = e == cudaSuccess;
    void* dev = nullptr;
    if (e == cudaSuccess) e = cudaHostGetDevicePointer(&dev, mailbox_, 0);
    if (e != cudaSuccess) {
      const std::string msg = std::string("doorbell mailbox cannot be mapped into the GPU: ") + cudaGetErrorString(e);
      cudaGetLastError();
      if (cuda_registered_) cudaHostUnregister(mailbox_);
      std::free(mailbox_);
      throw Error(ErrorKind::kUnsupported, msg);
    }
    device_mailbox_ = static_cast<volatile uint32_t*>(dev);
#else
    std::free(mailbox_);
    throw Error(ErrorKind::kUnsupported, "a GPU-mapped doorbell mailbox needs a CUDA build of gpunvme");
#endif
  }
  thread_ = std::thread([this] { run(); });
}

DoorbellForwarder::~DoorbellForwarder() {
  stop();
#if GPUNVME_HAVE_CUDA
  if (cuda_registered_) cudaHostUnregister(mailbox_);
#endif
  std::free(mailbox_);
}

void DoorbellForwarder::stop() noexcept {
  if (!thread_.joinable()) return;
  stop_.store(true, std::memory_order_release);
  thread_.join();
  std::lock_guard<std::mutex> lock(mu_);
  if (!paused_) forward_pending();  // a store that landed after the thread's last scan
}

void DoorbellForwarder::pause() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!paused_) forward_pending();
  paused_ = true;
}

void DoorbellForwarder::rebase(uint32_t slot, uint32_t position) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!paused_) throw Error(ErrorKind::kInvalidArgument, "doorbell forwarder: rebase() needs pause() first");
  if (slot >= routes_.size() || position >= routes_[slot].entries)
    throw Error(ErrorKind::kInvalidArgument, "doorbell forwarder: rebase of slot " + std::to_string(slot) + " to " +
                                                 std::to_string(position) + " is outside the routes or the ring");
  std::atomic_ref<uint32_t>(mailbox_[slot]).store(position, std::memory_order_release);
  last_[slot] = position;
}

void DoorbellForwarder::resume() {
  std::lock_guard<std::mutex> lock(mu_);
  paused_ = false;
}

bool DoorbellForwarder::paused() const {
  std::lock_guard<std::mutex> lock(mu_);
  return paused_;
}

uint32_t DoorbellForwarder::forward_pending() {
  uint32_t n = 0;
  for (size_t i = 0; i < routes_.size(); ++i) {
    const uint32_t v = load_slot(mailbox_ + i);
    if (v == last_[i]) continue;
    last_[i] = v;
    if (v >= routes_[i].entries) {
      if (refused_.fetch_add(1, std::memory_order_relaxed) == 0) {
        first_refused_value_.store(v, std::memory_order_relaxed);
        first_refused_slot_.store(int64_t(i), std::memory_order_release);
      }
      continue;
    }
    // The producer published its entries before the slot store; keep them ahead of the register write.
    nvme::publish_entries_before_doorbell();
    nvme::mmio_write32(routes_[i].doorbell, v);
    ++n;
  }
  if (n) forwarded_.fetch_add(n, std::memory_order_relaxed);
  return n;
}

void DoorbellForwarder::run() {
  using Clock = std::chrono::steady_clock;
  auto last_change = Clock::now();
  while (!stop_.load(std::memory_order_acquire)) {
    uint32_t n = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!paused_) n = forward_pending();
    }
    if (n != 0) {
      last_change = Clock::now();
      continue;
    }
    if (Clock::now() - last_change < options_.spin) {
      cpu_relax();
      continue;
    }
    std::this_thread::sleep_for(options_.idle_sleep);
  }
}

std::string DoorbellForwarder::first_refusal() const {
  const int64_t slot = first_refused_slot_.load(std::memory_order_acquire);
  if (slot < 0) return {};
  return "slot " + std::to_string(slot) + " held " + std::to_string(first_refused_value_.load()) + " (ring of " +
         std::to_string(routes_[size_t(slot)].entries) + " entries)";
}

}  // namespace gpunvme::host
