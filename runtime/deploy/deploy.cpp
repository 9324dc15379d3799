#include "runtime/deploy/deploy.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <future>

#include "host/text/human_bytes.h"
#include "runtime/gguf/gguf_file.h"
#include "runtime/model/crc32c.h"
#include "runtime/model/model_error.h"

namespace gpunvme::deploy {
namespace {

std::string lba_range(uint64_t first, uint64_t end) {
  return "LBA " + std::to_string(first) + ".." + std::to_string(end - 1);
}

std::string model_name_of(const gguf::GgufFile& f, const std::string& path) {
  std::string n = f.model_name();
  if (!n.empty()) return n;
  n = path.substr(path.find_last_of('/') + 1);
  if (n.size() > 5 && n.ends_with(".gguf")) n.resize(n.size() - 5);
  return n;
}

struct Fd {
  int fd;
  explicit Fd(const std::string& path) : fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC)) {
    if (fd < 0) throw model::ModelError("cannot open " + path + ": " + std::strerror(errno));
  }
  ~Fd() { ::close(fd); }
  void read_exact(uint64_t off, void* dst, uint64_t len, const std::string& path) const {
    auto* p = static_cast<uint8_t*>(dst);
    while (len > 0) {
      const ssize_t r = ::pread(fd, p, len, off_t(off));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) {
        throw model::ModelError("reading " + path + " at byte " + std::to_string(off) + ": " +
                                (r == 0 ? std::string("unexpected end of file (did it change?)") : std::strerror(errno)));
      }
      p += r;
      off += uint64_t(r);
      len -= uint64_t(r);
    }
  }
};

}  // namespace

void check_fit(uint64_t model_bytes, uint32_t nsid, uint32_t lba_size, uint64_t n_lbas, uint64_t start_lba) {
  const uint64_t need = (model_bytes + lba_size - 1) / lba_size;
  if (start_lba < n_lbas && need <= n_lbas - start_lba) return;
  const uint64_t avail = start_lba < n_lbas ? (n_lbas - start_lba) * uint64_t(lba_size) : 0;
  throw RefusedError("model is " + text::human_bytes(double(model_bytes)) + " but namespace " + std::to_string(nsid) +
                     " has " + text::human_bytes(double(avail)) + " from LBA " + std::to_string(start_lba) + " (" +
                     std::to_string(n_lbas) + " blocks of " + std::to_string(lba_size) +
                     " bytes); use a larger device or a smaller --start-lba");
}

DdPlan dd_plan(const std::string& gguf_path, uint32_t lba_size, uint64_t start_lba, const std::string& target) {
  DdPlan p;
  const uint64_t start_bytes = start_lba * lba_size;
  p.bs = 1u << 20;
  while (p.bs > lba_size && start_bytes % p.bs != 0) p.bs >>= 1;
  p.seek = start_bytes / p.bs;
  auto bs_text = [](uint64_t bs) {
    if (bs % (1u << 20) == 0) return std::to_string(bs >> 20) + "M";
    if (bs % 1024 == 0) return std::to_string(bs >> 10) + "K";
    return std::to_string(bs);
  };
  p.command = "dd if=" + gguf_path + " of=" + target + " bs=" + bs_text(p.bs) + " seek=" + std::to_string(p.seek) +
              " oflag=direct conv=fsync status=progress";
  return p;
}

DeployResult deploy_model(Device& dev, const std::string& gguf_path, const DeployOptions& opt) {
  const auto& io = dev.block_io();
  const uint32_t lba = dev.lba_size();
  // 1. The file must be a GGUF (header only: milliseconds even for large files).
  const gguf::GgufFile file = gguf::GgufFile::open(gguf_path);
  const uint64_t bytes = file.file_size();
  const uint64_t start = opt.start_lba.value_or(model::default_model_start_lba(lba));
  if (start <= model::kRecordLba) {
    throw RefusedError("--start-lba " + std::to_string(start) + " would put the model over the deploy record at LBA " +
                       std::to_string(model::kRecordLba) + "; use a start LBA >= 1 (default " +
                       std::to_string(model::default_model_start_lba(lba)) + " = 1 MiB), or write the file with plain " +
                       "dd at LBA 0 if you want no record");
  }
  // 2. Fit.
  check_fit(bytes, dev.nsid(), lba, dev.n_lbas(), start);
  // 3. Safety: LBA 0 gets the record; the target range gets the model.
  DeployResult res;
  auto found = scan_device(io, start, !opt.record_only);
  if (!found.empty()) {
    if (!opt.force) {
      std::string msg = "refusing to write to " + dev.name() + ": found ";
      for (size_t i = 0; i < found.size(); ++i)
        msg += (i ? ", " : "") + found[i].what + " at LBA " + std::to_string(found[i].lba);
      msg += " (deploy writes its record to LBA 0 and the model to " +
             lba_range(start, start + (bytes + lba - 1) / lba) +
             "). If this device really holds nothing you need, add --force";
      throw RefusedError(msg, std::move(found));
    }
    res.overridden = std::move(found);
  }

  model::DeployRecord& r = res.record;
  r.model_start_lba = start;
  r.model_bytes = bytes;
  r.lba_size = lba;
  r.chunk_shift = model::choose_chunk_shift(bytes, lba);
  r.name = model_name_of(file, gguf_path);
  const auto t0 = std::chrono::steady_clock::now();

  if (opt.record_only) {
    // The model must already be there: the file's first block equals the device's.
    std::vector<uint8_t> dev_block(lba), file_block(lba, 0);
    Fd fd(gguf_path);
    fd.read_exact(0, file_block.data(), std::min<uint64_t>(lba, bytes), gguf_path);
    io.read(start, 1, dev_block.data());
    if (dev_block != file_block) {
      throw RefusedError("LBA " + std::to_string(start) + " of " + dev.name() + " does not hold the start of " +
                         gguf_path + "; write the model first (gpunvme deploy " + gguf_path +
                         " --print-dd shows the dd command) or deploy without --record-only");
    }
    gguf::FileSource src(gguf_path);
    r.chunk_crcs = model::compute_chunk_crcs(src, bytes, r.chunk_shift);
    if (opt.progress) opt.progress(bytes, bytes);
  } else {
    // Invalidate LBA 0 first so an interrupted deploy never leaves an old record (or an old
    // GGUF at LBA 0) describing half-written bytes.
    std::vector<uint8_t> zero(lba, 0);
    io.write(model::kRecordLba, 1, zero.data());

    const uint64_t piece = std::max<uint64_t>(lba, opt.piece_bytes / lba * lba);
    if ((r.chunk_bytes() % piece) != 0 && (piece % r.chunk_bytes()) != 0)
      throw model::ModelError("piece size must divide the checksum chunk size");
    r.chunk_crcs.assign((bytes + r.chunk_bytes() - 1) >> r.chunk_shift, 0);
    host::DmaBuffer buf[2] = {dev.alloc(piece), dev.alloc(piece)};
    Fd fd(gguf_path);
    // Reads piece `off` into slot, zero-pads the last block, and folds it into the chunk CRCs
    // (pieces never straddle chunks: both are powers of two times the block, piece <= chunk).
    auto load = [&](int slot, uint64_t off) -> uint64_t {
      const uint64_t len = std::min(piece, bytes - off);
      auto* p = buf[slot].as<uint8_t>();
      fd.read_exact(off, p, len, gguf_path);
      const uint64_t padded = (len + lba - 1) / lba * lba;
      std::memset(p + len, 0, padded - len);
      for (uint64_t done = 0; done < len;) {
        const uint64_t c = (off + done) >> r.chunk_shift;
        const uint64_t n = std::min(len - done, ((c + 1) << r.chunk_shift) - (off + done));
        r.chunk_crcs[c] = model::crc32c(p + done, n, r.chunk_crcs[c]);
        done += n;
      }
      return len;
    };
    int slot = 0;
    std::future<uint64_t> next = std::async(std::launch::async, load, 0, 0);
    for (uint64_t off = 0; off < bytes;) {
      const uint64_t len = next.get();
      if (off + len < bytes) next = std::async(std::launch::async, load, slot ^ 1, off + len);
      try {
        dev.cpu().write(start + off / lba, (len + lba - 1) / lba, buf[slot], 0);
      } catch (...) {
        if (next.valid()) next.wait();
        throw;
      }
      off += len;
      res.bytes_written = off;
      slot ^= 1;
      if (opt.progress) opt.progress(off, bytes);
    }
    dev.flush();  // model bytes durable before the record that describes them
  }
  const auto block = model::serialize_record(r);
  io.write(model::kRecordLba, 1, block.data());
  dev.flush();
  res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return res;
}

}  // namespace gpunvme::deploy
