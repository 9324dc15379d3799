#include "bench/fault_matrix_cells.h"

#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "driver/commands.h"
#include "host/cpu_io.h"
#include "host/emulator/controller.h"
#include "host/emulator/fault_spec.h"
#include "host/io_patterns.h"
#include "host/open_device.h"
#include "host/text/escape.h"
#include "runtime/stream/cpu_submitter.h"
#include "runtime/stream/expert_fetcher.h"
#include "runtime/stream/layer_streamer.h"

namespace gpunvme::faultmx {
namespace {

using Clock = std::chrono::steady_clock;
constexpr uint64_t kSeed = 77;
constexpr uint64_t kRegionBytes = 16ull << 20;  // patterned data the workloads read
// CAP.TO = 500 ms bounds a reset that never becomes ready; mdts=1 (8 KiB) splits layers into many commands.
constexpr const char* kDevice = "emu:ram,size=32M,to=1,mdts=1,queues=4";

constexpr FaultCase kCases[] = {
    {"error, DNR clear", "error:sct=2:sc=0x81:dnr=0:nth=5:times=3", true, ErrorKind::kCommandFailed, ""},
    {"error, DNR set", "error:sct=2:sc=0x81:dnr=1:nth=5", false, ErrorKind::kCommandFailed, "Unrecovered Read Error"},
    {"dropped completion", "drop:nth=5", true, ErrorKind::kTimeout, ""},
    {"delayed past timeout", "delay:by=10s:nth=5", true, ErrorKind::kTimeout, ""},
    {"CSTS.CFS", "cfs:nth=5", true, ErrorKind::kControllerFatal, ""},
    // Armed after bring-up, so the first enable the plan sees is the reset's.
    {"never ready after reset", "cfs:nth=5;never-ready:nth=1", false, ErrorKind::kTimeout, "CSTS.RDY"},
    {"wrong CID", "wrong-cid:nth=5", true, ErrorKind::kProtocol, ""},
    {"surprise removal", "removal:nth=5", false, ErrorKind::kControllerFatal, "removed"},
    {"long run, periodic faults",
     "error:sct=2:sc=0x81:every=700;drop:every=1500;cfs:every=2300;wrong-cid:every=1900;delay:by=1ms:every=300", true,
     ErrorKind::kTimeout, ""},
};

// Bytes of `buf` that differ from the pattern at device byte `address`.
uint64_t bad_bytes(const uint8_t* buf, uint64_t address, uint64_t n) {
  uint64_t bad = 0;
  for (uint64_t i = 0; i < n; ++i) bad += buf[i] != host::pattern_byte(kSeed, address + i);
  return bad;
}

model::Extent extent_at(uint64_t address, uint64_t bytes, uint32_t lba) {
  model::Extent e;
  e.first_lba = address / lba;
  e.byte_in_first = uint32_t(address % lba);
  e.lba_count = (e.byte_in_first + bytes + lba - 1) / lba;
  e.byte_length = bytes;
  return e;
}

struct Rig {
  std::unique_ptr<host::Controller> ctrl;
  std::unique_ptr<host::QueuePair> qp;
  emu::EmulatedController* emu = nullptr;
  uint32_t lba = 512;

  Rig() {
    host::ControllerOptions o;
    o.admin_timeout = std::chrono::milliseconds(1000);
    ctrl = host::open_controller(kDevice, o);
    emu = dynamic_cast<emu::EmulatedController*>(&ctrl->transport());
    qp = ctrl->create_io_queue_pair(1, 64);
    lba = ctrl->namespace_info(1).lba_bytes;
    host::CpuIo io(*ctrl, *qp, 1);
    host::DmaBuffer buf(ctrl->transport(), 1 << 20);
    for (uint64_t off = 0; off < kRegionBytes; off += buf.size()) {
      host::fill_position_pattern(buf.as<uint8_t>(), buf.size(), off, kSeed);
      io.write(off / lba, buf.size() / lba, buf, 0);
    }
  }
  std::vector<int> armed;

  void arm(const char* specs) {
    std::string all(specs);
    for (size_t at = 0; at <= all.size();) {
      const size_t end = std::min(all.find(';', at), all.size());
      armed.push_back(emu->faults().add(emu::parse_fault_spec(std::string_view(all).substr(at, end - at))));
      at = end + 1;
    }
  }
  uint64_t fired() const {
    uint64_t n = 0;
    for (int id : armed) n += emu->faults().fired(id);
    return n;
  }
};

void random_reads(Rig& rig, const CellOptions& o, CellResult& r) {
  constexpr uint32_t kQd = 16, kBlocks = 8;
  const std::chrono::milliseconds t(o.timeout_ms);
  host::CpuIo io(*rig.ctrl, *rig.qp, 1, {.queue_depth = kQd, .timeout = t, .abort_timeout = t});
  const uint64_t bytes = uint64_t(kBlocks) * rig.lba;
  host::DmaBuffer buf(rig.ctrl->transport(), bytes * kQd);
  std::vector<uint64_t> lba_of(64);
  std::vector<uint32_t> slot_of(64), free_slots;
  for (uint32_t s = 0; s < kQd; ++s) free_slots.push_back(s);
  std::mt19937_64 rng(5);
  const uint64_t span = kRegionBytes / rig.lba - kBlocks;
  uint32_t issued = 0, done = 0;
  host::Completion c[32];
  try {
    while (done < o.reads) {
      while (issued < o.reads && !free_slots.empty()) {
        const uint64_t lba = rng() % span;
        const uint32_t s = free_slots.back();
        free_slots.pop_back();
        const uint16_t tag = io.submit(host::IoRequest{nvme::nvm_op::kRead, lba, kBlocks, &buf, uint64_t(s) * bytes}, false);
        lba_of[tag] = lba;
        slot_of[tag] = s;
        ++issued;
      }
      io.ring();
      const uint32_t n = io.reap(c, 32);
      for (uint32_t i = 0; i < n; ++i) {
        ++done;
        const uint16_t tag = c[i].cid;
        if (!c[i].ok())
          throw Error(ErrorKind::kCommandFailed, "read of LBA " + std::to_string(lba_of[tag]) +
                                                     " failed: " + nvme::describe(c[i].status), c[i].status);
        r.bad_bytes += bad_bytes(buf.as<uint8_t>() + uint64_t(slot_of[tag]) * bytes, lba_of[tag] * rig.lba, bytes);
        r.bytes_verified += bytes;
        free_slots.push_back(slot_of[tag]);
      }
    }
  } catch (...) {
    r.recovery = io.recovery();
    throw;
  }
  r.recovery = io.recovery();
}

std::unique_ptr<stream::CpuSubmitter> submitter(Rig& rig, const CellOptions& o) {
  const std::chrono::milliseconds t(o.timeout_ms);
  return std::make_unique<stream::CpuSubmitter>(*rig.ctrl, *rig.qp,
                                                stream::CpuSubmitterOptions{.timeout = t, .abort_timeout = t});
}

void layer_stream(Rig& rig, const CellOptions& o, CellResult& r) {
  std::vector<std::vector<model::Extent>> layers(o.layers);
  for (uint32_t l = 0; l < o.layers; ++l)
    for (uint32_t k = 0; k < 3; ++k) {
      const uint64_t bytes = 700 + (uint64_t(l) * 37 + k * 1001) % 6000;
      const uint64_t address = (uint64_t(l) * 104729 + k * 7919 * 13) % (kRegionBytes - 8192);
      layers[l].push_back(extent_at(address, bytes, rig.lba));
    }
  auto sub = submitter(rig, o);
  try {
    stream::LayerStreamer s(*rig.ctrl, *sub, layers, {.gpu_mapped = false});
    s.begin(0, 0);
    for (uint32_t l = 0; l < o.layers; ++l) {
      if (l + 1 < o.layers) s.begin(l + 1, (l + 1) % 2);
      const stream::SlotView v = s.wait(l % 2);
      for (const auto& p : v.plan->pieces) {
        r.bad_bytes += bad_bytes(v.host + p.data_offset, p.source.first_lba * rig.lba + p.source.byte_in_first,
                                 p.source.byte_length);
        r.bytes_verified += p.source.byte_length;
      }
      s.release(l % 2);
    }
  } catch (...) {
    r.recovery = sub->recovery();
    throw;
  }
  r.recovery = sub->recovery();
}

void expert_fetch(Rig& rig, const CellOptions& o, CellResult& r) {
  constexpr uint32_t kExperts = 16;
  stream::ExpertCatalog cat;
  cat.n_layers = o.expert_layers;
  cat.n_experts = kExperts;
  cat.parts.resize(size_t(o.expert_layers) * kExperts);
  uint64_t address = 4096 + 123;
  for (auto& parts : cat.parts)
    for (model::Projection p : {model::Projection::kGate, model::Projection::kUp, model::Projection::kDown}) {
      const uint64_t bytes = 3000 + (address % 5000);
      parts.push_back(stream::ExpertPart{p, extent_at(address, bytes, rig.lba)});
      address += bytes + 97;
    }
  auto sub = submitter(rig, o);
  try {
    stream::ExpertFetcher f(*rig.ctrl, *sub, cat, {.max_experts_per_fetch = 4, .gpu_mapped = false});
    for (uint32_t layer = 0; layer < o.expert_layers; ++layer)
      for (uint32_t e0 = 0; e0 < kExperts; e0 += 4) {
        const uint32_t sel[] = {e0 + 2, e0, e0 + 3, e0 + 1};
        const auto& res = f.fetch(layer, sel);
        f.wait_all();
        for (const auto& fe : res)
          for (const auto& part : fe.parts)
            for (const auto& want : cat.of(layer, fe.expert)) {
              if (want.proj != part.proj) continue;
              const uint64_t n = want.extent.byte_length;
              r.bad_bytes += part.bytes == n ? bad_bytes(f.scratchpad().as<uint8_t>() + part.offset,
                                                         want.extent.first_lba * rig.lba + want.extent.byte_in_first, n)
                                             : n;
              r.bytes_verified += n;
            }
      }
  } catch (...) {
    r.recovery = sub->recovery();
    throw;
  }
  r.recovery = sub->recovery();
}

}  // namespace

const char* workload_name(Workload w) {
  switch (w) {
    case Workload::kRandomReads: return "random reads";
    case Workload::kLayerStream: return "layer stream";
    case Workload::kExpertFetch: return "expert fetch";
  }
  return "?";
}

std::span<const FaultCase> fault_cases() { return kCases; }

CellResult run_cell(const FaultCase& fault, Workload workload, const CellOptions& options) {
  CellResult r;
  r.fault = fault.name;
  r.workload = workload_name(workload);
  Rig rig;
  rig.arm(fault.faults);
  const auto t0 = Clock::now();
  try {
    switch (workload) {
      case Workload::kRandomReads: random_reads(rig, options, r); break;
      case Workload::kLayerStream: layer_stream(rig, options, r); break;
      case Workload::kExpertFetch: expert_fetch(rig, options, r); break;
    }
    r.recovered = true;
    r.as_expected = fault.recovers && r.bad_bytes == 0 && r.bytes_verified > 0;
  } catch (const Error& e) {
    r.error = e.what();
    r.as_expected = !fault.recovers && e.kind() == fault.error_kind && r.error.find(fault.error_has) != std::string::npos;
  }
  r.faults_fired = rig.fired();
  r.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return r;
}

std::string cell_json(const CellResult& r) {
  char b[192];
  std::snprintf(b, sizeof b,
                ",\"recovered\":%s,\"as_expected\":%s,\"seconds\":%.4f,\"bytes_verified\":%llu,\"bad_bytes\":%llu,"
                "\"faults_fired\":%llu",
                r.recovered ? "true" : "false", r.as_expected ? "true" : "false", r.seconds,
                (unsigned long long)r.bytes_verified, (unsigned long long)r.bad_bytes, (unsigned long long)r.faults_fired);
  return "{\"fault\":" + text::json_string(r.fault) + ",\"workload\":" + text::json_string(r.workload) + ",\"path\":\"cpu\"" +
         b + ",\"error\":" + (r.error.empty() ? std::string("null") : text::json_string(r.error)) +
         ",\"recovery\":" + host::recovery_json(r.recovery) + "}";
}

}  // namespace gpunvme::faultmx
