#include "runtime/stream/layer_streamer.h"

#include <algorithm>
#include <string>

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
  for (size_t l = 0; l < layers_.size(); ++l)
    for (const model::Extent& e : layers_[l])
      if (e.end_lba() > ns.blocks || e.end_lba() < e.first_lba)
        throw Error(ErrorKind::kInvalidArgument, "streamer: layer " + std::to_string(l) + " reads LBA " +
                                                     std::to_string(e.first_lba) + " + " + std::to_string(e.lba_count) +
                                                     " blocks, past the end of namespace " +
                                                     std::to_string(options_.nsid) + " (" + std::to_string(ns.blocks) +
                                                     " blocks)");
  for (const auto& L : layers_) slot_bytes_ = std::max(slot_bytes_, plan::packed_bytes(L, geometry_.lba_bytes, align));
  slot_bytes_ = std::max<uint64_t>((slot_bytes_ + page - 1) / page * page, page);
  host::DmaOptions mem{options_.hugepages};
  mem.gpu_mapped = options_.gpu_mapped && host::cuda_device_available();
  slots_.resize(options_.slots);
  for (Slot& s : slots_) {
    s.buffer = host::DmaBuffer(controller.transport(), slot_bytes_, mem);
    s.table = plan::PrpTable(controller.transport(), s.buffer, page);
  }
  plans_.reserve(layers_.size() * slots_.size());
  for (size_t l = 0; l < layers_.size(); ++l)
    for (const Slot& s : slots_) plans_.push_back(plan::build_plan(layers_[l], geometry_, s.table, align));
}

LayerStreamer::~LayerStreamer() {
  for (Slot& s : slots_) {
    if (s.state != State::kLoading) continue;
    try {
      submitter_.wait(s.ticket);
    } catch (...) {
    }
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

void LayerStreamer::begin(uint32_t layer, uint32_t slot) {
  Slot& s = slot_at(slot, "begin");
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
  const auto now = std::chrono::steady_clock::now();
  if (!started_) {
    started_ = true;
    first_begin_ = now;
  }
  s.layer = layer;
  s.began = now;
  s.state = State::kLoading;
  s.ticket = submitter_.issue(plan(layer, slot).commands);
}

bool LayerStreamer::ready(uint32_t slot) {
  Slot& s = slot_at(slot, "ready");
  if (s.state == State::kHeld) return true;
  if (s.state == State::kFree) return false;
  return submitter_.done(s.ticket);
}

SlotView LayerStreamer::wait(uint32_t slot) {
  Slot& s = slot_at(slot, "wait");
  if (s.state == State::kFree)
    throw Error(ErrorKind::kInvalidArgument, "streamer wait: nothing was begun in slot " + std::to_string(slot));
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
  SlotView v;
  v.slot = slot;
  v.layer = s.layer;
  v.host = s.buffer.as<uint8_t>();
  v.device = s.buffer.device();
  v.bytes = p.dest_bytes;
  v.plan = &p;
  return v;
}

void LayerStreamer::release(uint32_t slot) {
  Slot& s = slot_at(slot, "release");
  if (s.state == State::kLoading)
    throw Error(ErrorKind::kInvalidArgument, "streamer release: slot " + std::to_string(slot) +
                                                 " is still loading layer " + std::to_string(s.layer) + "; wait() first");
  s.state = State::kFree;
}

}  // namespace gpunvme::stream
