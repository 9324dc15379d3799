#include "examples/llm/engine/model_reader.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>

#include "host/cpu_io.h"
#include "host/dma_memory.h"
#include "host/error.h"
#include "host/queue_pair.h"
#include "runtime/io/cpu_block_io.h"

namespace gpunvme::llm {
namespace {

constexpr uint32_t kMaxWorkers = 64;
constexpr uint32_t kQueueEntries = 64;  // a piece's commands (8 of 1 MiB; more where MDTS is smaller)

uint32_t default_workers() {
  if (const char* e = std::getenv("GPUNVME_LOAD_QUEUES")) {
    char* end = nullptr;
    const unsigned long v = std::strtoul(e, &end, 10);
    if (end == e || *end || v < 1 || v > kMaxWorkers)
      throw std::invalid_argument(std::string("GPUNVME_LOAD_QUEUES='") + e + "': the start's reader queues, 1 to " +
                                  std::to_string(kMaxWorkers) + " (1: one piece at a time on one queue)");
    return uint32_t(v);
  }
  return std::clamp(std::thread::hardware_concurrency(), 1u, 16u);
}

// A queue pair on the highest id below `next` that the controller takes: an id in use (the CPU queue,
// another GPU's queues) is refused (Invalid Queue Identifier) and the next lower one tried. Null when
// none is left or the controller refuses for another reason (memory): fewer workers then.
std::unique_ptr<host::QueuePair> open_queue(host::Controller& c, uint32_t& next) {
  const uint32_t entries = std::min(kQueueEntries, c.max_queue_entries());
  for (; next >= 2; --next) {
    try {
      auto qp = c.create_io_queue_pair(uint16_t(next), entries);
      --next;
      return qp;
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::kCommandFailed) break;
    }
  }
  next = 1;
  return nullptr;
}

}  // namespace

struct ModelReader::Worker {
  std::vector<std::pair<host::Controller*, std::unique_ptr<host::QueuePair>>> queues;  // one per member
  std::unique_ptr<host::CpuIo> io;        // one namespace: reads land in `stage` with no copy
  std::unique_ptr<model::StripeSet> set;  // a striped set: its logical volume over the queues above
  const model::BlockIo* shared = nullptr; // no queue of its own: the CPU queue, into `plain`
  host::DmaBuffer stage;
  std::vector<uint8_t> plain;

  uint8_t* data() { return stage ? stage.as<uint8_t>() : plain.data(); }

  ~Worker() {
    set.reset();  // its members' CPU queues first
    io.reset();
    for (auto& [c, qp] : queues) {
      try {
        c->delete_io_queue_pair(*qp);
      } catch (...) {
        // A controller that failed: its queues are gone with it.
      }
    }
  }
  void read_blocks(uint64_t lba, uint64_t count) {
    if (io) io->read(lba, count, stage, 0);
    else if (set) set->logical().read(lba, uint32_t(count), stage.host());
    else shared->read(lba, uint32_t(count), plain.data());
  }
};

ModelReader::ModelReader(const ModelOnDevice& m, const ModelReaderOptions& o)
    : m_(m), piece_bytes_(std::max<uint64_t>(o.piece_bytes / m.lba_size(), 1) * m.lba_size()) {
  const uint32_t want = std::min(o.workers ? o.workers : default_workers(), kMaxWorkers);
  const uint64_t stage_bytes = piece_bytes_ + 2ull * m.lba_size();  // a piece and the blocks its ends share
  host::DmaOptions mem;
  mem.gpu_mapped = o.gpu_mapped;
  if (!o.controllers.empty() && o.controllers.size() != m.members.size())
    throw std::logic_error("ModelReader: " + std::to_string(o.controllers.size()) + " controllers for a model on " +
                           std::to_string(m.members.size()) + " namespace(s)");
  std::vector<host::Controller*> ctrls = o.controllers;
  if (ctrls.empty())
    for (const NamespaceIo& n : m.members) ctrls.push_back(n.controller);
  std::vector<uint32_t> next;
  for (host::Controller* c : ctrls) next.push_back(c->io_queues_granted());
  for (uint32_t k = 0; k < want && !ctrls.empty(); ++k) {
    auto w = std::make_unique<Worker>();
    for (size_t i = 0; i < ctrls.size(); ++i) {
      auto qp = open_queue(*ctrls[i], next[i]);
      if (!qp) break;
      w->queues.emplace_back(ctrls[i], std::move(qp));
    }
    if (w->queues.size() != ctrls.size()) break;  // ~Worker deletes what it got
    if (m.set) {
      std::vector<model::BlockIo> ios;
      for (size_t i = 0; i < ctrls.size(); ++i)
        ios.push_back(model::cpu_block_io(*ctrls[i], *w->queues[i].second, m.members[i].io->nsid(), ctrls[i]->transport().name()));
      w->set = std::make_unique<model::StripeSet>(std::move(ios), *m.stripe, m.set->generation());
    } else {
      w->io = std::make_unique<host::CpuIo>(*ctrls[0], *w->queues[0].second, m.members[0].io->nsid());
    }
    try {
      w->stage = host::DmaBuffer(ctrls[0]->transport(), stage_bytes, mem);
    } catch (const Error& e) {
      if (!mem.gpu_mapped || e.kind() != ErrorKind::kUnsupported) throw;
      mem.gpu_mapped = false;  // CUDA would not pin it: the copies stage through the driver instead
      w->stage = host::DmaBuffer(ctrls[0]->transport(), stage_bytes, mem);
    }
    workers_.push_back(std::move(w));
  }
  own_queues_ = !workers_.empty();
  if (!own_queues_) {
    auto w = std::make_unique<Worker>();
    w->shared = &m.io;
    w->plain.resize(stage_bytes);
    workers_.push_back(std::move(w));
  }
}

ModelReader::~ModelReader() = default;

void ModelReader::read(std::span<const Range> ranges, const Each& each) {
  std::vector<Range> pieces;
  const uint64_t model_end = m_.file->data_end();
  for (const Range& r : ranges) {
    if (r.offset + r.len > model_end || r.offset + r.len < r.offset) throw std::runtime_error(past_end_message(r.offset, r.len));
    for (uint64_t at = r.offset, end = r.offset + r.len; at < end;) {
      const uint64_t cut = std::min(end, (at / piece_bytes_ + 1) * piece_bytes_);
      pieces.push_back({at, cut - at});
      at = cut;
    }
  }
  if (pieces.empty()) return;
  std::atomic<size_t> next{0};
  std::atomic<bool> stop{false};
  std::mutex mu;
  std::exception_ptr first;
  const uint64_t lba = m_.lba_size();
  auto work = [&](Worker& w) {
    try {
      for (size_t i; !stop.load(std::memory_order_relaxed) && (i = next.fetch_add(1)) < pieces.size();) {
        const Range& p = pieces[i];
        const uint64_t dev = m_.device_byte(p.offset);
        const uint64_t lba0 = dev / lba, lba1 = (dev + p.len + lba - 1) / lba;
        try {
          w.read_blocks(lba0, lba1 - lba0);
        } catch (const std::exception& e) {
          // The device's message (the command's LBAs and status) and what the load was reading.
          const std::string what = std::string(e.what()) + " (the load at start was reading model bytes " + std::to_string(p.offset) +
                                   ".." + std::to_string(p.offset + p.len) + ", which hold " + bytes_hold(m_, p.offset, p.offset + p.len) + ")";
          if (const auto* h = dynamic_cast<const Error*>(&e))
            throw h->has_status() ? Error(h->kind(), what, h->status()) : Error(h->kind(), what);
          throw std::runtime_error(what);
        }
        each(w.data() + (dev - lba0 * lba), p.offset, p.len);
      }
    } catch (...) {
      std::lock_guard lk(mu);
      if (!first) first = std::current_exception();
      stop = true;
    }
  };
  const size_t n = std::min(workers_.size(), pieces.size());
  std::vector<std::thread> threads;
  for (size_t k = 1; k < n; ++k) {
    try {
      threads.emplace_back(work, std::ref(*workers_[k]));
    } catch (const std::system_error&) {
      break;  // no more threads: fewer workers
    }
  }
  work(*workers_[0]);
  for (std::thread& t : threads) t.join();
  if (first) std::rethrow_exception(first);
}

}  // namespace gpunvme::llm
