#include "runtime/stream/gpu_submitter.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <thread>

#include "device/queue_set.h"
#include "driver/status.h"
#include "host/cuda_device.h"
#include "host/error.h"
#include "runtime/stream/gpu_ticket_pump.cuh"

namespace gpunvme::stream {
namespace {

using device::check_cuda;

// One warp per block, one block per queue: warps are scheduled independently of each other.
__global__ void pump_templates(TicketLaunch launch, const nvme::SubmissionEntry* commands, uint64_t count) {
  if (blockIdx.x >= launch.queue_count) return;
  pump_ticket(launch, blockIdx.x, count, [&](uint64_t g, uint16_t) { return commands[g]; },
              [](uint64_t, nvme::Status) {});
}

cudaEvent_t ev(void* e) { return static_cast<cudaEvent_t>(e); }
cudaStream_t st(cuda_stream_t s) { return reinterpret_cast<cudaStream_t>(s); }

}  // namespace

GpuSubmitter::GpuSubmitter(host::Controller& controller, std::vector<host::QueuePair*> queues, uint32_t nsid,
                           const GpuSubmitterOptions& options)
    : controller_(controller), options_(options), queue_pairs_(std::move(queues)) {
  std::string why;
  if (!host::cuda_device_available(&why)) throw Error(ErrorKind::kUnsupported, "GPU submitter: " + why);
  if (queue_pairs_.empty()) throw Error(ErrorKind::kInvalidArgument, "GPU submitter: no queue pairs given");
  if (options_.max_tickets == 0) throw Error(ErrorKind::kInvalidArgument, "GPU submitter: max_tickets must be >= 1");
  device::DeviceQueueOptions qo;
  qo.max_command_bytes = options_.max_command_bytes;
  qo.doorbell = options_.doorbell;
  qo.retry = options_.retry;
  set_ = std::make_unique<device::DeviceQueueSet>(controller, queue_pairs_, nsid, qo);
  recovery_ = std::make_unique<GpuRecovery>(controller, *set_, options_.recovery);
  const size_t n = options_.max_tickets;
  check_cuda(cudaMalloc(reinterpret_cast<void**>(&records_device_), n * sizeof(GpuTicketRecord)),
             "cudaMalloc(ticket records)");
  check_cuda(cudaHostAlloc(reinterpret_cast<void**>(&records_host_), n * sizeof(GpuTicketRecord), cudaHostAllocMapped),
             "cudaHostAlloc(ticket records)");
  check_cuda(cudaHostGetDevicePointer(reinterpret_cast<void**>(&records_host_gpu_), records_host_, 0),
             "cudaHostGetDevicePointer(ticket records)");
  for (size_t i = 0; i < n; ++i) new (&records_host_[i]) GpuTicketRecord{};
  for (size_t i = 0; i < n; ++i) free_records_.push_back(uint32_t(i));
  cudaStream_t s = nullptr;
  check_cuda(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
  internal_stream_ = s;
}

GpuSubmitter::~GpuSubmitter() {
  for (auto& [id, t] : tickets_) {
    // Bounded: each kernel ends by its queues' timeout; after host_timeout the memory is leaked
    // rather than freed under a running kernel.
    const auto deadline = std::chrono::steady_clock::now() + options_.host_timeout;
    while (cudaEventQuery(ev(t.event)) == cudaErrorNotReady && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    if (cudaEventQuery(ev(t.event)) == cudaErrorNotReady) return;
    if (t.own_copy) cudaFree(t.own_copy);
    cudaEventDestroy(ev(t.event));
  }
  for (auto& [host, p] : prepared_) cudaFree(p.device);
  cudaStreamDestroy(static_cast<cudaStream_t>(internal_stream_));
  cudaFreeHost(records_host_);
  cudaFree(records_device_);
}

uint32_t GpuSubmitter::queue_count() const { return set_->size(); }

void GpuSubmitter::prepare(std::span<const nvme::SubmissionEntry> commands) {
  if (commands.empty() || prepared_.count(commands.data())) return;
  void* dev = nullptr;
  check_cuda(cudaMalloc(&dev, commands.size_bytes()), "cudaMalloc(command templates)");
  const cudaError_t e = cudaMemcpy(dev, commands.data(), commands.size_bytes(), cudaMemcpyHostToDevice);
  if (e != cudaSuccess) cudaFree(dev);
  check_cuda(e, "cudaMemcpy(command templates)");
  prepared_[commands.data()] = Prepared{dev, commands.size()};
}

void GpuSubmitter::forget(std::span<const nvme::SubmissionEntry> commands) {
  auto it = prepared_.find(commands.data());
  if (it == prepared_.end()) return;
  cudaFree(it->second.device);
  prepared_.erase(it);
}

uint64_t GpuSubmitter::new_ticket(Ticket t, cuda_stream_t stream,
                                  const std::function<void(const TicketLaunch&)>& launch) {
  if (free_records_.empty())
    throw Error(ErrorKind::kResource, "GPU submitter: " + std::to_string(options_.max_tickets) +
                                          " tickets outstanding; wait() for finished ones (or raise max_tickets)");
  const uint32_t idx = free_records_.front();
  cudaEvent_t e = nullptr;
  check_cuda(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate(ticket)");
  // The record is free: its last kernel ended. A fresh copy goes to device memory ahead of the kernel.
  records_host_[idx] = GpuTicketRecord{};
  cudaError_t err = cudaMemcpyAsync(records_device_ + idx, records_host_ + idx, sizeof(GpuTicketRecord),
                                    cudaMemcpyHostToDevice, st(stream));
  if (err == cudaSuccess) {
    TicketLaunch l;
    l.queues = set_->device();
    l.queue_count = queue_count();
    l.depth = options_.depth;
    l.timeout_ns = options_.timeout_ns;
    l.record = records_device_ + idx;
    l.mirror = records_host_gpu_ + idx;
    launch(l);
    err = cudaGetLastError();
  }
  if (err == cudaSuccess) err = cudaEventRecord(e, st(stream));
  if (err != cudaSuccess) {
    cudaEventDestroy(e);
    if (t.own_copy) cudaFree(t.own_copy);
    check_cuda(err, "GPU submitter: launching the read kernel");
  }
  free_records_.pop_front();
  t.record = idx;
  t.generation = set_->generation();
  t.event = e;
  const uint64_t id = next_ticket_++;
  tickets_.emplace(id, std::move(t));
  return id;
}

uint64_t GpuSubmitter::issue_on(std::span<const nvme::SubmissionEntry> commands, cuda_stream_t io) {
  Ticket t;
  t.commands = commands;
  const nvme::SubmissionEntry* dev = nullptr;
  auto it = prepared_.find(commands.data());
  if (it != prepared_.end() && it->second.count == commands.size()) {
    dev = static_cast<const nvme::SubmissionEntry*>(it->second.device);
  } else if (!commands.empty()) {
    check_cuda(cudaMalloc(&t.own_copy, commands.size_bytes()), "cudaMalloc(command templates)");
    const cudaError_t e = cudaMemcpyAsync(t.own_copy, commands.data(), commands.size_bytes(), cudaMemcpyHostToDevice, st(io));
    if (e != cudaSuccess) cudaFree(t.own_copy);
    check_cuda(e, "cudaMemcpyAsync(command templates)");
    dev = static_cast<const nvme::SubmissionEntry*>(t.own_copy);
  }
  const uint64_t count = commands.size();
  return new_ticket(std::move(t), io, [&](const TicketLaunch& l) {
    pump_templates<<<l.queue_count, 32, 0, st(io)>>>(l, dev, count);
  });
}

uint64_t GpuSubmitter::issue_kernel(cuda_stream_t stream, const std::function<void(const TicketLaunch&)>& launch,
                                    std::function<std::string(uint64_t)> describe) {
  Ticket t;
  t.describe = std::move(describe);
  return new_ticket(std::move(t), stream, launch);
}

uint64_t GpuSubmitter::issue(std::span<const nvme::SubmissionEntry> commands) {
  return issue_on(commands, reinterpret_cast<cuda_stream_t>(internal_stream_));
}

const GpuSubmitter::Ticket& GpuSubmitter::at(uint64_t ticket, const char* what) const {
  auto it = tickets_.find(ticket);
  if (it == tickets_.end())
    throw Error(ErrorKind::kInvalidArgument, std::string("GPU submitter ") + what + ": unknown ticket " +
                                                 std::to_string(ticket) + " (already waited for?)");
  return it->second;
}

void GpuSubmitter::order_after(uint64_t ticket, cuda_stream_t consumer) {
  check_cuda(cudaStreamWaitEvent(st(consumer), ev(at(ticket, "order_after").event), 0), "cudaStreamWaitEvent");
}

void* GpuSubmitter::new_marker() {
  cudaEvent_t e = nullptr;
  check_cuda(cudaEventCreate(&e), "cudaEventCreate(stream marker)");
  return e;
}

void GpuSubmitter::delete_marker(void* marker) noexcept { cudaEventDestroy(ev(marker)); }

void GpuSubmitter::mark(void* marker, cuda_stream_t stream) {
  check_cuda(cudaEventRecord(ev(marker), st(stream)), "cudaEventRecord(stream marker)");
}

void GpuSubmitter::wait_marker(cuda_stream_t stream, void* marker) {
  check_cuda(cudaStreamWaitEvent(st(stream), ev(marker), 0), "cudaStreamWaitEvent(stream marker)");
}

bool GpuSubmitter::marker_reached(void* marker) { return cudaEventQuery(ev(marker)) != cudaErrorNotReady; }

double GpuSubmitter::marker_ms(void* from, void* to) {
  float ms = 0;
  return cudaEventElapsedTime(&ms, ev(from), ev(to)) == cudaSuccess ? double(ms) : -1.0;
}

const uint32_t* GpuSubmitter::device_state(uint64_t ticket) const {
  return &records_device_[at(ticket, "device_state").record].state;
}

bool GpuSubmitter::done(uint64_t ticket) {
  const cudaError_t e = cudaEventQuery(ev(at(ticket, "done").event));
  if (e == cudaErrorNotReady) recovery_->poll();
  return e != cudaErrorNotReady;  // an error also ends the ticket: wait() reports it
}

host::RecoveryStats GpuSubmitter::recovery() const {
  host::RecoveryStats r = recovered_;
  const GpuRecoveryStats& w = recovery_->stats();
  r.timeouts += w.stalls;
  r.aborts += w.aborts;
  r.resets += w.resets;
  r.seconds_lost += w.recovery_seconds;
  return r;
}

const std::string& GpuSubmitter::last_recovery_reason() const { return recovery_->stats().last_reason; }

std::string GpuSubmitter::describe_failure(const Ticket& t, const GpuTicketRecord& r) const {
  std::string s = controller_.transport().name() + ": GPU-issued reads failed (" + std::to_string(r.completed) +
                  " of " + std::to_string(r.commands) + " commands completed, " + std::to_string(r.failed) + " with an error";
  if (r.faults) s += "; queue faults: " + device::describe_faults(r.faults);
  s += ")";
  if (r.first_error != ~0ull) {
    const uint64_t g = r.first_error >> 16;
    s += "; first failed command #" + std::to_string(g);
    if (g < t.commands.size())
      s += ": LBA " + std::to_string(nvme::rw_slba(t.commands[g])) + ".." +
           std::to_string(nvme::rw_slba(t.commands[g]) + nvme::rw_nblocks(t.commands[g]) - 1);
    else if (t.describe)
      s += ": " + t.describe(g);
    s += ": " + nvme::describe(nvme::Status{uint16_t(r.first_error & 0xFFFF)});
  }
  if (r.retries) s += "; " + std::to_string(r.retries) + " retries";
  if (r.faults & device::fault::kControllerLost) s += ". " + recovery_->failure();
  else if (r.faults & device::fault::kTimedOut)
    s += ". The controller stopped completing commands and no reset followed (is the host polling the submitter?)";
  if (r.faults & device::fault::kNotOwner)
    s += ". Another kernel held the queues: issue a submitter's tickets on one stream only";
  return s;
}

void GpuSubmitter::retire(uint64_t ticket, Ticket& t, GpuTicketTimes* times) {
  const cudaError_t e = cudaEventQuery(ev(t.event));
  const GpuTicketRecord r = records_host_[t.record];
  if (times && r.state != ticket_state::kPending && r.start_ns != ~0ull) {
    times->start_ns = r.start_ns;
    times->end_ns = r.end_ns;
  }
  recovered_.retries += r.retries;
  recovered_.resubmitted += r.resubmitted;
  recovered_.protocol_errors += r.protocol_errors;
  recovered_.failed += r.failed;
  const std::string failure =
      e != cudaSuccess ? std::string("GPU submitter: the read kernel failed: ") + cudaGetErrorString(e)
      : r.state == ticket_state::kOk ? std::string()
      : r.state == ticket_state::kFailed ? describe_failure(t, r)
                                         : std::string("GPU submitter: the read kernel ended without publishing its result");
  completed_total_ += r.completed;
  if (t.own_copy) cudaFree(t.own_copy);
  cudaEventDestroy(ev(t.event));
  const uint32_t generation = t.generation;
  free_records_.push_back(t.record);
  tickets_.erase(ticket);
  // A queue with a sticky fault (a protocol error, or its own timeout while no one polled) does
  // nothing more until it is rebuilt: a controller reset rebuilds every queue in place.
  constexpr uint32_t kSticky = device::fault::kWrongCid | device::fault::kBadSqHead | device::fault::kTimedOut |
                               device::fault::kParkTimedOut;
  // Only for a ticket issued since the last reset: later ones found the queue already faulted.
  if ((r.faults & kSticky) && generation == set_->generation()) {
    try {
      recovery_->recover("rebuilding the GPU queues after: " + device::describe_faults(r.faults));
    } catch (const Error&) {
      // Reported by the next ticket that uses the queues; this ticket's own error comes first.
    }
  }
  if (!failure.empty()) {
    const ErrorKind kind = e != cudaSuccess                                       ? ErrorKind::kIo
                           : r.faults & device::fault::kControllerLost            ? ErrorKind::kControllerFatal
                           : r.faults & (device::fault::kWrongCid | device::fault::kBadSqHead) ? ErrorKind::kProtocol
                                                                                  : ErrorKind::kCommandFailed;
    throw Error(kind, failure, nvme::Status{uint16_t(r.first_error != ~0ull ? r.first_error & 0xFFFF : 0)});
  }
}

void GpuSubmitter::wait(uint64_t ticket, GpuTicketTimes* times) {
  auto it = tickets_.find(ticket);
  if (it == tickets_.end())
    throw Error(ErrorKind::kInvalidArgument, "GPU submitter wait: unknown ticket " + std::to_string(ticket));
  const auto deadline = std::chrono::steady_clock::now() + options_.host_timeout;
  uint32_t spins = 0;
  while (cudaEventQuery(ev(it->second.event)) == cudaErrorNotReady) {
    if (std::chrono::steady_clock::now() > deadline)
      throw Error(ErrorKind::kTimeout,
                  "GPU submitter: ticket " + std::to_string(ticket) + "'s read kernel has not ended after " +
                      std::to_string(options_.host_timeout.count()) +
                      " ms; its stream may be waiting on other work (a consumer kernel that never releases a slot?)");
    if (++spins > 64) std::this_thread::sleep_for(std::chrono::microseconds(20));
    recovery_->poll();
  }
  retire(ticket, it->second, times);
}

}  // namespace gpunvme::stream
