#include "examples/llm/engine/load_check.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "host/cpu_clock.h"
#include "host/text/escape.h"
#include "runtime/model/crc32c.h"

namespace gpunvme::llm {
namespace {

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

LoadCheck::LoadCheck(const ModelOnDevice& m, bool on, const ModelReaderOptions& reader) : m_(m), reader_options_(reader) {
  if (!on || !m.detected.record) return;
  verifier_ = std::make_unique<model::ChunkVerifier>(*m.detected.record, cut_points(m));
  // The open check read these chunks whole and found them equal to the record.
  for (uint64_t c : m.header_chunks) {
    const Range r = verifier_->chunk_range(c);
    verifier_->add(r.offset, r.bytes, m.detected.record->chunk_crcs[c]);
  }
}

LoadCheck::~LoadCheck() = default;

ModelReader& LoadCheck::reader() {
  if (!reader_) reader_ = std::make_unique<ModelReader>(m_, reader_options_);
  return *reader_;
}

// The CRCs of a piece a worker just read, while the other workers read on: the verifier decides
// under the lock, the CRCs are computed outside it.
void LoadCheck::check(const uint8_t* data, uint64_t offset, uint64_t len) {
  const uint64_t end = std::min(offset + len, verifier_->model_bytes());
  if (end <= offset) return;
  std::vector<Range> todo;
  {
    std::lock_guard lk(mu_);
    for (const Range& r : verifier_->cut(offset, end - offset))
      if (verifier_->needed(r.offset, r.bytes)) todo.push_back(r);
  }
  const double cpu0 = host::calling_thread_cpu_seconds();
  std::vector<uint32_t> crcs;
  crcs.reserve(todo.size());
  uint64_t bytes = 0;
  for (const Range& r : todo) {
    crcs.push_back(model::crc32c(data + (r.offset - offset), r.bytes));
    bytes += r.bytes;
  }
  const double cpu = host::calling_thread_cpu_seconds() - cpu0;
  std::lock_guard lk(mu_);
  try {
    for (size_t i = 0; i < todo.size(); ++i) verifier_->add(todo[i].offset, todo[i].bytes, crcs[i]);
  } catch (...) {
    if (!failure_) failure_ = std::current_exception();  // finish_start() throws it
  }
  host_bytes_ += bytes;
  cpu_seconds_ += cpu;
}

void LoadCheck::plan(uint64_t offset, uint64_t len) {
  if (on() && len) planned_.push_back({offset, len});
}

void LoadCheck::read(uint64_t offset, uint64_t len, uint8_t* dst) {
  plan(offset, len);
  reader().read(offset, len, [&](const uint8_t* data, uint64_t off, uint64_t n) {
    std::memcpy(dst + (off - offset), data, n);
    if (on()) check(data, off, n);
  });
}

void LoadCheck::read_staged(std::span<const Range> ranges, const Sink& sink) {
  std::vector<ModelReader::Range> rs;
  for (const Range& r : ranges) {
    plan(r.offset, r.bytes);
    rs.push_back({r.offset, r.bytes});
  }
  reader().read(rs, [&](const uint8_t* data, uint64_t off, uint64_t n) {
    if (sink) sink(data, off, n);
    if (on()) check(data, off, n);
  });
}

void LoadCheck::finish_start() {
  if (on()) {
    const auto t = std::chrono::steady_clock::now();
    std::vector<Range> gaps;
    {
      std::lock_guard lk(mu_);
      gaps = verifier_->uncovered(planned_);
    }
    read_staged(gaps, nullptr);
    wall_seconds_ += seconds_since(t);
  }
  reader_.reset();  // its queues go before the GPU's are made
  if (on()) {
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
  const std::string what = bytes_hold(m_, c.offset, c.end());
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
