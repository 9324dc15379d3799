// The GPU expert fetcher (MoE): routing ids in GPU memory -> the selected experts' slices read into a
// scratchpad, with no host round trip between the router and the reads. One fetch is two kernels on
// the caller's stream, enqueued by the host without waiting on anything:
//   1. place (one warp): collapses duplicate ids, looks each expert up in the cache (LRU by a touch
//      clock: the rules of ExpertCachePolicy, expert_cache_policy.h, which the CPU ExpertFetcher runs;
//      hits are touched first, a fault evicts the least recently used expert not selected by this
//      fetch; without a cache the experts are packed with cumulative offsets), writes the result
//      (GpuFetchResult + GpuFetchedExpert[]) and the reads. Validation, part offsets and sizes come
//      from ExpertLayout (expert_layout.h), as for the CPU fetcher;
//   2. pump (one warp per queue of the GpuSubmitter): issues the reads in the order consumers read them
//      (expert by expert, part by part), about FetcherOptions::read_window_bytes in flight, so that
//      they also end in about that order; as the last read of an expert completes it sets the expert's
//      `ready` word to the fetch's token (per-expert readiness).
// A consumer kernel on the same stream (or any kernel polling `ready`) finds each expert's parts at
// their scratchpad offsets through scratchpad().device().
//
//   GpuExpertFetcher f(ctrl, gpu, ExpertCatalog::from_map(map), {.max_experts_per_fetch = 8, .cache_bytes = 64 << 20});
//   router<<<..., s>>>(..., ids);                     // ids live in GPU memory
//   f.fetch(layer, ids, n_ids, s);                    // reads start as soon as the router is done
//   expert_ffn<<<..., s>>>(f.device_result(), f.device_experts(), f.scratchpad().device());
//
// Prefetch (MoE one-token lag): prefetch(layer, ids, s2) on another stream reads experts into the
// cache ahead of routing, with the same rules and place kernel (into tables of its own, so consumers
// of the previous fetch read theirs undisturbed); the next fetch() finds them as hits. Every fetch and
// prefetch runs after the previous one's reads (one chain event: one LRU state, one set of queues),
// so a prefetch overlaps the consumers' compute, not other reads. With a cache of >= 2 fetches a
// prefetch never evicts an expert of the previous fetch (its experts are the most recently used:
// at most max_experts_per_fetch older slots are taken), so its consumers may still be running.
//
// Overlapped fetch (fetch_overlapped + wait_part): the place and pump kernels run on the fetcher's
// own stream after the consumer's work so far, and the consumer's stream waits, part by part, only
// for the projection its next kernel reads (a stream wait on that part's readiness word: no SM
// spins): the expert kernels compute on the parts already read while the rest still stream. The
// consumer must enqueue the next fetch after its kernels of this one (stream order does that).
//
//   router<<<..., s>>>(..., ids);
//   f.fetch_overlapped(layer, ids, k, s);
//   for (k...) { f.wait_part(k, Projection::kGate, s); gate<<<..., s>>>(...); ... }
//
// A striped set (model/stripe.h; the second constructor): the catalog's extents are the set's logical
// volume, each part's reads are cut at stripe-unit boundaries into member reads (gpu_fetcher_parts.h),
// and each member's reads are issued by a pump on its own controller's queues (its GpuSubmitter) on a
// stream of its own that forks from the fetch's stream after the place kernel and joins it again
// before the fetch's chain event (as StripedSubmitter does for the streamer): the members read at once,
// all counting down the same readiness words. Concurrent prefetches take a prefetch submitter per
// member (all members or none).
//
// The next fetch on the stream reuses the result memory and (without a cache) the scratchpad, so a
// token's consumers must be enqueued on that stream before the next fetch. A failed read marks its
// expert failed (never ready) and the expert leaves the cache; wait() on the host throws it.
#pragma once
#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "host/controller.h"
#include "host/dma_memory.h"
#include "host/recovery.h"
#include "runtime/stream/cuda_owned.h"
#include "runtime/stream/cuda_stream.h"
#include "runtime/stream/expert_fetcher.h"
#include "runtime/stream/gpu_fetch_types.h"
#include "runtime/stream/gpu_submitter.h"

namespace gpunvme::device {
class DeviceBufferMap;
}
namespace gpunvme::model {
struct StripeGeometry;  // model/stripe.h (C++20: not included by this header, which .cu files include)
}

namespace gpunvme::stream {

// Device-side state of the fetcher (tables built once, cache, per-fetch scratch): gpu_fetcher_state.h.
// The place kernel is in gpu_expert_place.cu, the pump in gpu_expert_pump.cu, the tables are built in
// gpu_fetcher_tables.cu; this class (gpu_expert_fetcher*.cu) orders them and reads the results.
struct GpuFetcherState;

// One member of a striped set, as the fetcher reads from it.
struct GpuFetcherMember {
  host::Controller* controller = nullptr;
  GpuSubmitter* submitter = nullptr;           // its queues for fetches (and prefetches without their own)
  GpuSubmitter* prefetch_submitter = nullptr;  // concurrent prefetches' queues: every member's, or none
};

class GpuExpertFetcher {
 public:
  // options: max_experts_per_fetch, cache_bytes, warmup_tokens, nsid as for ExpertFetcher (the
  // scratchpad is GPU mapped; max_command_bytes is taken from the submitter's queues).
  // prefetch_submitter: queues of their own for prefetches (concurrent prefetches, launch() in the
  // .cu says the ordering): a fetch then waits for a prefetch's placement, not for its reads, so the
  // drive moves from a prefetch's reads to the fetch's without the gap of a round trip.
  GpuExpertFetcher(host::Controller& controller, GpuSubmitter& submitter, ExpertCatalog catalog,
                   const FetcherOptions& options = {}, GpuSubmitter* prefetch_submitter = nullptr);
  // The same over a striped set: members[m] is member m of `stripe` (its geometry; the catalog's
  // extents are the logical volume's), or without `stripe` one member, one namespace (as above).
  // Throws kInvalidArgument for a member count that is not the set's, members that differ in LBA or
  // page size, or prefetch submitters on some members only.
  GpuExpertFetcher(const std::vector<GpuFetcherMember>& members, const model::StripeGeometry* stripe,
                   ExpertCatalog catalog, const FetcherOptions& options = {});
  ~GpuExpertFetcher();
  GpuExpertFetcher(const GpuExpertFetcher&) = delete;
  GpuExpertFetcher& operator=(const GpuExpertFetcher&) = delete;

  // Enqueues the fetch of layer `layer`'s experts named by device_ids[0..n_ids) on `stream`.
  // n_ids <= max_ids(); ids may repeat (top-k of several tokens). Returns at once.
  void fetch(uint32_t layer, const uint32_t* device_ids, uint32_t n_ids, cuda_stream_t stream);
  // Enqueues on `stream` the reads of layer `layer`'s experts device_ids[0..n_ids) into the cache
  // (no result for consumers; a bad id reads nothing). Needs can_prefetch(). Returns at once.
  void prefetch(uint32_t layer, const uint32_t* device_ids, uint32_t n_ids, cuda_stream_t stream);
  bool can_prefetch() const { return capacity_ >= 2 * options_.max_experts_per_fetch; }
  // As fetch(), but the reads run on the fetcher's stream after `consumer`'s work so far, and return
  // at once for the consumer: before a kernel reads routing id k's projection `proj`, wait_part()
  // on the consumer's stream. Needs can_overlap().
  void fetch_overlapped(uint32_t layer, const uint32_t* device_ids, uint32_t n_ids, cuda_stream_t consumer);
  // Enqueues on `consumer` a wait until the last fetch's routing id k has its projection `proj` in
  // the scratchpad (or its read failed: the expert's `failed` word says so). k < that fetch's n_ids.
  void wait_part(uint32_t k, model::Projection proj, cuda_stream_t consumer);
  // The same for slice `slice` of that part only: bytes [slice * B, (slice + 1) * B) of it, B =
  // part_slice_bytes(part bytes) (gpu_fetch_types.h); waits for slices 0..s in turn let a kernel work
  // on a large part's first rows while the rest stream. part_slices(proj): the slices of the last
  // fetch's layer's parts of `proj` (the most of any of its experts; 1 below kMinSliceBytes).
  void wait_slice(uint32_t k, model::Projection proj, uint32_t slice, cuda_stream_t consumer);
  uint32_t part_slices(model::Projection proj) const;
  // Makes `s` wait for the latest demand fetch's placement (its experts' table written: which are hits,
  // pending or not, and where; its reads may still run): a hit that is not pending is in its slot then.
  void wait_placement(cuda_stream_t s) const;
  bool can_overlap() const { return wait_value_ != nullptr; }
  // Optional, on the consumer's stream after its kernels of the last fetch of `layer`: the time from
  // that fetch's reads done to here goes into PrefetchMetrics::tail_seconds (the compute the reads
  // did not hide).
  void consumed(uint32_t layer, cuda_stream_t consumer);
  // Host: waits (bounded) for the latest fetch's reads; throws on a bad id, too many experts or a
  // failed read; returns the result as FetchedExpert (offsets, parts, hit).
  std::vector<FetchedExpert> wait();

  const GpuFetchResult* device_result() const { return result_; }  // for kernels after fetch() on its stream
  const GpuFetchedExpert* device_experts() const { return experts_; }  // [max_experts_per_fetch]
  const uint32_t* device_selection() const { return selection_; }     // [n_ids]: distinct index of each id
  const uint32_t* device_part_ready() const { return part_ready_; }   // [max_ids * kReadyWordsPerId]: ready_word()
  uint32_t max_ids() const { return max_ids_; }

  const host::DmaBuffer& scratchpad() const { return scratch_; }
  uint64_t expert_slot_bytes() const { return expert_bytes_; }
  uint32_t cache_capacity() const { return capacity_; }
  uint64_t read_window_bytes() const { return options_.read_window_bytes; }
  uint64_t max_command_bytes() const { return uint64_t(max_blocks_) * lba_bytes_; }  // the largest read it issues
  // Copied from the device (synchronizes with the device).
  FetcherMetrics metrics() const;
  PrefetchMetrics prefetch_metrics() const;
  // Retries, resets behind the fetches (the submitter's count, issue #15).
  host::RecoveryStats recovery() const {  // every member's, summed
    host::RecoveryStats r;
    for (const Member& m : members_) {
      r += m.submitter->recovery();
      if (m.prefetch) r += m.prefetch->recovery();
    }
    return r;
  }
  uint32_t members() const { return uint32_t(members_.size()); }
  std::vector<uint32_t> resident_per_layer() const;
  const ExpertCatalog& catalog() const { return catalog_; }

 private:
  // The device-side state (counters, tables), after every fetch and prefetch so far ended; `what`
  // names the caller in a CUDA error.
  GpuFetcherState read_state(const char* what) const;
  // Retires finished fetches (block: waits, oldest first, until at most `keep` are outstanding).
  void retire_done(bool block, size_t keep = 0);
  static constexpr size_t kMaxOutstanding = 512;  // GpuSubmitterOptions::max_tickets is 1024
  void check_request(uint32_t layer, uint32_t n_ids) const;
  void launch(uint32_t which, uint32_t layer, const uint32_t* device_ids, uint32_t n_ids, cuda_stream_t stream);
  // A demand fetch between the stall clock's kernels (fetch() and fetch_overlapped()).
  void launch_demand(uint32_t layer, const uint32_t* device_ids, uint32_t n_ids, cuda_stream_t stream);
  void open_overlap();

  // One per member of a striped set (one namespace: one). Member 0's pumps run on the fetch's stream;
  // member m >= 1's on io (fetches, prefetches on the same queues) or pf_io (concurrent prefetches).
  struct Member {
    host::Controller* controller = nullptr;
    GpuSubmitter* submitter = nullptr;
    GpuSubmitter* prefetch = nullptr;            // concurrent prefetches' queues, or null
    std::unique_ptr<device::DeviceBufferMap> dst;  // the scratchpad's pages as its controller reaches them
    CudaStream io, pf_io;
    uint32_t read_depth = 0, pf_read_depth = 0;  // reads in flight per queue (options.read_window_bytes); 0: the queues'
  };
  GpuExpertFetcher(std::vector<Member> members, const model::StripeGeometry* stripe, ExpertCatalog catalog,
                   const FetcherOptions& options);
  static std::vector<Member> one_member(host::Controller& c, GpuSubmitter& s, GpuSubmitter* pf);
  static std::vector<Member> striped_members(const std::vector<GpuFetcherMember>& in);
  // Member m's pump of fetch table `which` (its submitter's kernel), forked from and joined to `stream`.
  void launch_member_pump(uint32_t m, bool own_queues, uint32_t which, uint32_t layer, cuda_stream_t stream);

  std::vector<Member> members_;
  bool concurrent_ = false;               // concurrent prefetches (every member has prefetch queues)
  ExpertCatalog catalog_;
  FetcherOptions options_;
  uint64_t page_ = 4096;
  uint32_t lba_bytes_ = 512;
  uint64_t expert_bytes_ = 0;
  uint32_t capacity_ = 0;
  uint32_t max_ids_ = 1024;
  uint32_t max_commands_ = 0;
  uint32_t max_blocks_ = 0;          // blocks of its largest read (MDTS, the queues, options.max_command_bytes)
  host::DmaBuffer scratch_;
  std::vector<host::DmaMapping> scratch_maps_;  // members 1..N-1: the scratchpad in their DMA space (after scratch_: unmapped first)
  DeviceArena memory_;                // the device state and every table it points to
  GpuFetcherState* state_ = nullptr;  // in memory_
  GpuFetchResult* result_ = nullptr;  // in memory_: the demand table's
  GpuFetchedExpert* experts_ = nullptr;
  uint32_t* selection_ = nullptr;
  CudaEvent chain_;                   // after every demand fetch's reads (and prefetch's, with one submitter)
  CudaEvent placed_;                  // after the latest place kernel (concurrent prefetches)
  CudaEvent demand_placed_;           // after the latest demand fetch's place kernel (wait_placement)
  CudaEvent pf_done_;                 // after the latest concurrent prefetch's reads
  CudaEvent forked_, joined_;         // a striped set: the members' streams after the placement, and back
  CudaStream stream_;                 // the overlapped fetches' stream
  CudaEvent routed_;                  // the consumer's work before an overlapped fetch
  void* wait_value_ = nullptr;        // the driver's cuStreamWaitValue32, or nullptr
  uint32_t* part_ready_ = nullptr;    // the demand fetch's readiness words (gpu_fetch_types.h)
  uint32_t pf_table_ = 1;             // the table of the last prefetch (kPrefetch, or kPrefetch + 1 alternating)
  uint32_t demand_token_ = 0;         // the last demand fetch's token, as place_experts counts them
  uint32_t last_ids_ = 0;             // its routing ids
  uint32_t last_layer_ = 0;           // and layer
  std::vector<uint32_t> slices_;      // [layer * kProjectionWords + proj]: the most slices of a part
  std::deque<std::pair<GpuSubmitter*, uint64_t>> tickets_;  // fetches not yet waited for, oldest first
  std::exception_ptr pending_error_;  // a failure found while retiring an older fetch
};

}  // namespace gpunvme::stream
