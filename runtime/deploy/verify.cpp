#include "runtime/deploy/verify.h"

#include <algorithm>
#include <chrono>

#include "runtime/gguf/gguf_file.h"
#include "runtime/model/crc32c.h"
#include "runtime/model/model_error.h"

namespace gpunvme::deploy {

uint64_t VerifyReport::failed_chunks() const {
  return uint64_t(std::count_if(chunks.begin(), chunks.end(), [](const ChunkCheck& c) { return !c.ok(); }));
}

bool VerifyReport::checked_bytes() const {
  return std::any_of(chunks.begin(), chunks.end(), [](const ChunkCheck& c) { return c.expected || c.file; });
}

VerifyReport verify_device(Device& dev, const VerifyOptions& opt) {
  const auto t0 = std::chrono::steady_clock::now();
  const auto& io = dev.block_io();
  const uint32_t lba = dev.lba_size();
  VerifyReport rep;
  rep.detected = model::detect_model(io, opt.start_lba);
  if (rep.detected.kind == model::DetectedModel::Kind::kNone) {
    throw model::ModelError("no model on " + dev.name() + ": no deploy record at LBA 0 and no GGUF magic at LBA 0" +
                            (opt.start_lba ? ", LBA " + std::to_string(*opt.start_lba) : std::string()) +
                            " or the 1 MiB default LBA " + std::to_string(model::default_model_start_lba(lba)) +
                            "; deploy one, or pass --start-lba where dd wrote it");
  }
  const auto& rec = rep.detected.record;
  const uint64_t start = rep.detected.start_lba;

  // The header, through the driver.
  std::optional<gguf::GgufFile> header;
  try {
    header.emplace(model::read_model_header(io, rep.detected));
  } catch (const std::exception& e) {
    rep.problems.push_back(std::string("the GGUF header at LBA ") + std::to_string(start) + " does not parse: " + e.what());
  }
  if (header) {
    rep.n_tensors = header->tensors().size();
    const uint64_t bound = rep.detected.byte_bound;
    for (const auto& t : header->tensors()) {
      if (t.file_end() > bound) {
        rep.problems.push_back("tensor " + t.name + " ends at model byte " + std::to_string(t.file_end()) + ", past the " +
                               std::to_string(bound) + (rec ? " bytes the record holds" : " bytes left on the device"));
      }
    }
  }
  rep.model_name = rec ? rec->name : header ? header->model_name() : "";

  // What to compare with.
  std::optional<gguf::FileSource> file;
  if (!opt.against.empty()) file.emplace(opt.against);
  if (rec) {
    rep.model_bytes = rec->model_bytes;
    rep.chunk_shift = rec->chunk_shift;
    if (file && file->size() != rec->model_bytes) {
      rep.problems.push_back(opt.against + " has " + std::to_string(file->size()) + " bytes, the deploy record " +
                             std::to_string(rec->model_bytes));
    }
  } else {
    rep.model_bytes = file ? file->size() : header ? header->data_end() : 0;
    rep.chunk_shift = model::choose_chunk_shift(rep.model_bytes, lba);
    if (rep.model_bytes > rep.detected.byte_bound) {
      rep.problems.push_back("the model needs " + std::to_string(rep.model_bytes) + " bytes from LBA " +
                             std::to_string(start) + " but the device has " + std::to_string(rep.detected.byte_bound));
      rep.model_bytes = rep.detected.byte_bound;
    }
  }
  std::vector<uint32_t> file_crcs;
  if (file) {
    const uint64_t n = std::min(file->size(), rep.model_bytes);
    file_crcs = model::compute_chunk_crcs(*file, n, rep.chunk_shift);
  }

  // Re-read every byte: pieces of 8 MiB (or the chunk, if smaller), never straddling a chunk.
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
      dev.cpu().read(start + (cc.byte_offset + done) / lba, (n + lba - 1) / lba, buf, 0);
      cc.actual = model::crc32c(buf.host(), n, cc.actual);
      done += n;
      if (opt.progress) opt.progress(cc.byte_offset + done, total);
    }
    if (rec && c < rec->chunk_crcs.size()) cc.expected = rec->chunk_crcs[c];
    if (c < file_crcs.size()) cc.file = file_crcs[c];
    rep.chunks.push_back(cc);
  }
  rep.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return rep;
}

}  // namespace gpunvme::deploy
