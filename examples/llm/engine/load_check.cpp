#include "examples/llm/engine/load_check.h"

#include <algorithm>
#include <cstdio>

#include "host/cpu_clock.h"
#include "host/text/escape.h"
#include "runtime/model/crc32c.h"

namespace gpunvme::llm {
namespace {

// Pieces a host reader reads and hands to the checking thread at once: small enough that the thread
// starts early and the last CRC is short, large enough that a job costs nothing to queue.
constexpr uint64_t kPieceBytes = 32ull << 20;
// Staging buffers of read_staged: the reader fills one while the thread CRCs the others.
constexpr size_t kStages = 3;

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

std::string hex32(uint32_t v) {
  char b[16];
  std::snprintf(b, sizeof b, "0x%08x", v);
  return b;
}

// Where readers cut their pieces: every tensor's and routed expert slice's bounds and the header's
// end, the bounds of every range any reader reads (whole tensors, layers, dense ranges, slices).
std::vector<uint64_t> cut_points(const ModelOnDevice& m) {
  std::vector<uint64_t> c{m.file->data_offset(), m.file->data_end()};
  for (const gguf::TensorInfo& t : m.file->tensors()) c.insert(c.end(), {t.file_offset, t.file_end()});
  for (const model::ExpertExtent& e : m.map->experts()) c.insert(c.end(), {e.file_offset, e.file_offset + e.extent.byte_length});
  return c;
}

}  // namespace

LoadCheck::LoadCheck(const ModelOnDevice& m, bool on) : m_(m) {
  stages_.resize(on && m.detected.record ? kStages : 1);
  for (Stage& s : stages_) s.bytes.resize(std::min<uint64_t>(kPieceBytes * (stages_.size() == 1 ? 2 : 1), m.file->data_end() + 1));
  if (!on || !m.detected.record) return;
  verifier_ = std::make_unique<model::ChunkVerifier>(*m.detected.record, cut_points(m));
  // The open check read these chunks whole and found them equal to the record.
  for (uint64_t c : m.header_chunks) {
    const Range r = verifier_->chunk_range(c);
    verifier_->add(r.offset, r.bytes, m.detected.record->chunk_crcs[c]);
  }
  worker_ = std::thread([this] { work(); });
}

LoadCheck::~LoadCheck() {
  if (!worker_.joinable()) return;
  {
    std::lock_guard lk(mu_);
    stop_ = true;
    jobs_.clear();  // not started: their bytes may be gone with the reader that failed
  }
  cv_.notify_all();
  worker_.join();
}

void LoadCheck::submit(const uint8_t* data, uint64_t offset, uint64_t len) {
  const uint64_t end = std::min(offset + len, verifier_->model_bytes());
  if (end <= offset) return;
  {
    std::lock_guard lk(mu_);
    jobs_.push_back({data, offset, end - offset, ++submitted_});
  }
  cv_.notify_all();
}

// A wait for CRCs of bytes already read: bounded by the work queued before it (CPU only, no I/O).
void LoadCheck::wait_done(uint64_t seq) {
  const auto t = std::chrono::steady_clock::now();
  std::unique_lock lk(mu_);
  cv_.wait(lk, [&] { return done_ >= seq || stop_; });
  wall_seconds_ += seconds_since(t);
}

void LoadCheck::work() {
  for (;;) {
    Job j;
    std::vector<Range> todo;
    {
      std::unique_lock lk(mu_);
      cv_.wait(lk, [&] { return stop_ || !jobs_.empty(); });
      if (stop_) return;
      j = jobs_.front();
      jobs_.pop_front();
      for (const Range& r : verifier_->cut(j.offset, j.len))
        if (verifier_->needed(r.offset, r.bytes)) todo.push_back(r);
    }
    const double cpu0 = host::calling_thread_cpu_seconds();
    std::vector<uint32_t> crcs;
    crcs.reserve(todo.size());
    uint64_t bytes = 0;
    for (const Range& r : todo) {
      crcs.push_back(model::crc32c(j.data + (r.offset - j.offset), r.bytes));
      bytes += r.bytes;
    }
    const double cpu = host::calling_thread_cpu_seconds() - cpu0;
    {
      std::lock_guard lk(mu_);
      try {
        for (size_t i = 0; i < todo.size(); ++i) verifier_->add(todo[i].offset, todo[i].bytes, crcs[i]);
      } catch (...) {
        if (!failure_) failure_ = std::current_exception();  // finish_start() throws it
      }
      host_bytes_ += bytes;
      cpu_seconds_ += cpu;
      done_ = j.seq;
    }
    cv_.notify_all();
  }
}

void LoadCheck::plan(uint64_t offset, uint64_t len) {
  if (on() && len) planned_.push_back({offset, len});
}

void LoadCheck::read(uint64_t offset, uint64_t len, uint8_t* dst) {
  plan(offset, len);
  for (uint64_t at = 0; at < len; at += kPieceBytes) {
    const uint64_t n = std::min(kPieceBytes, len - at);
    read_model_bytes(m_, offset + at, n, dst + at);
    if (on()) submit(dst + at, offset + at, n);
  }
}

void LoadCheck::read_staged(uint64_t offset, uint64_t len, const Sink& sink) {
  plan(offset, len);
  for (uint64_t at = 0; at < len;) {
    Stage& s = stages_[next_stage_++ % stages_.size()];
    if (on() && s.seq) wait_done(s.seq);
    const uint64_t n = std::min<uint64_t>(s.bytes.size(), len - at);
    read_model_bytes(m_, offset + at, n, s.bytes.data());
    if (sink) sink(s.bytes.data(), offset + at, n);
    if (on()) {
      submit(s.bytes.data(), offset + at, n);
      std::lock_guard lk(mu_);
      s.seq = submitted_;
    }
    at += n;
  }
}

void LoadCheck::finish_start() {
  if (on()) {
    const auto t = std::chrono::steady_clock::now();
    const double waited = wall_seconds_;
    std::vector<Range> gaps;
    {
      std::lock_guard lk(mu_);
      gaps = verifier_->uncovered(planned_);
    }
    for (const Range& g : gaps) read_staged(g.offset, g.bytes, nullptr);
    wait_done(submitted_);
    // This whole wait counts once (the waits inside it were already part of it).
    wall_seconds_ = waited + seconds_since(t);
    if (failure_) std::rethrow_exception(failure_);
    throw_if_mismatch();
  }
  start_seconds_ = seconds_since(t0_);
}

std::vector<LoadCheck::Range> LoadCheck::pending(uint64_t offset, uint64_t len) const {
  std::vector<Range> out;
  if (!on()) return out;
  std::lock_guard lk(mu_);
  for (const Range& r : verifier_->cut(offset, len))
    if (verifier_->needed(r.offset, r.bytes)) out.push_back(r);
  return out;
}

void LoadCheck::add_gpu(uint64_t offset, uint64_t len, uint32_t crc) {
  std::lock_guard lk(mu_);
  verifier_->add(offset, len, crc);
  gpu_bytes_ += len;
}

void LoadCheck::throw_if_mismatch() const {
  if (!on()) return;
  std::lock_guard lk(mu_);
  const auto& x = verifier_->mismatches();
  if (x.empty()) return;
  std::string more = x.size() > 1 ? " (and " + std::to_string(x.size() - 1) + " more chunk(s))" : "";
  throw LoadCheckError(mismatch_message(x.front()) + more);
}

std::string LoadCheck::mismatch_message(const model::ChunkVerifier::Mismatch& x) const {
  const model::DeployRecord& r = *m_.detected.record;
  const Range c = verifier_->chunk_range(x.chunk);
  const uint64_t lba0 = r.model_start_lba + c.offset / r.lba_size;
  const uint64_t lba1 = r.model_start_lba + (c.end() + r.lba_size - 1) / r.lba_size;
  std::vector<std::string> held;
  if (c.offset < m_.file->data_offset()) held.push_back("the GGUF header");
  for (const gguf::TensorInfo& t : m_.file->tensors())
    if (t.file_offset < c.end() && t.file_end() > c.offset && t.size_bytes) held.push_back(text::printable(t.name));
  std::string what;
  for (size_t i = 0; i < held.size() && i < 4; ++i) what += (i ? ", " : "") + held[i];
  if (held.size() > 4) what += " and " + std::to_string(held.size() - 4) + " more tensors";
  if (held.empty()) what = "no tensor (padding between tensors or after the last)";
  const std::string dev = text::printable(m_.device_args);
  const std::string why = x.unstable ? "gave two different CRC-32Cs when read twice: the device does not return the same bytes twice"
                                     : "does not match the deploy record's CRC-32C (recorded " + hex32(x.recorded) + ", read " +
                                           hex32(x.read) + "): its bytes changed after the deploy";
  return "chunk " + std::to_string(x.chunk) + " of '" + text::printable(r.name) + "' on " + text::printable(m_.io.name) +
         " (model bytes " + std::to_string(c.offset) + ".." + std::to_string(c.end()) + ", LBA " + std::to_string(lba0) + ".." +
         std::to_string(lba1) + ") " + why + ". It holds " + what + ". Run `gpunvme verify " + dev +
         "` to list every damaged chunk, then re-deploy the model (`gpunvme deploy MODEL.gguf " + dev + "`)";
}

VerifyStats LoadCheck::stats() const {
  VerifyStats v;
  v.record = m_.detected.record.has_value();
  v.header_chunks = m_.header_chunks.size();
  v.header_seconds = m_.header_check_seconds;
  v.host_bytes = m_.header_bytes_checked;
  v.start_seconds = start_seconds_;
  if (v.record) v.chunks = m_.detected.record->n_chunks();
  if (!on()) {
    v.chunks_verified = v.header_chunks;
    return v;
  }
  std::lock_guard lk(mu_);
  v.on = true;
  v.chunks_verified = verifier_->verified();
  v.mismatches = verifier_->mismatches().size();
  v.host_bytes += host_bytes_;
  v.gpu_bytes = gpu_bytes_;
  v.start_cpu_seconds = cpu_seconds_;
  v.start_wall_seconds = wall_seconds_;
  return v;
}

std::string verify_json(const VerifyStats& v) {
  char b[512];
  std::snprintf(b, sizeof b,
                "{\"record\":%s,\"on\":%s,\"chunks\":%llu,\"chunks_verified\":%llu,\"header_chunks\":%llu,\"host_bytes\":%llu,"
                "\"gpu_bytes\":%llu,\"mismatches\":%llu,\"header_seconds\":%.6f,\"start_cpu_seconds\":%.6f,"
                "\"start_wall_seconds\":%.6f,\"start_seconds\":%.6f}",
                v.record ? "true" : "false", v.on ? "true" : "false", (unsigned long long)v.chunks,
                (unsigned long long)v.chunks_verified, (unsigned long long)v.header_chunks, (unsigned long long)v.host_bytes,
                (unsigned long long)v.gpu_bytes, (unsigned long long)v.mismatches, v.header_seconds, v.start_cpu_seconds,
                v.start_wall_seconds, v.start_seconds);
  return b;
}

std::string verify_summary(const VerifyStats& v) {
  char b[320];
  if (!v.record) return "verify: no deploy record, so no CRC-32Cs: the model's bytes were not checked";
  if (!v.on) {
    std::snprintf(b, sizeof b, "verify: the header's %llu chunk(s) checked at open (%.3f s); the tiers and streamed layers not (--no-verify)",
                  (unsigned long long)v.header_chunks, v.header_seconds);
    return b;
  }
  std::snprintf(b, sizeof b,
                "verify: %llu of %llu chunks checked against the deploy record (%.1f MB on the host, %.1f MB on the GPU); "
                "at start %.3f s of host CPU, and start waited %.3f s for the checks (of its %.3f s)",
                (unsigned long long)v.chunks_verified, (unsigned long long)v.chunks, v.host_bytes / 1e6, v.gpu_bytes / 1e6,
                v.start_cpu_seconds, v.start_wall_seconds, v.start_seconds);
  return b;
}

std::string no_record_note(const ModelOnDevice& m) {
  return "no deploy record on " + text::printable(m.io.name) +
         ": the model was written without `gpunvme deploy` (a dd'ed GGUF), so there are no CRC-32Cs to check its bytes "
         "against and they are used unchecked; `gpunvme deploy MODEL.gguf " + text::printable(m.device_args) +
         " --record-only` adds them to a model dd wrote 1 MiB in (docs/deploy.md)";
}

}  // namespace gpunvme::llm
