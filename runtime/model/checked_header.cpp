#include "runtime/model/checked_header.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>

#include "host/text/escape.h"
#include "runtime/model/crc32c.h"
#include "runtime/model/model_error.h"

namespace gpunvme::model {
namespace {

std::string hex32(uint32_t v) {
  char b[16];
  std::snprintf(b, sizeof b, "0x%08x", v);
  return b;
}

// The model's bytes for the parser, a whole chunk checked before any byte of it is served. The
// latest checked chunk's first kKeep bytes stay in memory (the parser reads forward).
class ChunkCheckedSource final : public gguf::ByteSource {
 public:
  ChunkCheckedSource(const BlockIo& io, const DeployRecord& r, std::string device_args)
      : io_(io), r_(r), dev_(io, r.model_start_lba, r.model_bytes), device_args_(text::printable(device_args)) {}

  size_t read(uint64_t offset, void* dst, size_t len) override {
    if (offset >= r_.model_bytes) return 0;
    len = size_t(std::min<uint64_t>(len, r_.model_bytes - offset));
    if (len == 0) return 0;
    for (uint64_t c = offset >> r_.chunk_shift; c <= (offset + len - 1) >> r_.chunk_shift; ++c) check(c);
    const uint64_t kept_end = kept_begin_ + kept_.size();
    if (offset >= kept_begin_ && offset + len <= kept_end) {
      std::memcpy(dst, kept_.data() + (offset - kept_begin_), len);
      return len;
    }
    return dev_.read(offset, dst, len);
  }
  uint64_t size() const override { return r_.model_bytes; }
  std::string describe() const override { return dev_.describe(); }
  const std::vector<uint64_t>& verified() const { return verified_; }
  uint64_t bytes_checked() const { return bytes_; }

 private:
  static constexpr uint64_t kKeep = 64ull << 20;
  static constexpr uint64_t kPiece = 4ull << 20;

  void check(uint64_t c) {
    if (std::find(verified_.begin(), verified_.end(), c) != verified_.end()) return;
    const uint64_t begin = r_.chunk_offset(c), n = r_.chunk_length(c);
    kept_.assign(std::min(n, kKeep), 0);
    kept_begin_ = begin;
    std::vector<uint8_t> piece(std::min(n, kPiece));
    uint32_t crc = 0;
    for (uint64_t at = 0; at < n;) {
      const uint64_t k = std::min<uint64_t>(piece.size(), n - at);
      uint8_t* dst = at + k <= kept_.size() ? kept_.data() + at : piece.data();
      if (dev_.read(begin + at, dst, k) != k)
        throw ModelError("the model on " + io_.name + " ends before the " + std::to_string(r_.model_bytes) +
                         " bytes its deploy record holds; re-deploy it");
      crc = crc32c(dst, k, crc);
      at += k;
    }
    bytes_ += n;
    if (crc != r_.chunk_crcs[c]) throw ModelError(mismatch(c, crc));
    verified_.push_back(c);
  }

  std::string mismatch(uint64_t c, uint32_t crc) const {
    const uint64_t begin = r_.chunk_offset(c), end = begin + r_.chunk_length(c);
    const uint64_t lba0 = r_.model_start_lba + begin / r_.lba_size;
    const uint64_t lba1 = r_.model_start_lba + (end + r_.lba_size - 1) / r_.lba_size;
    return "chunk " + std::to_string(c) + " of '" + text::printable(r_.name) + "' on " + text::printable(io_.name) + " (model bytes " + std::to_string(begin) +
           ".." + std::to_string(end) + ", LBA " + std::to_string(lba0) + ".." + std::to_string(lba1) +
           ") does not match the deploy record's CRC-32C (recorded " + hex32(r_.chunk_crcs[c]) + ", read " + hex32(crc) +
           "): its bytes changed after the deploy. It holds the GGUF header, metadata and tensor table, which say what the "
           "model is: changed, they may describe another one (another layer count, tensors at other bytes), so none of it "
           "is used. Run `gpunvme verify " + device_args_ +
           "` to list every damaged chunk, then re-deploy the model (`gpunvme deploy MODEL.gguf " + device_args_ + "`)";
  }

  const BlockIo& io_;
  const DeployRecord& r_;
  DeviceByteSource dev_;
  std::string device_args_;
  std::vector<uint64_t> verified_;
  std::vector<uint8_t> kept_;
  uint64_t kept_begin_ = 0, bytes_ = 0;
};

}  // namespace

CheckedHeader read_checked_header(const BlockIo& io, const DetectedModel& m, const std::string& device_args) {
  if (!m.record) return {read_model_header(io, m), {}, 0, 0};
  const auto t0 = std::chrono::steady_clock::now();
  ChunkCheckedSource src(io, *m.record, device_args);
  gguf::GgufFile f = read_model_header(io, m, src);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return {std::move(f), src.verified(), src.bytes_checked(), s};
}

}  // namespace gpunvme::model
