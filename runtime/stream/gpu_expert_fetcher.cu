// GpuExpertFetcher (gpu_expert_fetcher.h): building the tables, ordering each fetch's and prefetch's
// kernels on the streams, and the host's wait. The overlapped fetch is in gpu_expert_fetcher_overlap.cu,
// the metrics in gpu_expert_fetcher_metrics.cu, the kernels in gpu_expert_place.cu / gpu_expert_pump.cu.
#include "runtime/stream/gpu_expert_fetcher.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <string>

#include "device/queue_set.h"
#include "host/error.h"
#include "runtime/stream/expert_layout.h"
#include "runtime/stream/gpu_fetcher_kernels.h"
#include "runtime/stream/gpu_fetcher_tables.h"
#include "runtime/stream/layer_streamer.h"

namespace gpunvme::stream {

using device::check_cuda;

std::vector<GpuExpertFetcher::Member> GpuExpertFetcher::one_member(host::Controller& c, GpuSubmitter& s, GpuSubmitter* pf) {
  std::vector<Member> m(1);
  m[0].controller = &c;
  m[0].submitter = &s;
  m[0].prefetch = pf;
  return m;
}

GpuExpertFetcher::GpuExpertFetcher(host::Controller& controller, GpuSubmitter& submitter, ExpertCatalog catalog,
                                   const FetcherOptions& options, GpuSubmitter* prefetch_submitter)
    : GpuExpertFetcher(one_member(controller, submitter, prefetch_submitter), nullptr, std::move(catalog), options) {}

GpuExpertFetcher::GpuExpertFetcher(const std::vector<GpuFetcherMember>& members, const model::StripeGeometry* stripe,
                                   ExpertCatalog catalog, const FetcherOptions& options)
    : GpuExpertFetcher(striped_members(members), stripe, std::move(catalog), options) {}

std::vector<GpuExpertFetcher::Member> GpuExpertFetcher::striped_members(const std::vector<GpuFetcherMember>& in) {
  if (in.empty()) throw Error(ErrorKind::kInvalidArgument, "GPU expert fetcher: no members");
  std::vector<GpuExpertFetcher::Member> out(in.size());
  for (size_t m = 0; m < in.size(); ++m) {
    if (!in[m].controller || !in[m].submitter)
      throw Error(ErrorKind::kInvalidArgument, "GPU expert fetcher: member " + std::to_string(m) + " has no controller or submitter");
    if ((in[m].prefetch_submitter != nullptr) != (in[0].prefetch_submitter != nullptr))
      throw Error(ErrorKind::kInvalidArgument, "GPU expert fetcher: prefetch queues on some members of the striped set "
                                               "only; give every member its prefetch submitter, or none");
    out[m].controller = in[m].controller;
    out[m].submitter = in[m].submitter;
    out[m].prefetch = in[m].prefetch_submitter;
  }
  return out;
}

GpuExpertFetcher::GpuExpertFetcher(std::vector<Member> members, const model::StripeGeometry* stripe, ExpertCatalog catalog,
                                   const FetcherOptions& options)
    : members_(std::move(members)), catalog_(std::move(catalog)), options_(options) {
  host::Controller& controller = *members_[0].controller;
  concurrent_ = members_[0].prefetch != nullptr;
  const auto& ns = controller.namespace_info(options_.nsid);
  lba_bytes_ = ns.lba_bytes;
  page_ = controller.page_bytes();
  for (const Member& m : members_)
    if (m.controller->namespace_info(options_.nsid).lba_bytes != lba_bytes_ || m.controller->page_bytes() != page_)
      throw Error(ErrorKind::kInvalidArgument, "GPU expert fetcher: the members of the striped set differ in LBA size or "
                                               "controller page size");
  ExpertLayoutSpec spec;
  spec.lba_bytes = lba_bytes_;
  spec.namespace_blocks = fetcher_volume_blocks(stripe, members_.size(), lba_bytes_, ns.blocks);  // a set: its logical volume
  spec.page = page_;
  spec.max_experts_per_fetch = options_.max_experts_per_fetch;
  spec.cache_bytes = options_.cache_bytes;
  spec.min_cache_experts = options_.min_cache_experts;
  spec.max_parts = kMaxExpertParts;
  spec.max_part_blocks = 0xFFFFFFFFull;  // GpuPart::blocks
  // Validation, packing and sizing exactly as the CPU fetcher (expert_layout.h).
  const ExpertLayout layout(catalog_, spec, "GPU expert fetcher");
  expert_bytes_ = layout.slot_bytes();
  capacity_ = layout.capacity();
  uint32_t max_blocks = UINT32_MAX;
  for (const Member& m : members_) {
    max_blocks = std::min({max_blocks, command_block_limit(*m.controller, options_.nsid, options_.max_command_bytes),
                           m.submitter->queues().max_blocks_per_command()});
    if (m.prefetch) max_blocks = std::min(max_blocks, m.prefetch->queues().max_blocks_per_command());
  }
  const FetcherPartTables tables = build_part_tables(catalog_, layout, max_blocks, stripe);
  slices_ = tables.slices;
  const uint64_t max_cmds = tables.max_cmds_per_expert * options_.max_experts_per_fetch;
  if (max_cmds > 0xFFFFFFFFull) throw Error(ErrorKind::kInvalidArgument, "GPU expert fetcher: too many reads per fetch");
  max_commands_ = uint32_t(max_cmds);
  max_blocks_ = max_blocks;
  auto depth = [&](const GpuSubmitter& sub) -> uint32_t {
    if (options_.read_window_bytes == 0) return 0;
    const uint64_t per_round = uint64_t(sub.queue_count()) * max_blocks * lba_bytes_;  // one read per queue
    return uint32_t(std::clamp<uint64_t>((options_.read_window_bytes + per_round - 1) / per_round, 1, 1u << 16));
  };
  uint32_t demand_queues = 0;
  for (Member& m : members_) {  // every drive of a set gets the window: each needs its reads in flight
    m.read_depth = depth(*m.submitter);
    m.pf_read_depth = m.prefetch ? depth(*m.prefetch) : m.read_depth;
    demand_queues += m.submitter->queue_count();
  }
  host::DmaOptions mem{host::HugePages::kAuto};
  mem.gpu_mapped = true;
  scratch_ = host::DmaBuffer(controller.transport(), layout.scratch_bytes(), mem);
  scratch_maps_.reserve(members_.size());
  for (size_t i = 0; i < members_.size(); ++i) {
    Member& m = members_[i];
    if (i == 0) {
      m.dst = std::make_unique<device::DeviceBufferMap>(scratch_, page_);
      continue;
    }
    scratch_maps_.emplace_back(m.controller->transport(), scratch_);
    m.dst = std::make_unique<device::DeviceBufferMap>(scratch_, scratch_maps_.back().translation(), page_);
    m.io = make_priority_stream("GPU expert fetcher: a member's stream");
    if (m.prefetch) m.pf_io = make_priority_stream("GPU expert fetcher: a member's prefetch stream");
  }

  GpuFetcherState st;
  st.n_layers = catalog_.n_layers;
  st.n_experts = catalog_.n_experts;
  st.max_experts = options_.max_experts_per_fetch;
  st.capacity = capacity_;
  st.max_commands = max_commands_;
  st.members = uint32_t(members_.size());
  st.lba_shift = uint32_t(__builtin_ctz(lba_bytes_));
  st.max_blocks = max_blocks;
  st.warmup_tokens = options_.warmup_tokens;
  st.expert_stride = expert_bytes_;
  st.concurrent_prefetch = concurrent_ ? 1 : 0;
  st.cut_wrong = concurrent_ && options_.cut_wrong_prefetches ? 1 : 0;
  st.gate_reads = members_[0].read_depth ? demand_queues : ~0u;  // queue_behind_demand: one read per queue
  state_ = upload_fetcher_state(st, tables, max_ids_, memory_);
  part_ready_ = st.table[kDemand].part_ready;
  result_ = st.table[kDemand].result;
  experts_ = st.table[kDemand].experts;
  selection_ = st.table[kDemand].selection;
  for (CudaEvent* e : {&chain_, &placed_, &demand_placed_, &pf_done_, &forked_, &joined_}) *e = make_event("cudaEventCreate(expert fetcher)");
  open_overlap();
}

GpuExpertFetcher::~GpuExpertFetcher() {
  // Reads must not land in a freed scratchpad: drain what is still in flight. The device memory,
  // events and stream (members) are released after this.
  for (const auto& [sub, t] : tickets_) {
    try {
      sub->wait(t);
    } catch (...) {
    }
  }
  cudaDeviceSynchronize();
}

void GpuExpertFetcher::retire_done(bool block, size_t keep) {
  while (tickets_.size() > keep && (block || tickets_.front().first->done(tickets_.front().second))) {
    const auto [sub, t] = tickets_.front();
    tickets_.pop_front();
    try {
      sub->wait(t);
    } catch (...) {
      if (!pending_error_) pending_error_ = std::current_exception();
    }
  }
}

void GpuExpertFetcher::check_request(uint32_t layer, uint32_t n_ids) const {
  if (n_ids > max_ids_)
    throw Error(ErrorKind::kInvalidArgument, "GPU expert fetcher: " + std::to_string(n_ids) +
                                                 " routing ids in one fetch; at most " + std::to_string(max_ids_));
  if (layer >= catalog_.n_layers)
    throw Error(ErrorKind::kInvalidArgument, "GPU expert fetcher: layer " + std::to_string(layer) +
                                                 " has no experts (" + std::to_string(catalog_.n_layers) + " layers)");
}

// Place and pump kernels of one fetch or prefetch on `stream`. The place kernels run one at a time
// in host order (one LRU state); a pump owns its queues until its reads end. With one submitter
// every fetch and prefetch waits for the previous one's reads (the chain). With a prefetch
// submitter (concurrent prefetches) a demand fetch waits only for the previous demand's reads and
// the latest placement: it starts its reads while a prefetch still reads, and its hits on experts
// not yet in are published by its pump's extra warp (publish_pending_hits). A prefetch waits for the
// demand's placement and the previous prefetch's reads (its victims and failed reads are then
// settled), and its pump for the demand's reads to be all issued (queue_behind_demand); it takes
// the other prefetch table, which the demand's pump may still read. Why no victim is being read: a
// demand never evicts the running prefetch's slots (the most recently placed; with a cache of >= 2
// fetches the older slots suffice), and a prefetch never evicts the demand's slots (the most
// recently used, same reason) nor the previous prefetch's before its reads ended.
void GpuExpertFetcher::launch(uint32_t which, uint32_t layer, const uint32_t* device_ids, uint32_t n_ids,
                              cuda_stream_t stream) {
  retire_done(false);
  // The submitters hold a bounded number of tickets (a batched pass enqueues a fetch per token and
  // layer): past half of them the host waits for the oldest.
  retire_done(true, kMaxOutstanding - 1);
  const bool concurrent = concurrent_;
  const bool own_queues = concurrent && which != kDemand;
  auto wait_for = [&](const CudaEvent& e, const char* what) { check_cuda(cudaStreamWaitEvent(stream, e.get(), 0), what); };
  if (own_queues) {  // after the demand's placement (its reads first: queue_behind_demand) and the last prefetch's reads
    wait_for(placed_, "GPU expert fetcher: ordering after the fetch's placement");
    wait_for(pf_done_, "GPU expert fetcher: ordering after the previous prefetch");
  } else {
    wait_for(chain_, "GPU expert fetcher: ordering after the previous fetch");
    if (concurrent) wait_for(placed_, "GPU expert fetcher: ordering after the prefetch's placement");
  }
  launch_place_experts(state_, which, layer, device_ids, n_ids, stream);
  check_cuda(cudaGetLastError(), "GPU expert fetcher: launching the place kernel");
  if (concurrent) check_cuda(cudaEventRecord(placed_.get(), stream), "GPU expert fetcher: placement event");
  if (which == kDemand) check_cuda(cudaEventRecord(demand_placed_.get(), stream), "GPU expert fetcher: placement event");
  // A striped set: members 1..N-1 read on streams of their own, after the placement (fork) ...
  if (members_.size() > 1) check_cuda(cudaEventRecord(forked_.get(), stream), "GPU expert fetcher: fork event");
  for (uint32_t m = 0; m < members_.size(); ++m) launch_member_pump(m, own_queues, which, layer, stream);
  check_cuda(cudaEventRecord((own_queues ? pf_done_ : chain_).get(), stream), "GPU expert fetcher: chain event");
  if (which == kDemand) {
    ++demand_token_;
    last_ids_ = n_ids;
    last_layer_ = layer;
  }
}

void GpuExpertFetcher::launch_member_pump(uint32_t m, bool own_queues, uint32_t which, uint32_t layer,
                                          cuda_stream_t stream) {
  Member& mb = members_[m];
  GpuSubmitter& sub = own_queues ? *mb.prefetch : *mb.submitter;
  cuda_stream_t s = m == 0 ? stream : (own_queues ? mb.pf_io : mb.io).get();
  if (m > 0) check_cuda(cudaStreamWaitEvent(s, forked_.get(), 0), "GPU expert fetcher: a member waits for the placement");
  GpuFetcherState* state = state_;
  const device::DeviceBuffer dst = mb.dst->get();
  const uint32_t depth = own_queues ? mb.pf_read_depth : mb.read_depth;
  const uint32_t extra = concurrent_ && which == kDemand && m == 0 ? 1 : 0;  // publish_pending_hits
  const uint64_t t = sub.issue_kernel(
      s, [&](const TicketLaunch& l) { launch_pump_fetch(l, l.queue_count + extra, state, which, m, dst, depth, s); },
      [state, layer, which, m, members = members_.size()](uint64_t g) {
        GpuFetcherState st;
        FetchCmd c;
        if (cudaMemcpy(&st, state, sizeof(st), cudaMemcpyDeviceToHost) != cudaSuccess ||
            cudaMemcpy(&c, st.table[which].cmds + size_t(m) * st.max_commands + g, sizeof(c), cudaMemcpyDeviceToHost) != cudaSuccess)
          return std::string("expert read #") + std::to_string(g);
        return std::string(which != kDemand ? "expert prefetch read #" : "expert read #") + std::to_string(g) +
               " of layer " + std::to_string(layer) + (members > 1 ? ", member " + std::to_string(m) : std::string()) +
               ", LBA " + std::to_string(c.lba) + ".." + std::to_string(c.lba + c.blocks - 1);
      });
  tickets_.emplace_back(&sub, t);
  // ... and the fetch's stream waits for every member's reads (join) before its chain event.
  if (m > 0) {
    check_cuda(cudaEventRecord(joined_.get(), s), "GPU expert fetcher: join event");
    check_cuda(cudaStreamWaitEvent(stream, joined_.get(), 0), "GPU expert fetcher: waiting for a member's reads");
  }
}

void GpuExpertFetcher::fetch(uint32_t layer, const uint32_t* device_ids, uint32_t n_ids, cuda_stream_t stream) {
  check_request(layer, n_ids);
  launch_demand(layer, device_ids, n_ids, stream);
}

void GpuExpertFetcher::launch_demand(uint32_t layer, const uint32_t* device_ids, uint32_t n_ids, cuda_stream_t stream) {
  // The stall clock starts before the wait on the chain: time waiting for a prefetch counts.
  launch_stall_begin(state_, stream);
  launch(kDemand, layer, device_ids, n_ids, stream);
  launch_stall_end(state_, layer, stream);
  check_cuda(cudaGetLastError(), "GPU expert fetcher: launching the stall clock");
}

void GpuExpertFetcher::wait_placement(cuda_stream_t s) const {
  check_cuda(cudaStreamWaitEvent(reinterpret_cast<cudaStream_t>(s), demand_placed_.get(), 0),
             "GPU expert fetcher: waiting for the placement");
}

void GpuExpertFetcher::consumed(uint32_t layer, cuda_stream_t consumer) {
  check_request(layer, 0);
  launch_consumed_clock(state_, layer, demand_token_, consumer);
  check_cuda(cudaGetLastError(), "GPU expert fetcher: launching the tail clock");
}

void GpuExpertFetcher::prefetch(uint32_t layer, const uint32_t* device_ids, uint32_t n_ids, cuda_stream_t stream) {
  if (!can_prefetch())
    throw Error(ErrorKind::kInvalidArgument,
                "GPU expert fetcher: a prefetch needs a cache of at least 2 fetches (" +
                    std::to_string(2 * options_.max_experts_per_fetch) + " experts); the cache holds " +
                    std::to_string(capacity_) + ": raise cache_bytes, or do not prefetch");
  check_request(layer, n_ids);
  // Concurrent prefetches alternate between two tables (the previous one may still be read by the
  // pump of the fetch it served).
  if (concurrent_) pf_table_ = pf_table_ == kPrefetch ? kPrefetch + 1 : kPrefetch;
  launch(pf_table_, layer, device_ids, n_ids, stream);
}

std::vector<FetchedExpert> GpuExpertFetcher::wait() {
  retire_done(true);
  if (pending_error_) {
    std::exception_ptr e = pending_error_;
    pending_error_ = nullptr;
    std::rethrow_exception(e);
  }
  GpuFetchResult r;
  check_cuda(cudaMemcpy(&r, result_, sizeof(r), cudaMemcpyDeviceToHost), "cudaMemcpy(fetch result)");
  if (r.error != fetch_error::kNone) {
    const char* what = r.error == fetch_error::kBadExpertId ? "is not an expert of this model"
                       : r.error == fetch_error::kTooMany  ? "is one distinct expert more than max_experts_per_fetch"
                                                           : "has no slices in the model";
    throw Error(ErrorKind::kInvalidArgument, "GPU expert fetcher: routing id " + std::to_string(r.error_value) +
                                                 " of layer " + std::to_string(r.layer) + " " + what +
                                                 " (" + std::to_string(catalog_.n_experts) + " experts per layer, " +
                                                 std::to_string(options_.max_experts_per_fetch) + " per fetch); nothing was read");
  }
  std::vector<GpuFetchedExpert> ex(r.count);
  if (r.count)
    check_cuda(cudaMemcpy(ex.data(), experts_, sizeof(GpuFetchedExpert) * r.count, cudaMemcpyDeviceToHost),
               "cudaMemcpy(fetched experts)");
  std::vector<FetchedExpert> out;
  for (const GpuFetchedExpert& e : ex) {
    FetchedExpert f;
    f.expert = e.expert;
    f.offset = e.offset;
    f.bytes = e.bytes;
    f.hit = e.hit != 0;
    for (uint32_t k = 0; k < e.part_count; ++k)
      f.parts.push_back(FetchedPart{model::Projection(e.part_proj[k]), e.part_offset[k], e.part_bytes[k]});
    out.push_back(std::move(f));
  }
  return out;
}

}  // namespace gpunvme::stream
