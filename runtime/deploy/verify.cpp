#include "runtime/deploy/verify.h"

#include <algorithm>
#include <chrono>

#include "host/error.h"
#include "runtime/deploy/model_file.h"
#include "runtime/gguf/gguf_file.h"
#include "runtime/model/crc32c.h"
#include "runtime/model/model_error.h"

namespace gpunvme::deploy {
namespace {

model::DetectedModel find_model(Device& dev, const VerifyOptions& opt) {
  auto detected = model::detect_model(dev.block_io(), opt.start_lba);
  if (detected.kind != model::DetectedModel::Kind::kNone) return detected;
  throw model::ModelError("no model on " + dev.name() + ": no deploy record at LBA 0 and no GGUF magic at LBA 0 or the " +
                          "1 MiB default LBA " + std::to_string(model::default_model_start_lba(dev.lba_size())) +
                          "; deploy one, or pass --start-lba where dd wrote it");
}

// The header, through the driver: it must parse and every tensor must lie within the model.
std::optional<gguf::GgufFile> check_header(Device& dev, VerifyReport& rep) {
  const auto& d = rep.detected;
  std::optional<gguf::GgufFile> header;
  try {
    header.emplace(model::read_model_header(dev.block_io(), d));
  } catch (const std::exception& e) {
    if (is_read_failure(e)) {
      rep.read_errors.push_back("the GGUF header at LBA " + std::to_string(d.start_lba) + ": " + e.what());
      return header;
    }
    rep.problems.push_back("the GGUF header at LBA " + std::to_string(d.start_lba) + " does not parse: " + e.what());
    return header;
  }
  rep.n_tensors = header->tensors().size();
  for (const auto& t : header->tensors()) {
    if (t.file_end() > d.byte_bound) {
      rep.problems.push_back("tensor " + t.name + " ends at model byte " + std::to_string(t.file_end()) + ", past the " +
                             std::to_string(d.byte_bound) +
                             (d.record ? " bytes the record holds" : " bytes left on the device"));
    }
  }
  return header;
}

// How many bytes to check and in which chunks: the record's, else the file's or the header's.
void choose_extent(const VerifyOptions& opt, const std::optional<gguf::GgufFile>& header,
                   const std::optional<gguf::FileSource>& file, uint32_t lba, VerifyReport& rep) {
  const auto& d = rep.detected;
  if (d.record) {
    rep.model_bytes = d.record->model_bytes;
    rep.chunk_shift = d.record->chunk_shift;
    if (file && file->size() != d.record->model_bytes) {
      rep.problems.push_back(opt.against + " has " + std::to_string(file->size()) + " bytes, the deploy record " +
                             std::to_string(d.record->model_bytes));
    }
    return;
  }
  rep.model_bytes = file ? file->size() : header ? header->data_end() : 0;
  rep.chunk_shift = model::choose_chunk_shift(rep.model_bytes, lba);
  if (rep.model_bytes > d.byte_bound) {
    rep.problems.push_back("the model needs " + std::to_string(rep.model_bytes) + " bytes from LBA " +
                           std::to_string(d.start_lba) + " but the device has " + std::to_string(d.byte_bound));
    rep.model_bytes = d.byte_bound;
  }
}

// Re-reads every byte: pieces of 8 MiB (or the chunk, if smaller), never straddling a chunk.
void check_chunks(Device& dev, const VerifyOptions& opt, const std::vector<uint32_t>& file_crcs, VerifyReport& rep) {
  const uint32_t lba = dev.lba_size();
  const uint64_t start = rep.detected.start_lba;
  const auto& rec = rep.detected.record;
  const uint64_t total = rep.model_bytes;
  const uint64_t chunk = uint64_t{1} << rep.chunk_shift;
  const uint64_t piece = std::min<uint64_t>(8u << 20, chunk);
  host::DmaBuffer buf = dev.alloc(piece);
  for (uint64_t c = 0; c * chunk < total; ++c) {
    ChunkCheck cc;
    cc.index = c;
    cc.byte_offset = c * chunk;
    cc.bytes = std::min(chunk, total - cc.byte_offset);
    cc.first_lba = start + cc.byte_offset / lba;
    cc.end_lba = start + (cc.byte_offset + cc.bytes + lba - 1) / lba;
    for (uint64_t done = 0; done < cc.bytes;) {
      const uint64_t n = std::min(piece, cc.bytes - done);
      try {
        dev.read_blocks(start + (cc.byte_offset + done) / lba, (n + lba - 1) / lba, buf, 0);
      } catch (const std::exception& e) {
        if (!is_read_failure(e)) throw;
        cc.read_error = e.what();  // the rest of the chunk is not read: its CRC is unknown either way
        if (opt.progress) opt.progress(cc.byte_offset + cc.bytes, total);
        break;
      }
      cc.actual = model::crc32c(buf.host(), n, cc.actual);
      done += n;
      if (opt.progress) opt.progress(cc.byte_offset + done, total);
    }
    if (rec && c < rec->chunk_crcs.size()) cc.expected = rec->chunk_crcs[c];
    if (c < file_crcs.size()) cc.file = file_crcs[c];
    rep.chunks.push_back(cc);
  }
}

}  // namespace

bool is_read_failure(const std::exception& e) {
  const auto* err = dynamic_cast<const Error*>(&e);
  if (!err) return false;
  switch (err->kind()) {
    case ErrorKind::kCommandFailed: case ErrorKind::kTimeout: case ErrorKind::kControllerFatal: case ErrorKind::kProtocol:
      return true;
    default:
      return false;
  }
}

uint64_t VerifyReport::failed_chunks() const {
  return uint64_t(std::count_if(chunks.begin(), chunks.end(), [](const ChunkCheck& c) { return c.crc_mismatch(); }));
}

uint64_t VerifyReport::unreadable_chunks() const {
  return uint64_t(std::count_if(chunks.begin(), chunks.end(), [](const ChunkCheck& c) { return c.unreadable(); }));
}

bool VerifyReport::checked_bytes() const {
  return std::any_of(chunks.begin(), chunks.end(), [](const ChunkCheck& c) { return c.expected || c.file; });
}

VerifyReport verify_device(Device& dev, const VerifyOptions& opt) {
  const auto t0 = std::chrono::steady_clock::now();
  // The --against file is checked as deploy checks it (regular file, valid GGUF) before the device.
  std::optional<gguf::FileSource> file;
  if (!opt.against.empty()) {
    open_model_file(opt.against, "--against");
    file.emplace(opt.against);
  }
  VerifyReport rep;
  rep.detected = find_model(dev, opt);
  const auto header = check_header(dev, rep);
  rep.model_name = rep.detected.record ? rep.detected.record->name : header ? header->model_name() : "";
  choose_extent(opt, header, file, dev.lba_size(), rep);
  std::vector<uint32_t> file_crcs;
  if (file) file_crcs = model::compute_chunk_crcs(*file, std::min(file->size(), rep.model_bytes), rep.chunk_shift);
  check_chunks(dev, opt, file_crcs, rep);
  rep.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return rep;
}

}  // namespace gpunvme::deploy
