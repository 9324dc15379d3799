// bench/layer_stream: shared pieces of the layer-streaming benchmark (layer_stream.cpp) and its
// baselines (bench/baselines/). Everything here is plain C++ so that non-CUDA builds compile it; the
// GPU consumer lives in layer_stream_gpu.cu (CUDA builds only).
//
// The bytes: every mode brings each layer's block runs ("spans") into a *layer buffer* at the same
// offsets, then a consumer computes on it. The consumer folds a checksum over the layer's checksum
// ranges (every byte of them) and the host compares it with the checksum expected for that layer:
//   word  w at position tag t (a byte address, 8-aligned):  fold(w, t) = mix64(w ^ (t*K1 + K2))
//   checksum(layer) = sum over its ranges, over their 8-byte words (the last one zero-extended)
//                     of fold(word, range.tag + 8*i)   (mod 2^64)
// A word from the wrong block, a stale or zero word, or two swapped words change the sum.
// Generated layouts write pattern(t) = mix64(t ^ K3) at device byte t of drive d with
// t = (d << 56) | byte, so the expected checksum needs no read-back; a GGUF's expected checksums are
// folded from the file itself (tag = file offset).
#pragma once
#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "host/io_patterns.h"
#include "host/recovery.h"
#include "runtime/model/lba_map.h"

#if defined(__CUDACC__)
#define LS_HD __host__ __device__ __forceinline__
#else
#define LS_HD inline
#endif

namespace gpunvme::bench::ls {

using Clock = std::chrono::steady_clock;

// Llama-3-70B (and Llama-2-70B) Q6_K, one transformer block: hidden 8192, FFN 28672, 64 query and 8
// KV heads of 128 -> q 8192x8192, k and v 8192x1024, o 8192x8192, gate/up/down 8192x28672 =
// 855,638,016 weights; ggml Q6_K stores 256 weights in 210 bytes (6.5625 bits/weight) -> 701,890,560
// bytes, plus two F32 norm vectors (65,536 bytes) = 701,956,096 bytes (669.4 MiB) per layer.
// 80 such layers = 56.16 GB; with token_embd and output.weight (128256 x 8192, 862 MB each in Q6_K)
// the file is 57.88 GB, in line with the ~57.8-57.9 GB listed for published Llama-3(.1)-70B Q6_K GGUFs.
constexpr uint64_t kQ6kLayerBytes = 701'956'096;
constexpr uint32_t kQ6kLayers = 80;

using host::mix64;
LS_HD uint64_t pattern_word(uint64_t tag) { return mix64(tag ^ 0x6770756E766D6531ull); }
LS_HD uint64_t fold_word(uint64_t word, uint64_t tag) {
  return mix64(word ^ (tag * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull));
}
inline uint64_t drive_tag(uint32_t drive, uint64_t device_byte) { return (uint64_t(drive) << 56) | device_byte; }

// A checksum range in the layer buffer: `bytes` bytes from `dest` (8-aligned), first word's tag `tag`.
struct Range {
  uint64_t dest = 0;
  uint64_t bytes = 0;
  uint64_t tag = 0;
};

// A block run one drive holds: `bytes` (whole blocks) from `device_byte`, landing at `dest` in the
// layer buffer. The gpunvme modes read it through the streamer (same dest, checked); the baselines
// read it from the drive's file.
struct Span {
  uint32_t drive = 0;
  uint64_t device_byte = 0;
  uint64_t bytes = 0;
  uint64_t dest = 0;
};

struct Layout {
  std::string what;            // "generated: ..." or "GGUF ...", for the report
  uint32_t drives = 1;
  uint32_t lba_bytes = 4096;
  uint64_t align = 4096;       // block runs start at multiples of this in a drive's slot image
  uint64_t layer_buffer_bytes = 0;  // largest layer image (all drives)
  std::vector<uint64_t> drive_base;  // [drive] where its slot image starts in the layer buffer
  std::vector<std::vector<std::vector<model::Extent>>> extents;  // [drive][layer], for the streamers
  std::vector<std::vector<Span>> spans;    // [layer]
  std::vector<std::vector<Range>> ranges;  // [layer]
  std::vector<uint64_t> expected;          // [layer] checksum
  std::vector<uint64_t> layer_read_bytes;  // [layer] bytes read (whole blocks)
  std::vector<uint64_t> layer_data_bytes;  // [layer] bytes checksummed
  uint32_t layers() const { return uint32_t(spans.size()); }
  uint64_t read_bytes(uint32_t n) const {  // of the first n layers
    uint64_t b = 0;
    for (uint32_t l = 0; l < n && l < layers(); ++l) b += layer_read_bytes[l];
    return b;
  }
};

// Checksum of `ranges` over a layer buffer in host memory (the reference the GPU kernel matches).
uint64_t host_checksum(const uint8_t* layer_buffer, std::span<const Range> ranges);
// Checksum of the generated pattern over `bytes` bytes from tag `tag` (8-aligned, whole words).
uint64_t pattern_checksum(uint64_t tag, uint64_t bytes);
// Fills `dst` with the generated pattern for tags [tag, tag + bytes) (tag 8-aligned, bytes % 8 == 0).
void fill_pattern(uint8_t* dst, uint64_t tag, uint64_t bytes);

// Bytes of one layer in host memory, to go into the layer buffer at `dest`.
struct HostPart {
  const uint8_t* src = nullptr;
  uint64_t bytes = 0;
  uint64_t dest = 0;
};

// What a consumer measured over one pass.
struct ConsumerPass {
  double compute_s = 0;         // summed compute (checksum + synthetic work) time of the layers
  double copy_s = 0;            // summed host-to-device copy time (GPU consumer), 0 otherwise
  std::vector<uint64_t> sums;   // [layer] checksum
};

// The compute side. GPU (CUDA builds with a GPU): two layer buffers in device memory, a copy stream
// and a compute stream; each layer is copied in (after the kernel of layer l-2 left its buffer) and
// a kernel reads every byte of its checksum ranges, folds the checksum and then spins until the
// synthetic compute time has passed since it started. CPU (no CUDA, or no GPU): the same on the
// calling thread, with a memcpy standing in for the copy.
class Consumer {
 public:
  virtual ~Consumer() = default;
  virtual std::string describe() const = 0;
  virtual bool on_gpu() const = 0;
  // Starts a pass over layers [0, n) with `compute_ns` of synthetic compute per layer.
  virtual void begin_pass(uint32_t n, uint64_t compute_ns) = 0;
  // Layer l is in host memory (pinned, for a GPU): copy it into layer buffer l % 2, then compute.
  // wait_copy: return only when the host bytes may be reused; else the copy is merely enqueued on
  // copy_stream() (GPU-ordered sources release their slots on that stream).
  virtual void consume_host(uint32_t l, std::span<const HostPart> parts, bool wait_copy) = 0;
  // For sources that fill the device buffer themselves (cuFile): blocks until layer buffer l % 2
  // is free of layer l-2 (waits until consume_device(l-2) was called, then for its kernel) and
  // returns it; consume_device(l) then computes on it. Callable from another thread.
  virtual void* device_buffer_for(uint32_t l) = 0;
  virtual void consume_device(uint32_t l) = 0;
  // cudaStream_t of the copies (GPU consumer), else nullptr.
  virtual void* copy_stream() = 0;
  // Waits for every copy and kernel of the pass; returns the checksums and times.
  virtual ConsumerPass end_pass() = 0;
  // Waits for whatever was enqueued, ignoring errors: modes call it before freeing memory a copy may
  // still read (after an exception in the middle of a pass).
  virtual void quiesce() noexcept {}
};

// CPU consumer (always available).
std::unique_ptr<Consumer> make_host_consumer(const Layout& layout);
#if GPUNVME_HAVE_CUDA
// GPU consumer on the current device; throws std::runtime_error naming the CUDA call that failed.
std::unique_ptr<Consumer> make_gpu_consumer(const Layout& layout);
// Pinned host memory (cudaHostAlloc) for staging; freed with free_pinned.
void* alloc_pinned(uint64_t bytes);
void free_pinned(void* p);
#endif

// A mode that cannot run here (no CUDA, no cuFile, no file to read): not a failure.
class Unavailable : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// One timed pass of a mode over layers [0, n).
struct PassResult {
  double wall_s = 0;        // first read issued .. last compute finished
  double landed_s = 0;      // first read issued .. the last layer's bytes landed (host memory: slot or
                            // staging; device memory for cuFile) - the read stage alone; 0 = unknown
  ConsumerPass consumer;
  std::string note;         // anything the mode wants said (e.g. cuFile's mode)
  // Recovery during the pass (gpunvme modes): non-zero only when a drive misbehaved (or faults were
  // injected from the device string).
  host::RecoveryStats recovery;
};

class Mode {
 public:
  virtual ~Mode() = default;
  virtual PassResult stream(uint32_t n, uint64_t compute_ns) = 0;
  virtual std::string note() const { return ""; }
};

}  // namespace gpunvme::bench::ls
