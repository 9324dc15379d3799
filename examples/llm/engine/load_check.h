// The engine checks what it loads against the deploy record's chunk CRC-32Cs (issue 32):
//   - at open, always (even with --no-verify): the chunks holding the GGUF header, metadata and
//     tensor table, read whole before the parser sees them (runtime/model/checked_header.h);
//   - at start: every byte read for the VRAM and RAM tiers (and by the CPU executor), CRC'd on a host
//     thread while the next piece is read (SSE4.2, crc32c()), and the bytes no tier ever reads
//     (padding, unused tensors, the rest of the header chunks) read and CRC'd once, so that every
//     chunk can be decided;
//   - streamed layers and fetched MoE experts on their first read, on the GPU over the slots the reads
//     land in (gpu_load_check.h), decided at the end of that pass.
// Chunks do not align with layers or tensors: a model::ChunkVerifier collects the pieces readers CRC
// (cut at every tensor's and expert slice's bounds, so that overlapping readers still tile) and
// decides a chunk once it is covered. A mismatch stops the run: LoadCheckError names the chunk, its
// bytes and LBAs, the tensors it holds and the fix. --no-verify turns off all but the open check.
// A model written by dd without a record has no CRCs: nothing to check, said once (no_record_note).
#pragma once
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "examples/llm/engine/model_on_device.h"
#include "runtime/model/chunk_verifier.h"

namespace gpunvme::llm {

// What the checks did (the JSON's "verify").
struct VerifyStats {
  bool record = false;  // the device has a deploy record: CRC-32Cs to check against
  bool on = false;      // the start and streamed checks ran (--no-verify: off; the open check always)
  uint64_t chunks = 0, chunks_verified = 0, header_chunks = 0;
  uint64_t host_bytes = 0, gpu_bytes = 0;  // bytes CRC'd on the host (the header chunks included) / GPU
  uint64_t mismatches = 0;
  double header_seconds = 0;     // the open check's wall time
  double start_cpu_seconds = 0;  // host CPU time of the CRCs at start (the checking thread)
  double start_wall_seconds = 0; // wall time start waited for the checks (the reads no tier does, the last CRCs)
  double start_seconds = 0;      // wall time of the executor's start, the loads and the checks
};
std::string verify_json(const VerifyStats& v);
std::string verify_summary(const VerifyStats& v);  // one line for the printed summary
// "no deploy record on DEV: ... nothing to check its bytes against; ..." (stderr, once).
std::string no_record_note(const ModelOnDevice& m);

class LoadCheckError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class LoadCheck {
 public:
  using Range = model::ChunkVerifier::Range;
  // on: the start and streamed checks (false: --no-verify). Without a record the check is off.
  LoadCheck(const ModelOnDevice& m, bool on);
  ~LoadCheck();  // waits for the checking thread's job in hand (its bytes may be about to die)
  LoadCheck(const LoadCheck&) = delete;
  LoadCheck& operator=(const LoadCheck&) = delete;

  bool on() const { return verifier_ != nullptr; }
  // Reads model bytes [offset, offset + len) into `dst` through the CPU queue (read_model_bytes) and
  // CRCs them on the checking thread; `dst` must hold its bytes until finish_start().
  void read(uint64_t offset, uint64_t len, uint8_t* dst);
  // The same through a ring of staging buffers: `sink` gets each piece (a copy to the GPU) before
  // its CRC; a buffer is refilled once its CRC is done.
  using Sink = std::function<void(const uint8_t* data, uint64_t offset, uint64_t len)>;
  void read_staged(uint64_t offset, uint64_t len, const Sink& sink);
  // Bytes another reader will check (streamed layers, fetched experts): not read at start.
  void plan(uint64_t offset, uint64_t len);
  // The end of start: reads and checks the bytes no reader reads, waits for the checking thread and
  // throws LoadCheckError for a chunk that did not match.
  void finish_start();

  // GPU readers (gpu_load_check.h): the pieces of [offset, offset + len) still to check, cut where
  // the verifier wants them; then each piece's CRC, and a throw for any mismatch so far.
  std::vector<Range> pending(uint64_t offset, uint64_t len) const;
  void add_gpu(uint64_t offset, uint64_t len, uint32_t crc);
  void throw_if_mismatch() const;
  uint32_t chunk_shift() const { return m_.detected.record ? m_.detected.record->chunk_shift : 0; }
  VerifyStats stats() const;

 private:
  struct Job {
    const uint8_t* data;
    uint64_t offset, len, seq;
  };
  void submit(const uint8_t* data, uint64_t offset, uint64_t len);
  void wait_done(uint64_t seq);  // wall time counted as the check's
  void work();
  std::string mismatch_message(const model::ChunkVerifier::Mismatch& x) const;

  const ModelOnDevice& m_;
  std::unique_ptr<model::ChunkVerifier> verifier_;  // null: nothing to check
  std::vector<Range> planned_;
  mutable std::mutex mu_;  // verifier_, the queue, the counters
  std::condition_variable cv_;
  std::deque<Job> jobs_;
  uint64_t submitted_ = 0, done_ = 0;
  bool stop_ = false;
  std::exception_ptr failure_;  // the checking thread's, for finish_start()
  std::thread worker_;
  struct Stage {
    std::vector<uint8_t> bytes;
    uint64_t seq = 0;  // the CRC job that reads it
  };
  std::vector<Stage> stages_;
  size_t next_stage_ = 0;
  uint64_t host_bytes_ = 0, gpu_bytes_ = 0;
  double cpu_seconds_ = 0, wall_seconds_ = 0, start_seconds_ = 0;
  std::chrono::steady_clock::time_point t0_ = std::chrono::steady_clock::now();
};

}  // namespace gpunvme::llm
