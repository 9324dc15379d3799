// Baseline "cufile": cuFileRead straight into device layer buffer l % 2 (GPUDirect Storage API).
// Without the nvidia-fs kernel module, or on a filesystem GDS does not support (tmpfs), cuFile runs
// in compatibility mode: POSIX reads into its own pinned bounce buffers and copies to the GPU. We
// allow that mode explicitly: unless CUFILE_ENV_PATH_JSON is already set, it points to a small
// generated cufile.json with "allow_compat_mode": true (the documented way to configure cuFile per
// application). A producer thread hands `chunk`-sized cuFileReads to reader threads, then the main
// thread enqueues the compute kernel. Double-buffered (the reads of layer l+1 overlap compute on l).
//
// Built only when meson found cufile.h and libcufile (GPUNVME_HAVE_CUFILE); otherwise, and when the
// driver cannot be opened at run time, the mode reports "not available" with the reason.
#include "bench/baselines/baseline.h"

#if GPUNVME_HAVE_CUFILE && GPUNVME_HAVE_CUDA
#include <cufile.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "runtime/guard/output_file.h"
#endif

namespace gpunvme::bench::ls {

#if GPUNVME_HAVE_CUFILE && GPUNVME_HAVE_CUDA
namespace {

std::string cufile_error(CUfileError_t e) {
  std::string s = CUFILE_ERRSTR(e.err);
  if (IS_CUDA_ERR(e)) s += " (CUDA driver error " + std::to_string(int(e.cu_err)) + ")";
  return s;
}

// Points cuFile at a config allowing compatibility mode, unless the user chose a config.
std::string configure_compat_mode() {
  if (const char* p = std::getenv("CUFILE_ENV_PATH_JSON")) return std::string("config from CUFILE_ENV_PATH_JSON=") + p;
  const std::string path = "/tmp/gpunvme-ls-cufile-" + std::to_string(getpid()) + ".json";
  try {  // a file like any output (runtime/guard/output_file.h): complete or not there
    guard::OutputFile f = guard::OutputFile::open(path, {});
    f.write("{\n"
            "  \"logging\": { \"level\": \"ERROR\" },\n"
            "  \"properties\": { \"allow_compat_mode\": true }\n"
            "}\n");
    f.commit();
  } catch (const std::exception& e) {
    return "default cuFile config (" + std::string(e.what()) + ")";
  }
  setenv("CUFILE_ENV_PATH_JSON", path.c_str(), 1);
  return "config " + path + " (allow_compat_mode)";
}

bool nvidia_fs_loaded() { return access("/proc/driver/nvidia-fs/version", F_OK) == 0; }

class CufileMode final : public Mode {
 public:
  explicit CufileMode(const BaselineContext& ctx) : ctx_(ctx), pool_(ctx.threads) {
    if (!ctx.consumer->on_gpu()) throw Unavailable("cuFile reads into GPU memory; there is no GPU consumer");
    config_ = configure_compat_mode();
    CUfileError_t st = cuFileDriverOpen();
    if (st.err != CU_FILE_SUCCESS) throw Unavailable("cuFileDriverOpen: " + cufile_error(st) + "; " + config_);
    driver_open_ = true;
    for (const BaselineFile& f : ctx.files) {
      int fd = open(f.path.c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC);
      bool direct = fd >= 0;
      if (fd < 0) fd = open(f.path.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0) {
        close_all();
        throw Unavailable("cannot open " + f.path + ": " + std::strerror(errno));
      }
      fds_.push_back(fd);
      CUfileDescr_t descr{};
      descr.handle.fd = fd;
      descr.type = CU_FILE_HANDLE_TYPE_OPAQUE_FD;
      CUfileHandle_t h{};
      st = cuFileHandleRegister(&h, &descr);
      if (st.err != CU_FILE_SUCCESS) {
        const std::string why = cufile_error(st);
        close_all();
        throw Unavailable("cuFileHandleRegister(" + f.path + (direct ? ", O_DIRECT" : "") + "): " + why + "; " + config_);
      }
      handles_.push_back(h);
      direct_ = direct_ && direct;
    }
    note_ = std::string(nvidia_fs_loaded() ? "nvidia-fs loaded (GDS where the filesystem supports it, else compat mode)"
                                           : "compatibility mode (nvidia-fs not loaded)") +
            (direct_ ? ", O_DIRECT fds" : ", buffered fds") + ", " + config_;
  }
  ~CufileMode() override {
    ctx_.consumer->quiesce();
    close_all();
  }

  std::string note() const override { return note_; }

  PassResult stream(uint32_t n, uint64_t compute_ns) override {
    Consumer& c = *ctx_.consumer;
    PassResult r = staged_pass(
        c, n, compute_ns, nullptr, nullptr, [&](uint32_t l, uint8_t*) { fill(l); },
        [&](uint32_t l, uint8_t*) { c.consume_device(l); });
    r.note = note_;
    return r;
  }

 private:
  void fill(uint32_t l) {
    void* dev = ctx_.consumer->device_buffer_for(l);
    layer_chunks(ctx_, l, &chunks_);
    pool_.run(chunks_.size(), [&](uint64_t i) {
      const FileChunk& k = chunks_[i];
      const int64_t due = ctx_.pacer ? ctx_.pacer->admit(k.drive, k.bytes) : 0;
      const ssize_t got = cuFileRead(handles_[k.drive], dev, k.bytes, off_t(k.file_offset), off_t(k.dest));
      if (got < 0) {
        const std::string why = got == -1 ? std::string(std::strerror(errno))
                                          : std::string(CUFILE_ERRSTR(CUfileOpError(-got)));
        throw std::runtime_error("cufile: cuFileRead(" + ctx_.files[k.drive].path + ", " + std::to_string(k.bytes) +
                                 " bytes at " + std::to_string(k.file_offset) + "): " + why);
      }
      // Past the file's end cuFileRead stops short; those bytes are not checksummed (GGUF tails).
      if (ctx_.pacer) wait_until_ns(due);
    });
  }

  void close_all() {
    for (auto h : handles_) cuFileHandleDeregister(h);
    handles_.clear();
    for (int fd : fds_) close(fd);
    fds_.clear();
    if (driver_open_) cuFileDriverClose();
    driver_open_ = false;
  }

  BaselineContext ctx_;
  ThreadPool pool_;
  std::string config_, note_;
  bool driver_open_ = false;
  bool direct_ = true;
  std::vector<int> fds_;
  std::vector<CUfileHandle_t> handles_;
  std::vector<FileChunk> chunks_;
};

}  // namespace

std::unique_ptr<Mode> make_cufile_mode(const BaselineContext& ctx) { return std::make_unique<CufileMode>(ctx); }

#else

std::unique_ptr<Mode> make_cufile_mode(const BaselineContext&) {
#if !GPUNVME_HAVE_CUDA
  throw Unavailable("this build has no CUDA (cuFile reads into GPU memory)");
#else
  throw Unavailable("cufile.h / libcufile were not found when this build was configured (CUDA toolkit's "
                    "include/ and lib64/; install the toolkit's cuFile (GDS) package and re-run meson setup)");
#endif
}

#endif

}  // namespace gpunvme::bench::ls
