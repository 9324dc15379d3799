#include "runtime/deploy/deploy.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <future>

#include "host/text/human_bytes.h"
#include "runtime/deploy/layout_check.h"
#include "runtime/deploy/model_file.h"
#include "runtime/deploy/shell_quote.h"
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
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
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

void check_start_lba(uint64_t start, uint64_t default_start) {
  if (start > model::kRecordLba) return;
  throw RefusedError("--start-lba " + std::to_string(start) + " would put the model over the deploy record at LBA " +
                     std::to_string(model::kRecordLba) + "; use a start LBA >= 1 (default " + std::to_string(default_start) +
                     "), or write the file with plain dd at LBA 0 if you want no record");
}

void write_block(Device& dev, uint64_t lba, const std::vector<uint8_t>& block) {
  dev.block_io().write(lba, 1, block.data());
}

// --record-only: the model must already be there (the file's first block equals the device's).
void check_model_on_device(Device& dev, const std::string& path, uint64_t bytes, uint64_t start) {
  const uint32_t lba = dev.lba_size();
  std::vector<uint8_t> dev_block(lba), file_block(lba, 0);
  Fd fd(path);
  fd.read_exact(0, file_block.data(), std::min<uint64_t>(lba, bytes), path);
  dev.block_io().read(start, 1, dev_block.data());
  if (dev_block == file_block) return;
  throw RefusedError("LBA " + std::to_string(start) + " of " + dev.name() + " does not hold the start of " + path +
                     "; write the model first (gpunvme deploy " + shell_quote(path) +
                     " --print-dd shows the dd command) or deploy without --record-only");
}

// Streams the model (a file, or bytes made on the fly: ByteSource) onto the device in pipelined pieces (the next piece is read and folded into the
// chunk CRCs while this one is written) and returns the model's first block, which it does not
// write: the caller writes it last, so the GGUF magic appears only once every other byte is there.
class ModelStream {
 public:
  ModelStream(Device& dev, gguf::ByteSource& src, model::DeployRecord& r, uint64_t piece_bytes)
      : dev_(dev), src_(src), r_(r), lba_(dev.lba_size()),
        piece_(std::max<uint64_t>(lba_, piece_bytes / lba_ * lba_)) {
    if ((r_.chunk_bytes() % piece_) != 0 && (piece_ % r_.chunk_bytes()) != 0)
      throw model::ModelError("piece size must divide the checksum chunk size");
    r_.chunk_crcs.assign((r_.model_bytes + r_.chunk_bytes() - 1) >> r_.chunk_shift, 0);
    buf_[0] = dev.alloc(piece_);
    buf_[1] = dev.alloc(piece_);
  }

  std::vector<uint8_t> run(const ProgressFn& progress, uint64_t& written) {
    const uint64_t bytes = r_.model_bytes;
    std::vector<uint8_t> first_block(lba_, 0);
    int slot = 0;
    std::future<uint64_t> next = std::async(std::launch::async, [this] { return load(0, 0); });
    for (uint64_t off = 0; off < bytes;) {
      const uint64_t len = next.get();
      if (off + len < bytes) next = std::async(std::launch::async, [this, slot, off, len] { return load(slot ^ 1, off + len); });
      const uint64_t held = off == 0 ? 1 : 0;  // the model's first block waits for the end
      if (held) std::memcpy(first_block.data(), buf_[slot].host(), lba_);
      const uint64_t blocks = (len + lba_ - 1) / lba_;
      try {
        if (blocks > held) dev_.write_blocks(r_.model_start_lba + off / lba_ + held, blocks - held, buf_[slot], held * lba_);
      } catch (...) {
        if (next.valid()) next.wait();
        throw;
      }
      off += len;
      written = off;
      slot ^= 1;
      if (progress) progress(off, bytes);
    }
    return first_block;
  }

 private:
  // Reads the piece at `off` into `slot`, zero-pads its last block and folds it into the chunk
  // CRCs (pieces never straddle chunks: both are powers of two times the block, piece <= chunk).
  uint64_t load(int slot, uint64_t off) {
    const uint64_t len = std::min(piece_, r_.model_bytes - off);
    auto* p = buf_[slot].as<uint8_t>();
    if (src_.read(off, p, len) != len)
      throw model::ModelError("reading " + src_.describe() + " at byte " + std::to_string(off) +
                              ": unexpected end (did the file change?)");
    const uint64_t padded = (len + lba_ - 1) / lba_ * lba_;
    std::memset(p + len, 0, padded - len);
    for (uint64_t done = 0; done < len;) {
      const uint64_t c = (off + done) >> r_.chunk_shift;
      const uint64_t n = std::min(len - done, ((c + 1) << r_.chunk_shift) - (off + done));
      r_.chunk_crcs[c] = model::crc32c(p + done, n, r_.chunk_crcs[c]);
      done += n;
    }
    return len;
  }

  Device& dev_;
  gguf::ByteSource& src_;
  model::DeployRecord& r_;
  const uint32_t lba_;
  const uint64_t piece_;
  host::DmaBuffer buf_[2];
};

// The full write, in the order that keeps it atomic for readers (see deploy_model in deploy.h).
void write_model(Device& dev, gguf::ByteSource& src, model::DeployRecord& r, const DeployOptions& opt,
                 uint64_t& written) {
  // A new layout over members that held something else: what they held stops opening first, since the
  // writes below land where the old layout kept other bytes (the middle of an old model, say).
  dev.retire_previous_layout();
  model::DeployRecord in_progress = r;
  in_progress.in_progress = true;
  in_progress.chunk_crcs.assign((r.model_bytes + r.chunk_bytes() - 1) >> r.chunk_shift, 0);
  write_block(dev, model::kRecordLba, model::serialize_record(in_progress));
  write_block(dev, r.model_start_lba, std::vector<uint8_t>(dev.lba_size(), 0));  // an older model's magic
  dev.flush();
  // A new striped set's member records only now: the first moment its members open as the set, its
  // logical LBA 0 already says "unfinished" (never an older model's bytes laid out anew).
  dev.write_layout();
  ModelStream stream(dev, src, r, opt.piece_bytes);
  const std::vector<uint8_t> first_block = stream.run(opt.progress, written);
  dev.flush();  // every other model byte durable before the magic
  write_block(dev, r.model_start_lba, first_block);
  dev.flush();  // the model durable before the record that describes it
  write_block(dev, model::kRecordLba, model::serialize_record(r));
  dev.flush();
}

}  // namespace

void check_fit(uint64_t model_bytes, const std::string& space, uint32_t lba_size, uint64_t n_lbas, uint64_t start_lba,
               const std::string& fix) {
  const uint64_t need = (model_bytes + lba_size - 1) / lba_size;
  if (start_lba < n_lbas && need <= n_lbas - start_lba) return;
  const uint64_t avail = start_lba < n_lbas ? (n_lbas - start_lba) * uint64_t(lba_size) : 0;
  throw RefusedError("model is " + text::human_bytes(double(model_bytes)) + " but " + space + " has " +
                     text::human_bytes(double(avail)) + " from LBA " + std::to_string(start_lba) + " (" +
                     std::to_string(n_lbas) + " blocks of " + std::to_string(lba_size) + " bytes); " + fix);
}

uint64_t default_start_lba(const Device& dev) {
  if (!dev.striped()) return model::default_model_start_lba(dev.lba_size());
  return std::max<uint64_t>(1, model::kStripedModelStartBytes / dev.lba_size());
}

namespace {

// check_fit's words for the device: its namespace, or the set and what each member gives it.
void check_fit_on(const Device& dev, uint64_t model_bytes, uint64_t start) {
  // A smaller --start-lba is advice only where one was given: llm_make_model, which shares this check,
  // has no such option, and the default leaves 1 MiB.
  if (!dev.striped())
    return check_fit(model_bytes, "namespace " + std::to_string(dev.nsid()), dev.lba_size(), dev.n_lbas(), start,
                     start == default_start_lba(dev) ? "use a larger device" : "use a larger device or a smaller --start-lba");
  const model::StripeGeometry& g = dev.stripe()->geometry();
  check_fit(model_bytes,
            "the striped set of " + std::to_string(g.members) + " members (" +
                text::human_bytes(double(g.member_data_blocks * g.lba_size)) +
                " from each: the smallest member less its 1 MiB stripe record area, in whole stripe units)",
            dev.lba_size(), dev.n_lbas(), start, "use larger members, or more of them");
}

}  // namespace

std::vector<Signature> check_target(Device& dev, uint64_t model_bytes, uint64_t start, bool record_only, bool force) {
  const uint32_t lba = dev.lba_size();
  check_start_lba(start, default_start_lba(dev));
  if (dev.discards_writes()) {
    throw RefusedError(dev.name() + " stores nothing (emu:null): the model would be thrown away; deploy to an image "
                       "file (emu:/path/disk.img,size=1G) or a real drive");
  }
  check_fit_on(dev, model_bytes, start);
  if (!dev.striped()) check_not_stripe_member(dev.block_io(), force);
  auto found = scan_device(dev.block_io(), start, !record_only);
  if (found.empty() || force) return found;
  std::string msg = "refusing to write to " + dev.name() + ": found ";
  for (size_t i = 0; i < found.size(); ++i)
    msg += (i ? ", " : "") + found[i].what + " at LBA " + std::to_string(found[i].lba);
  msg += " (deploy writes its record to LBA 0 and the model to " +
         lba_range(start, start + (model_bytes + lba - 1) / lba) +
         "). If this device really holds nothing you need, add --force";
  throw RefusedError(msg, std::move(found));
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
  p.command = "dd " + shell_quote("if=" + gguf_path) + " " + shell_quote("of=" + target) + " bs=" + bs_text(p.bs) +
              " seek=" + std::to_string(p.seek) + " oflag=direct conv=fsync status=progress";
  return p;
}

namespace {

// Steps 2 and 3 of a deploy, for a model whose header was checked: the record, then the bytes.
DeployResult deploy_checked(Device& dev, gguf::ByteSource& src, uint64_t bytes, const std::string& name,
                            const std::string& path, const DeployOptions& opt) {
  const uint32_t lba = dev.lba_size();
  const uint64_t start = opt.start_lba.value_or(default_start_lba(dev));
  // 2. Start LBA, fit, signatures.
  DeployResult res;
  res.overridden = check_target(dev, bytes, start, opt.record_only, opt.force);
  // 3. The record, then the bytes it describes.
  model::DeployRecord& r = res.record;
  r.model_start_lba = start;
  r.model_bytes = bytes;
  r.lba_size = lba;
  r.chunk_shift = model::choose_chunk_shift(bytes, lba);
  r.name = name;
  const auto t0 = std::chrono::steady_clock::now();
  if (opt.record_only) {
    if (dev.layout_pending())
      throw model::ModelError("--record-only cannot lay out a new striped set: dd cannot write the stripes; deploy "
                              "the model without --record-only");
    check_model_on_device(dev, path, bytes, start);
    r.chunk_crcs = model::compute_chunk_crcs(src, bytes, r.chunk_shift);
    write_block(dev, model::kRecordLba, model::serialize_record(r));
    dev.flush();
    if (opt.progress) opt.progress(bytes, bytes);
  } else {
    try {
      write_model(dev, src, r, opt, res.bytes_written);
    } catch (const std::exception& e) {
      throw model::ModelError("deploy to " + dev.name() + " failed after " + std::to_string(res.bytes_written) + " of " +
                              std::to_string(bytes) + " bytes: " + e.what() +
                              ". The device now holds an unfinished deploy, which ls, verify and the runtime refuse; "
                              "fix the cause and run the deploy again");
    }
  }
  res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return res;
}

}  // namespace

DeployResult deploy_model(Device& dev, const std::string& gguf_path, const DeployOptions& opt) {
  // 1. The file must be a regular file holding a GGUF (header only: milliseconds even for large files).
  const gguf::GgufFile file = open_model_file(gguf_path);
  gguf::FileSource src(gguf_path);
  return deploy_checked(dev, src, file.file_size(), model_name_of(file, gguf_path), gguf_path, opt);
}

DeployResult deploy_source(Device& dev, gguf::ByteSource& model, const std::string& name, const DeployOptions& opt) {
  if (opt.record_only) throw model::ModelError("--record-only needs a model file, not a generated model");
  const gguf::GgufFile file = gguf::GgufFile::read(model);  // a valid header whose tensors lie inside the source
  if (file.data_end() > model.size())
    throw model::ModelError(model.describe() + " ends before its last tensor");
  return deploy_checked(dev, model, model.size(), name, model.describe(), opt);
}

}  // namespace gpunvme::deploy
