// The engine checks what it loads against the deploy record's chunk CRC-32Cs (issue 32):
//   - at open, always (even with --no-verify): the chunks holding the GGUF header, metadata and
//     tensor table, read whole before the parser sees them (runtime/model/checked_header.h);
//   - at start: every byte read for the VRAM and RAM tiers (and by the CPU executor), read by the
//     start's reader (model_reader.h: several queues, several pieces in flight) and CRC'd (SSE4.2,
//     crc32c()) on the worker that read it while the others read on, and the bytes no tier ever reads
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
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "examples/llm/engine/model_on_device.h"
#include "examples/llm/engine/model_reader.h"
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
  double start_cpu_seconds = 0;  // host CPU time of the CRCs at start (the reader's workers, summed)
  double start_wall_seconds = 0; // wall time start spent on the checks alone (reading and CRCing the bytes no tier reads)
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
  // on: the start and streamed checks (false: --no-verify). Without a record the check is off; the
  // reads go through the start's reader either way. reader: its options (gpu_mapped for the GPU's copies).
  LoadCheck(const ModelOnDevice& m, bool on, const ModelReaderOptions& reader = {});
  ~LoadCheck();
  LoadCheck(const LoadCheck&) = delete;
  LoadCheck& operator=(const LoadCheck&) = delete;

  bool on() const { return verifier_ != nullptr; }
  // Reads model bytes [offset, offset + len) into `dst` through the start's reader and CRCs them.
  void read(uint64_t offset, uint64_t len, uint8_t* dst);
  // The same for disjoint ranges, each piece handed to `sink` (a copy to the GPU) in the reader's
  // staging buffer, before its CRC; called on the reader's workers, several at once.
  using Sink = std::function<void(const uint8_t* data, uint64_t offset, uint64_t len)>;
  using Range = model::ChunkVerifier::Range;
  void read_staged(std::span<const Range> ranges, const Sink& sink);
  void read_staged(uint64_t offset, uint64_t len, const Sink& sink) {
    const Range r{offset, len};
    read_staged(std::span<const Range>(&r, 1), sink);
  }
  // Bytes another reader will check (streamed layers, fetched experts): not read at start.
  void plan(uint64_t offset, uint64_t len);
  // The end of start: reads and checks the bytes no reader reads, lets the reader's queues go and
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
  ModelReader& reader();  // made at the first read, gone at finish_start (its queues with it)
  void check(const uint8_t* data, uint64_t offset, uint64_t len);  // on a reader's worker
  std::string mismatch_message(const model::ChunkVerifier::Mismatch& x) const;

  const ModelOnDevice& m_;
  ModelReaderOptions reader_options_;
  std::unique_ptr<ModelReader> reader_;
  std::unique_ptr<model::ChunkVerifier> verifier_;  // null: nothing to check
  std::vector<Range> planned_;
  mutable std::mutex mu_;  // verifier_, the counters, failure_
  std::exception_ptr failure_;  // a worker's, for finish_start()
  uint64_t host_bytes_ = 0, gpu_bytes_ = 0;
  double cpu_seconds_ = 0, wall_seconds_ = 0, start_seconds_ = 0;
  std::chrono::steady_clock::time_point t0_ = std::chrono::steady_clock::now();
};

}  // namespace gpunvme::llm
