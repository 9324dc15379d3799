#include "runtime/stream/layer_streamer.h"

#include <algorithm>
#include <string>
#include <thread>
#include <utility>

#include "host/cuda_device.h"
#include "host/error.h"

namespace gpunvme::stream {

namespace {
double ms_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}
}  // namespace

uint32_t command_block_limit(const host::Controller& controller, uint32_t nsid, uint64_t max_command_bytes) {
  const auto& ns = controller.namespace_info(nsid);
  uint64_t blocks = controller.max_blocks_per_command(nsid);
  if (max_command_bytes > 0) blocks = std::min<uint64_t>(blocks, std::max<uint64_t>(1, max_command_bytes / ns.lba_bytes));
  return uint32_t(std::clamp<uint64_t>(blocks, 1, nvme::kMaxBlocksPerCommand));
}

uint64_t slot_bytes_for(std::span<const std::vector<model::Extent>> layers, uint32_t lba_bytes, uint64_t align, uint64_t page) {
  uint64_t widest = 0;
  for (const auto& L : layers) widest = std::max(widest, plan::packed_bytes(L, lba_bytes, align));
  return std::max<uint64_t>((widest + page - 1) / page * page, page);
}

LayerStreamer::LayerStreamer(host::Controller& controller, Submitter& submitter,
                             std::vector<std::vector<model::Extent>> layers, const StreamerOptions& options)
    : controller_(controller), submitter_(submitter), layers_(std::move(layers)), options_(options) {
  if (options_.slots == 0 || options_.slots > 64)
    throw Error(ErrorKind::kInvalidArgument, "streamer: " + std::to_string(options_.slots) + " slots; use 1..64");
  if (layers_.empty()) throw Error(ErrorKind::kInvalidArgument, "streamer: no layers to stream");
  const auto& ns = controller.namespace_info(options_.nsid);
  geometry_.nsid = options_.nsid;
  geometry_.lba_bytes = ns.lba_bytes;
  geometry_.max_blocks = command_block_limit(controller, options_.nsid, options_.max_command_bytes);
  const uint64_t page = controller.page_bytes();
  const uint64_t align = options_.align ? options_.align : page;
  geometry_.namespace_blocks = ns.blocks;
  // Every extent obeys the rules before any slot is sized (a wrapped block range would size it wrong).
  for (size_t l = 0; l < layers_.size(); ++l)
    for (size_t i = 0; i < layers_[l].size(); ++i)
      plan::check_extent(layers_[l][i], ns.lba_bytes, ns.blocks,
                         "streamer: layer " + std::to_string(l) + " extent " + std::to_string(i) + " (namespace " +
                             std::to_string(options_.nsid) + ")");
  allocate_slots(controller, align);
  plans_.reserve(layers_.size() * slots_.size());
  for (size_t l = 0; l < layers_.size(); ++l)
    for (const Slot& s : slots_) plans_.push_back(plan::build_plan(layers_[l], geometry_, s.table, align));
  // A stream-ordered submitter gets every template in device memory now, so begin() only launches a kernel.
  if (StreamOrdered* o = submitter_.stream_ordered())
    for (const auto& p : plans_) o->prepare(p.commands);
}

void LayerStreamer::allocate_slots(host::Controller& controller, uint64_t align) {
  const uint64_t page = controller.page_bytes();
  slot_bytes_ = slot_bytes_for(layers_, geometry_.lba_bytes, align, page);
  host::DmaOptions mem{options_.hugepages};
  mem.gpu_mapped = options_.gpu_mapped && host::cuda_device_available();
  slots_.resize(options_.slots);
  for (Slot& s : slots_) {
    s.buffer = host::DmaBuffer(controller.transport(), slot_bytes_, mem);
    s.table = plan::PrpTable(controller.transport(), s.buffer, page);
  }
}

namespace {
std::vector<StripeMemberIo> member_ios(const std::vector<StripedMember>& members) {
  std::vector<StripeMemberIo> v;
  for (const StripedMember& m : members) {
    if (!m.controller || !m.submitter)
      throw Error(ErrorKind::kInvalidArgument, "striped streamer: a member without a controller or submitter");
    v.push_back({m.submitter, m.io});
  }
  return v;
}

// What a consumer sees of slot `slot` holding `layer` (wait() and the GPU-ordered wait()).
SlotView slot_view(uint32_t slot, uint32_t layer, const host::DmaBuffer& buffer, const plan::CommandPlan& p) {
  SlotView v;
  v.slot = slot;
  v.layer = layer;
  v.host = buffer.as<uint8_t>();
  v.device = buffer.device();
  v.bytes = p.dest_bytes;
  v.plan = &p;
  return v;
}
}  // namespace

LayerStreamer::LayerStreamer(std::vector<StripedMember> members, const model::StripeGeometry& stripe,
                             std::vector<std::vector<model::Extent>> layers, const StreamerOptions& options)
    : LayerStreamer(std::make_unique<StripedSubmitter>(member_ios(members)), members, stripe, std::move(layers),
                    options) {}

LayerStreamer::LayerStreamer(std::unique_ptr<StripedSubmitter> striped, std::vector<StripedMember> members,
                             const model::StripeGeometry& stripe, std::vector<std::vector<model::Extent>> layers,
                             const StreamerOptions& options)
    : controller_(*members.at(0).controller), submitter_(*striped), layers_(std::move(layers)), options_(options),
      striped_(std::move(striped)) {
  if (members.size() != stripe.members)
    throw Error(ErrorKind::kInvalidArgument, "striped streamer: " + std::to_string(members.size()) +
                                                 " members for a set of " + std::to_string(stripe.members));
  if (options_.slots == 0 || options_.slots > 64)
    throw Error(ErrorKind::kInvalidArgument, "streamer: " + std::to_string(options_.slots) + " slots; use 1..64");
  if (layers_.empty()) throw Error(ErrorKind::kInvalidArgument, "streamer: no layers to stream");
  const uint64_t page = controller_.page_bytes();
  geometry_.nsid = options_.nsid;
  geometry_.lba_bytes = stripe.lba_size;
  geometry_.max_blocks = UINT32_MAX;
  for (const StripedMember& m : members) {
    const auto& ns = m.controller->namespace_info(options_.nsid);
    if (ns.lba_bytes != stripe.lba_size || m.controller->page_bytes() != page)
      throw Error(ErrorKind::kInvalidArgument, "striped streamer: the members differ in LBA size or controller page size");
    geometry_.max_blocks = std::min(geometry_.max_blocks, command_block_limit(*m.controller, options_.nsid, options_.max_command_bytes));
  }
  geometry_.namespace_blocks = stripe.logical_blocks();
  for (size_t l = 0; l < layers_.size(); ++l)
    for (size_t i = 0; i < layers_[l].size(); ++i)
      plan::check_extent(layers_[l][i], stripe.lba_size, stripe.logical_blocks(),
                         "striped streamer: layer " + std::to_string(l) + " extent " + std::to_string(i));
  const uint64_t align = options_.align ? options_.align : page;
  allocate_slots(controller_, align);
  for (Slot& s : slots_)
    for (size_t m = 1; m < members.size(); ++m) {
      s.member_maps.emplace_back(members[m].controller->transport(), s.buffer);
      s.member_tables.emplace_back(members[m].controller->transport(), s.member_maps.back().translation(), slot_bytes_, page);
    }
  build_striped_plans(members, stripe, align);
}

void LayerStreamer::build_striped_plans(const std::vector<StripedMember>& members, const model::StripeGeometry& stripe,
                                        uint64_t align) {
  const uint32_t n = uint32_t(members.size());
  std::vector<plan::PlanGeometry> geo(n, geometry_);
  for (uint32_t m = 0; m < n; ++m) {
    geo[m].namespace_blocks = members[m].controller->namespace_info(options_.nsid).blocks;
    geo[m].max_blocks = command_block_limit(*members[m].controller, options_.nsid, options_.max_command_bytes);
  }
  std::vector<std::vector<uint32_t>> counts;
  plans_.reserve(layers_.size() * slots_.size());
  for (const auto& L : layers_)
    for (const Slot& s : slots_) {
      uint64_t end = 0;
      const std::vector<uint64_t> at = plan::pack_extents(L, geometry_.lba_bytes, align, 0, &end);
      std::vector<plan::CommandPlan> part(n);
      plan::CommandPlan view;
      for (size_t i = 0; i < L.size(); ++i) {
        const auto split = model::split_extent(stripe, L[i]);
        for (uint32_t m = 0; m < n; ++m)
          for (const model::MemberExtent& me : split[m])
            plan::append_extent(part[m], me.extent, at[i] + me.block_offset * geometry_.lba_bytes, geo[m],
                                m == 0 ? s.table : s.member_tables[m - 1]);
        view.pieces.push_back(plan::Piece{L[i], at[i], at[i] + L[i].byte_in_first, 0, 0});
      }
      std::vector<uint32_t> c(n);
      for (uint32_t m = 0; m < n; ++m) {
        c[m] = uint32_t(part[m].commands.size());
        view.commands.insert(view.commands.end(), part[m].commands.begin(), part[m].commands.end());
        view.read_bytes += part[m].read_bytes;
      }
      view.dest_bytes = end;
      counts.push_back(std::move(c));
      plans_.push_back(std::move(view));
    }
  for (size_t i = 0; i < plans_.size(); ++i) striped_->add_plan(plans_[i].commands, counts[i]);
  if (StreamOrdered* o = submitter_.stream_ordered())
    for (const auto& p : plans_) o->prepare(p.commands);
}

LayerStreamer::~LayerStreamer() {
  for (Slot& s : slots_) {
    if (s.state != State::kLoading || s.gpu_ordered) continue;
    try {
      submitter_.wait(s.ticket);
    } catch (...) {
    }
  }
  for (GpuLoad& g : gpu_loads_) {
    if (g.ticket_retired) continue;
    try {
      submitter_.wait(g.ticket);
    } catch (...) {
    }
  }
  // The submitter outlives this streamer: its device copies of our templates must not be found
  // again by a later streamer whose plans happen to reuse the same host addresses.
  if (StreamOrdered* o = submitter_.stream_ordered()) {
    for (void* e : all_events_) o->delete_marker(e);
    for (const auto& p : plans_) o->forget(p.commands);
  }
}

const plan::CommandPlan& LayerStreamer::plan(uint32_t layer, uint32_t slot) const {
  if (layer >= layers_.size() || slot >= slots_.size())
    throw Error(ErrorKind::kInvalidArgument, "streamer: no plan for layer " + std::to_string(layer) + " slot " +
                                                 std::to_string(slot));
  return plans_[size_t(layer) * slots_.size() + slot];
}

const host::DmaBuffer& LayerStreamer::slot_buffer(uint32_t slot) const {
  if (slot >= slots_.size()) throw Error(ErrorKind::kInvalidArgument, "streamer: no slot " + std::to_string(slot));
  return slots_[slot].buffer;
}

uint64_t LayerStreamer::prp_bytes() const {
  uint64_t n = 0;
  for (const Slot& s : slots_) n += s.table.list_bytes();
  return n;
}

uint64_t LayerStreamer::template_bytes() const {
  uint64_t n = 0;
  for (const auto& p : plans_) n += p.commands.size() * sizeof(nvme::SubmissionEntry);
  return n;
}

LayerStreamer::Slot& LayerStreamer::slot_at(uint32_t slot, const char* what) {
  if (slot >= slots_.size())
    throw Error(ErrorKind::kInvalidArgument, std::string("streamer ") + what + ": slot " + std::to_string(slot) +
                                                 " does not exist (" + std::to_string(slots_.size()) + " slots)");
  return slots_[slot];
}

void LayerStreamer::begin_checks(Slot& s, uint32_t layer, uint32_t slot) {
  if (layer >= layers_.size())
    throw Error(ErrorKind::kInvalidArgument, "streamer begin: layer " + std::to_string(layer) + " does not exist (" +
                                                 std::to_string(layers_.size()) + " layers)");
  if (s.state == State::kLoading)
    throw Error(ErrorKind::kInvalidArgument, "streamer begin(layer " + std::to_string(layer) + ", slot " +
                                                 std::to_string(slot) + "): the slot is still loading layer " +
                                                 std::to_string(s.layer) + "; wait() and release() it first");
  if (s.state == State::kHeld)
    throw Error(ErrorKind::kInvalidArgument, "streamer begin(layer " + std::to_string(layer) + ", slot " +
                                                 std::to_string(slot) + "): the consumer still holds layer " +
                                                 std::to_string(s.layer) + " in it; release() it first");
}

void LayerStreamer::start_clock() {
  if (!started_) {
    started_ = true;
    first_begin_ = std::chrono::steady_clock::now();
  }
}

void LayerStreamer::begin(uint32_t layer, uint32_t slot) {
  Slot& s = slot_at(slot, "begin");
  begin_checks(s, layer, slot);
  if (s.release_pending)
    throw Error(ErrorKind::kInvalidArgument, "streamer begin(layer " + std::to_string(layer) + ", slot " +
                                                 std::to_string(slot) +
                                                 "): the slot was released on a CUDA stream; begin it on a stream too");
  start_clock();
  s.layer = layer;
  s.began = std::chrono::steady_clock::now();
  s.state = State::kLoading;
  s.gpu_ordered = false;
  s.ticket = submitter_.issue(plan(layer, slot).commands);
}

bool LayerStreamer::ready(uint32_t slot) {
  Slot& s = slot_at(slot, "ready");
  if (s.state == State::kHeld) return true;
  if (s.state == State::kFree) return false;
  if (s.gpu_ordered && s.landed) return true;  // sync() saw these reads end and retired the ticket
  return submitter_.done(s.ticket);
}

SlotView LayerStreamer::wait(uint32_t slot) {
  Slot& s = slot_at(slot, "wait");
  if (s.state == State::kFree)
    throw Error(ErrorKind::kInvalidArgument, "streamer wait: nothing was begun in slot " + std::to_string(slot));
  if (s.gpu_ordered && s.state == State::kLoading)
    throw Error(ErrorKind::kInvalidArgument, "streamer wait: slot " + std::to_string(slot) +
                                                 " was begun on a CUDA stream; wait(slot, stream) for it");
  const plan::CommandPlan& p = plan(s.layer, slot);
  if (s.state == State::kLoading) {
    const auto t0 = std::chrono::steady_clock::now();
    try {
      submitter_.wait(s.ticket);
    } catch (...) {
      s.state = State::kFree;  // the slot's contents are undefined; it can be reused
      throw;
    }
    LayerTiming t;
    t.layer = s.layer;
    t.bytes = p.read_bytes;
    t.io_ms = ms_since(s.began);
    t.wait_ms = ms_since(t0);
    stats_.layers += 1;
    stats_.bytes += p.read_bytes;
    stats_.io_seconds += t.io_ms / 1e3;
    stats_.wait_seconds += t.wait_ms / 1e3;
    stats_.elapsed_seconds = ms_since(first_begin_) / 1e3;
    stats_.per_layer.push_back(t);
    s.state = State::kHeld;
  }
  return slot_view(slot, s.layer, s.buffer, p);
}

void LayerStreamer::release(uint32_t slot) {
  Slot& s = slot_at(slot, "release");
  if (s.state == State::kLoading)
    throw Error(ErrorKind::kInvalidArgument, "streamer release: slot " + std::to_string(slot) +
                                                 " is still loading layer " + std::to_string(s.layer) + "; wait() first");
  if (s.gpu_ordered && s.state == State::kHeld)
    throw Error(ErrorKind::kInvalidArgument, "streamer release: slot " + std::to_string(slot) +
                                                 " holds a GPU-ordered load; release(slot, stream) it");
  s.state = State::kFree;
}

// ---- GPU-ordered loads: through the submitter's StreamOrdered capability ----

StreamOrdered* LayerStreamer::stream_ordered(const char* what) {
  StreamOrdered* o = submitter_.stream_ordered();
  if (!o)
    throw Error(ErrorKind::kUnsupported, std::string("streamer ") + what +
                                             " on a CUDA stream needs a GPU submitter (stream-ordered submission, e.g. "
                                             "stream::GpuSubmitter, CUDA builds); this streamer was built with a CPU submitter");
  return o;
}

void* LayerStreamer::take_event() {
  if (!spare_events_.empty()) {
    void* e = spare_events_.back();
    spare_events_.pop_back();
    return e;
  }
  void* e = stream_ordered("event")->new_marker();
  all_events_.push_back(e);
  return e;
}

void LayerStreamer::begin(uint32_t layer, uint32_t slot, cuda_stream_t io) {
  StreamOrdered* g = stream_ordered("begin");
  Slot& s = slot_at(slot, "begin");
  begin_checks(s, layer, slot);
  retire_gpu_loads(false);
  start_clock();
  // The reads must not land while a kernel released on the compute stream may still read the slot.
  if (s.release_pending) {
    g->wait_marker(io, s.released);
    s.release_pending = false;
  }
  const plan::CommandPlan& p = plan(layer, slot);
  s.ticket = g->issue_on(p.commands, io);
  s.status = g->device_state(s.ticket);
  s.landed = false;
  s.layer = layer;
  s.began = std::chrono::steady_clock::now();
  s.state = State::kLoading;
  s.gpu_ordered = true;
  GpuLoad load;
  load.layer = layer;
  load.slot = slot;
  load.ticket = s.ticket;
  load.bytes = p.read_bytes;
  gpu_loads_.push_back(load);
}

SlotView LayerStreamer::wait(uint32_t slot, cuda_stream_t compute) {
  StreamOrdered* g = stream_ordered("wait");
  Slot& s = slot_at(slot, "wait");
  if (s.state == State::kFree)
    throw Error(ErrorKind::kInvalidArgument, "streamer wait: nothing was begun in slot " + std::to_string(slot));
  if (s.state == State::kLoading && !s.gpu_ordered) {
    wait(slot);  // a host-issued load: the data is there when this returns
  } else if (s.state == State::kLoading && s.landed) {
    s.state = State::kHeld;  // sync() already saw these reads end
  } else if (s.state == State::kLoading) {
    GpuLoad* load = nullptr;
    for (auto it = gpu_loads_.rbegin(); it != gpu_loads_.rend(); ++it)
      if (it->ticket == s.ticket) {
        load = &*it;
        break;
      }
    void* a = take_event();
    void* b = take_event();
    g->mark(a, compute);
    g->order_after(s.ticket, compute);
    g->mark(b, compute);
    if (load) {
      load->stall_begin = a;
      load->stall_end = b;
    }
    s.state = State::kHeld;
  }
  const plan::CommandPlan& p = plan(s.layer, slot);
  SlotView v = slot_view(slot, s.layer, s.buffer, p);
  if (s.gpu_ordered) v.status = s.status;
  return v;
}

void LayerStreamer::release(uint32_t slot, cuda_stream_t compute) {
  StreamOrdered* g = stream_ordered("release");
  Slot& s = slot_at(slot, "release");
  if (s.state == State::kLoading)
    throw Error(ErrorKind::kInvalidArgument, "streamer release: slot " + std::to_string(slot) +
                                                 " is still loading layer " + std::to_string(s.layer) + "; wait() first");
  if (!s.released) s.released = take_event();
  g->mark(s.released, compute);
  s.release_pending = true;
  s.state = State::kFree;
}

bool LayerStreamer::retire_gpu_load(GpuLoad& g, bool block) {
  StreamOrdered* sub = stream_ordered("sync");
  // Bounded like every wait: the submitter's wait() bounds the reads; a compute stream that never
  // reaches the end of its stall (a consumer kernel that hangs) is reported after the same bound.
  if (!g.ticket_retired) {
    if (!block && !submitter_.done(g.ticket)) return false;
    GpuTicketTimes t;
    g.ticket_retired = true;  // wait() forgets the ticket even when it throws
    if (slots_[g.slot].ticket == g.ticket) slots_[g.slot].landed = true;
    try {
      sub->wait_timed(g.ticket, &t);
      LayerTiming lt;
      lt.layer = g.layer;
      lt.bytes = g.bytes;
      lt.io_ms = t.ms();
      stats_.layers += 1;
      stats_.bytes += g.bytes;
      stats_.io_seconds += lt.io_ms / 1e3;
      stats_.per_layer.push_back(lt);
    } catch (const Error&) {
      // This load failed: its consumer saw ticket_state::kFailed in its status word, and sync()
      // throws the error. Nothing else is wrong: the submitter's queues stay usable (it rebuilt them
      // if they faulted), so later loads go on, and begin() never throws an older load's error.
      keep_failure(std::current_exception());
    }
  }
  if (g.stall_end) {
    if (block) {
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
      while (!sub->marker_reached(g.stall_end)) {
        if (std::chrono::steady_clock::now() > deadline)
          throw Error(ErrorKind::kTimeout, "streamer sync: the compute stream has not reached layer " +
                                               std::to_string(g.layer) + "'s wait after 60 s");
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      }
    } else if (!sub->marker_reached(g.stall_end)) {
      return false;
    }
    const double ms = sub->marker_ms(g.stall_begin, g.stall_end);
    if (ms >= 0) {
      stats_.wait_seconds += ms / 1e3;
      for (auto it = stats_.per_layer.rbegin(); it != stats_.per_layer.rend(); ++it)
        if (it->layer == g.layer) {
          it->wait_ms = ms;
          break;
        }
    }
    spare_events_.push_back(g.stall_begin);
    spare_events_.push_back(g.stall_end);
    g.stall_begin = g.stall_end = nullptr;
    return true;
  }
  // Not waited on yet: keep it until its stall is known (sync() collects it either way).
  return block;
}

void LayerStreamer::retire_gpu_loads(bool block) {
  size_t keep = 0;
  for (size_t i = 0; i < gpu_loads_.size(); ++i) {
    GpuLoad& g = gpu_loads_[i];
    // A load nobody waited on yet is left alone here: wait(slot, stream) still needs its ticket.
    if (g.stall_end != nullptr && retire_gpu_load(g, block)) continue;
    gpu_loads_[keep++] = g;
  }
  gpu_loads_.resize(keep);
}

void LayerStreamer::keep_failure(std::exception_ptr e) {
  if (!first_failure_) first_failure_ = std::move(e);
}

void LayerStreamer::throw_if_failed() {
  stream_ordered("throw_if_failed");
  retire_gpu_loads(false);
  if (first_failure_) std::rethrow_exception(std::exchange(first_failure_, nullptr));
}

void LayerStreamer::sync() {
  stream_ordered("sync");
  for (GpuLoad& g : gpu_loads_) {
    try {
      retire_gpu_load(g, true);  // loads nobody waited for yet stay in their slot, marked landed
    } catch (...) {
      keep_failure(std::current_exception());
    }
  }
  gpu_loads_.clear();
  stats_.elapsed_seconds = ms_since(first_begin_) / 1e3;
  // The first failure since the last sync(), also one that begin() found while retiring loads.
  if (first_failure_) std::rethrow_exception(std::exchange(first_failure_, nullptr));
}


}  // namespace gpunvme::stream
