// llm_tokens: tokens per second of the engine (examples/llm) at the I/O bound, per model x budgets x
// drive x loader, with the real compute. `llm_tokens --help` explains; docs/performance.md has results.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <stdexcept>
#include <span>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>

#include "bench/baselines/pacing.h"
#include "bench/chain_bound.h"
#include "bench/llm_modeled_drive.h"
#include "bench/llm_tokens_mmap.h"
#include "bench/served_bound.h"
#include "device/cuda_check.h"
#include "examples/llm/tools/emu_gen.h"
#include "examples/llm/compute/gpu_route.h"
#include "examples/llm/engine/executor.h"
#include "examples/llm/engine/expert_io_flags.h"
#include "examples/llm/engine/gpu_ids.h"
#include "examples/llm/engine/slots_flag.h"
#include "host/device_lock.h"
#include "host/open_device.h"
#include "runtime/model/stripe.h"
#include "host/text/escape.h"
#include "host/text/human_bytes.h"
#include "host/text/lists.h"
#include "host/text/numbers.h"
#include "runtime/cli/args.h"
#include "runtime/cli/tool_main.h"
#include "runtime/guard/output_file.h"

using namespace gpunvme;

namespace {

// --help: what it measures and the options of a first run; --help-all: the columns, the loaders, the rest.
const cli::Help kHelp = {
    "usage: llm_tokens (--image PATH[,PATH...] | --device emu:...)... [--budgets VRAM:RAM,...] [--drives sn530,...]\n"
    "                  [--modes gpunvme,mmap,mmap-evict] [--verify on,off] [--expert-prefetch auto,on,off,pregate:N[+first:M]]\n"
    "                  [--expert-overlap auto|on|off] [--tokens N] [--warmup N] [--slots auto|N]\n"
    "                  [--expert-window SIZE] [--expert-read SIZE] [--queues N] [--emu-opts KEYS]\n"
    "                  [--gpus N|IDS [--drive-per-gpu]] [--json-out FILE]\n"
    "\n"
    "Tokens per second of the engine at the I/O bound: for each model image, budget pair, modeled drive and\n"
    "loader, the GPU executor decodes --warmup, then --tokens timed tokens with the real compute, and prints\n"
    "tok/s against the drives' bound. Every cell of a (model, budget) must give the same logits, to the bit.\n"
    "\n"
    "  --image PATH   a namespace image holding a deployed model (llm_make_model --device emu:PATH,size=60G);\n"
    "                 a comma-separated list: a striped set's members, in order; repeat for more models\n"
    "  --device DEV   a model on one emulated namespace, e.g. emu:gen,shape=qwen3-235b-a22b,type=q4_k[,members=2]\n"
    "  --budgets      VRAM:RAM sizes (K/M/G suffixes), default 22G:0,22G:32G\n"
    "  --drives       modeled drives (drive=NAME of the emulator), default sn530,pcie4,pcie5\n"
    "  --modes        loaders, default gpunvme,mmap,mmap-evict\n"
    "  --verify       the engine's checks of what it loads against the deploy record (docs/engine.md): on (the\n"
    "                 engine's default), off (its --no-verify: the header chunks only), or both, on,off: each cell\n"
    "                 runs with each, so their tok/s compare in one call (the vfy column; the JSON's \"verify\" has\n"
    "                 what was checked, at what cost at start). The streamed layers are checked during --warmup\n"
    "                 (the first token): the timed tokens show what the checks cost after it\n"
    "  --tokens N     timed decode tokens (default 3); --warmup N untimed ones first (default 1)\n"
    "  --json-out FILE  each cell as one JSON object per line; FILE is replaced when the run ends\n",
    "\n"
    "For each model (a namespace image holding a deployed model, e.g. written by llm_make_model onto\n"
    "emu:/dev/shm/m.img,size=60G; a comma-separated list is a striped set's member images, in order, as\n"
    "llm_make_model wrote them with several --device), budget pair, modeled drive and loader, the engine's\n"
    "GPU executor decodes --warmup tokens, then --tokens timed tokens, with the real compute. Per cell:\n"
    "  tok/s        timed tokens / their wall time\n"
    "  drive        the modeled drive; Nx before it: a striped set of N members, each its own emulated\n"
    "               controller modeling that drive (4 controller threads each)\n"
    "  bound        the cell's floor, as tok/s: max(the bytes the busiest modeled drive served over the timed\n"
    "               tokens, per token / its rated read bandwidth, bytes entering the GPU per token (the plan's,\n"
    "               residency_plan.h) / the measured host-to-GPU bandwidth). The drives' bytes are counted, not\n"
    "               planned (bench/served_bound.h): a RAM expert cache that hits more than a uniform router's\n"
    "               share lowers them, so eff stays at most 100 % (up to the timing window's edges). Every byte\n"
    "               served counts, wasted prefetch reads too (an mmap cell's loader paces on a drive model of its\n"
    "               own beside the controller's that fetches experts: counted as one drive, the two may beat it).\n"
    "               The JSON keeps the plan's expectation beside it\n"
    "               (plan_bound_tokens_per_second, plan_efficiency, plan_nvme_bytes_per_token). A dense model's\n"
    "               bound is at least the plan's (its bytes are exact: drives that served fewer read ahead of the\n"
    "               window, said on stderr)\n"
    "  eff          tok/s / bound\n"
    "  NVMe/tok     bytes the drives served per timed token, all drives (JSON: nvme_bytes_per_token; each\n"
    "               drive's total over the timed tokens: drive_bytes_served)\n"
    "  emu          tok/s of the same model, budget and loader with drive `none` (the emulator unthrottled: what\n"
    "               the emulator itself can feed, about one pcie5 on 16 cores), when --drives lists none first\n"
    "  eff<         tok/s / min(bound, emu): efficiency against the lower of the drives and the emulator\n"
    "  host CPU     CPU time of the process during the timed tokens, less the emulator's controller threads\n"
    "               (the drive's work, not the engine's)\n"
    "  experts      MoE: fetched experts' cache hits / routed; the one-token-lag prediction's hit rate (the\n"
    "               previous token's experts at each layer, measured from routing); with the prefetch on, its\n"
    "               hits / experts it read, and the time layers waited for their experts (stall). A random-\n"
    "               weight router is the worst case for caching and prediction: uniform choices, so these are\n"
    "               floors. The JSON has the wasted prefetch bytes and the stall of every layer\n"
    "  chain        MoE cells that ran with no prefetch (off, or auto that chose none): a layer's expert reads\n"
    "               start once its router ran, so the drive idles for what the token does outside its reads\n"
    "               (attention, routers, the experts' compute after the reads, the head). A second floor: that\n"
    "               time (the timed tokens' wall time less the fetches' stall, measured) plus the expert bytes at\n"
    "               the drives' rated rate (bench/chain_bound.h), as tok/s and eff; us/fetch: each fetch's wait\n"
    "               beyond that rate. JSON: chain_bound_tokens_per_second, chain_efficiency, chain_*\n"
    "Loaders for the NVMe tier: gpunvme (GPU-issued reads into slots, LayerStreamer) and mmap (the\n"
    "ntransformer-style pipeline: mmap + one memcpy worker + pinned staging + copy to the GPU, paced like\n"
    "the modeled drive). mmap keeps every page it touched mapped, as when the model fits in the page\n"
    "cache (from the second token on it takes no page fault); mmap-evict drops each layer's pages once\n"
    "copied (a reclaim thread, as kswapd would for a model bigger than RAM), so every token faults them\n"
    "in again: the case this loader is for, and still a floor on its cost (the image is in tmpfs, so a\n"
    "fault finds its page in the page cache; a real one would also read ahead and insert it). Startup loads (VRAM and RAM tiers) are read unthrottled and not timed. Every cell\n"
    "of a (model, budget) must give logits equal to the bit to its first cell, else it prints an error.\n"
    "Each cell is printed as soon as it ends; --json-out FILE (one JSON object per line) replaces FILE when\n"
    "the run ends, failed cells with their error (a run killed before leaves the old FILE). A\n"
    "budget whose plan leaves nothing on NVMe runs once (its first drive and loader): no drive is read.\n"
    "--device DEV: a model on one emulated namespace given whole (each cell adds drive= and threads=), e.g. a\n"
    "generated model computed on read, for models larger than RAM: emu:gen,shape=qwen3-235b-a22b,type=q4_k\n"
    "(llm_make_model's shapes); with members=N (no member=), a striped set of it over N generated namespaces, for\n"
    "the Nx cells. The generator's own rate (every core, 1 s) is printed first and is in the\n"
    "JSON (generator_bytes_per_second, generator_cpu_seconds_per_gb): it must stay above the drives' rates\n"
    "for the emulator, not the generator, to be the limit. No mmap cells (no image file to map).\n"
    "Other options:\n"
    "  --slots auto|N the engine's streaming slots (its --slots; default auto)\n"
    "  --expert-prefetch  MoE models whose plan fetches experts: the prefetch per cell, a list of auto (the\n"
    "                 engine's default: the one-token lag when the expert cache holds two fetches, pre-gating of\n"
    "                 k/2 experts when it is 0), on (one-token lag), off (neither); default\n"
    "                 auto (the JSON's \"prefetch\" says whether it ran; an off cell after an auto cell that ran\n"
    "                 without it is skipped), or pregate:N: pre-gating, the next fetched layer's router on the\n"
    "                 current layer's state and its best N predicted experts read ahead (the engine's\n"
    "                 --expert-pregate N). Either of the last two may end in +first:M (auto+first:0): at the\n"
    "                 last fetched layer, M of the experts this token routed to at the first fetched layer are\n"
    "                 read ahead for the next token's (the engine's --expert-pregate-first M; default N, 0: off).\n"
    "                 Cells with any of them must give the same logits; dense models run once\n"
    "  --expert-overlap  MoE: each expert kernel starts once the part it reads is in (on), or after all of\n"
    "                 the layer's reads (off); default auto (on where the CUDA driver has stream memory waits;\n"
    "                 the JSON's \"expert_overlap\" says which ran). The logits are the same either way\n"
    "  --expert-window SIZE  MoE: bytes of a layer's expert reads in flight at once, issued in the order the\n"
    "                 kernels use them (default: the engine's 8M, at least one read per queue; 0: all at once,\n"
    "                 so they end together and the first expert kernel waits for nearly all of them)\n"
    "  --expert-read SIZE  MoE: the largest read of an expert fetch (default: the engine's 256K; the drive's\n"
    "                 MDTS caps it): smaller reads end in finer order, so the last expert kernel waits less\n"
    "  --queues N     the engine's GPU-driven NVMe queues (default 8; the engine's own default is 4): the\n"
    "                 streamer's, and as many again for the expert fetcher; the emulated controller gets one\n"
    "                 thread per queue (2N for one namespace, N per striped member). One thread copies about\n"
    "                 3.4 GB/s on the H100 machine, so with 4 the emulator itself, not the modeled drive, capped\n"
    "                 a pcie5 (14.7 GB/s) cell at 70-97 %; with 8 the 70B pcie5 cell reached 100 %\n"
    "  --gpus N|IDS   the engine's layers split over the first N GPUs, or CUDA ids 0,2 (device=1: one; default 1;\n"
    "                 gpunvme mode only): each budget is each GPU's, the drive(s) shared by them; the bound\n"
    "                 is the drive's for all GPUs' NVMe bytes and each GPU's own host link's\n"
    "  --drive-per-gpu  with --gpus N: each GPU streams through a modeled drive of its own over the image (N\n"
    "                 drives holding a copy each); the bound is then the busiest GPU's drive or link, or the\n"
    "                 bytes the GPUs' streaming slots cannot hold ahead, read in their turns (turns_floor_seconds)\n"
    "  --emu-opts KEYS  extra keys for every cell's emulated controllers, e.g. poll=spin (the README's\n"
    "                 emulator grammar; drive= and threads= come from --drives and --queues)\n"
    "Striped sets: --image /dev/shm/s0.img,/dev/shm/s1.img --drives none,pcie4 gives 2xnone and 2xpcie4 cells;\n"
    "the mmap loader reads the member images through the set's layout (one memcpy worker, each member paced\n"
    "as its own drive). MoE experts are fetched from every member at once (each its expert queues).\n"};

struct Budget {
  std::string text;
  llm::Budgets b;
};

std::vector<Budget> parse_budgets(const cli::Args& args) {
  std::vector<Budget> out;
  for (const std::string& item : args.get_list("budgets", "22G:0,22G:32G")) {
    const size_t c = item.find(':');
    if (c == std::string::npos) throw cli::UsageError("--budgets: '" + item + "' is not VRAM:RAM (e.g. 22G:32G)");
    out.push_back({item, {cli::parse_size_arg("budgets VRAM", item.substr(0, c)), cli::parse_size_arg("budgets RAM", item.substr(c + 1))}});
  }
  return out;
}

uint64_t fnv1a(std::span<const float> v, uint64_t h) {
  const auto* p = reinterpret_cast<const uint8_t*>(v.data());
  for (size_t i = 0; i < v.size() * sizeof(float); ++i) h = (h ^ p[i]) * 0x100000001B3ull;
  return h;
}

struct Cell {
  Cell() = default;
  Cell(std::string m, std::string b, std::string d, std::string md)
      : model(std::move(m)), budget(std::move(b)), drive(std::move(d)), mode(std::move(md)) {}
  std::string model, budget, drive, mode, prefetch = "-", error;
  bool drive_per_gpu = false;  // --drive-per-gpu
  bool verify = true;    // the engine's load checks (--verify)
  llm::ExecStats stats;
  uint32_t members = 1;  // drives striped over
  uint32_t queues = 0;   // the engine's GPU queues (--queues)
  std::string emu_opts;  // --emu-opts, as given
  double seconds = 0, tps = 0, bound_tps = 0, host_cpu = 0;
  double emu_tps = 0;  // the same cell with drive none (0: not measured)
  // The bound's inputs: each modeled drive's bytes served over the timed tokens (bench/served_bound.h),
  // and the plan's expectation kept for comparison (its bound is no floor with a RAM expert cache).
  std::vector<uint64_t> served;
  double drive_bw = 0;  // one drive's rated read bytes/s, as its controllers model it (0: none)
  double nvme_bytes_per_token = 0, plan_nvme_bytes_per_token = 0, plan_bound_tps = 0;
  std::optional<uint64_t> loader_faults;  // mmap loaders: the worker's page faults over the timed tokens
  std::optional<llm::gen::GenerationRate> generator;  // emu:gen: the generator's own rate, measured at start
  std::optional<bench::ChainBound> chain;  // MoE cells that ran with no prefetch: the dependent chain's floor
  double lower_tps() const { return emu_tps > 0 && emu_tps < bound_tps ? emu_tps : bound_tps; }
  std::string drive_label() const { return members > 1 ? std::to_string(members) + "x" + drive : drive; }
  uint32_t tokens = 0;
  uint64_t logits_hash = 0;
};

// What every cell of a run shares (the command line's settings).
struct RunSettings {
  std::optional<bool> overlap;  // --expert-overlap; nullopt: the engine's auto
  llm::ExpertIoFlags expert_io;  // --expert-window, --expert-read
  uint32_t warmup = 1, tokens = 3, slots = 0;  // slots 0: the engine's auto (stream_slots.h)
  uint32_t queues = 8;  // the engine's GPU queues (the streamer's; as many again for the expert fetcher)
  uint32_t gpus = 1;    // --gpus: the engine's GPUs (each with its own queues on the drive's controller)
  std::vector<int> gpu_ids;  // --gpus 0,2 / device=1: their CUDA ids (empty: the first `gpus`)
  bool drive_per_gpu = false;  // --drive-per-gpu: each GPU its own modeled drive over the image
  std::string emu_opts;  // extra emulator keys for every cell's controllers ("poll=spin"), as given
  double h2d = 0;       // measured host-to-GPU bandwidth, bytes/s
};

// A cell's --expert-prefetch entry: a kind (auto, on, off, pregate:N), optionally "+first:M" (the
// engine's --expert-pregate-first M).
std::string prefetch_base(const std::string& prefetch) { return prefetch.substr(0, prefetch.find('+')); }

// "pregate:N[+first:M]" -> N (checked when the flag was parsed), anything else -> 0.
uint32_t pregate_count(const std::string& prefetch) {
  static const std::string kPre = "pregate:";
  const std::string base = prefetch_base(prefetch);
  return base.starts_with(kPre) ? uint32_t(text::parse_u64("--expert-prefetch pregate", base.substr(kPre.size()))) : 0;
}

// "...+first:M" -> M, no suffix -> none (the engine's default); throws text::ParseError on any other suffix.
std::optional<uint32_t> pregate_first_count(const std::string& prefetch) {
  static const std::string kFirst = "+first:";
  const size_t plus = prefetch.find('+');
  if (plus == std::string::npos) return std::nullopt;
  if (prefetch.compare(plus, kFirst.size(), kFirst) != 0) throw text::ParseError("--expert-prefetch: '" + prefetch + "'");
  return uint32_t(std::min<uint64_t>(text::parse_u64("--expert-prefetch first", prefetch.substr(plus + kFirst.size())), ~0u));
}

// The mmap loaders by their --modes name (the page residency each models); none for gpunvme or any
// other name.
std::optional<bench::MmapResidency> mmap_residency(const std::string& mode) {
  if (mode == "mmap") return bench::MmapResidency::kMapped;
  if (mode == "mmap-evict") return bench::MmapResidency::kEvicted;
  return std::nullopt;
}

// A model to measure: its namespaces' device strings (a striped set's members in order) and, for --image,
// their image files (the mmap loaders read those).
struct ModelSpec {
  std::vector<std::string> devices, images;
};

Cell run_cell(const ModelSpec& spec, const llm::ModelOnDevice& m, const Budget& budget, const std::string& drive,
              const std::string& mode, const std::string& prefetch, bool verify, const RunSettings& rs) {
  const std::vector<std::string>& images = spec.images;
  const uint32_t warmup = rs.warmup, tokens = rs.tokens;
  Cell c{m.file->model_name(), budget.text, drive, mode};
  c.prefetch = prefetch;
  c.verify = verify;
  c.members = uint32_t(spec.devices.size());
  c.queues = rs.queues;
  c.emu_opts = rs.emu_opts;
  // The drive's controllers: their threads are the emulated drive's work, not the engine's. One controller
  // thread per queue of the engine (--queues for the streamer, as many again for the expert fetcher), as
  // bench/layer_stream gives: with the emulator's default of one thread the emulator itself, not the
  // modeled drive, capped streaming near 4.5 GB/s on the H100 (70B, pcie4: 64 % of the bound where mmap
  // reached 85 %). A striped set: one controller per member, each with as many threads (every member
  // serves its share of the streamed layers and of the fetched experts).
  // With --drive-per-gpu the GPUs read through their own drives below: this one keeps a thread per member
  // (the deploy record's reads), not a thread per queue that would poll beside theirs on the same cores.
  const bench::DriveControllers drive_ctrls(spec.devices, drive, rs.drive_per_gpu ? 1 : 2 * rs.queues * rs.gpus, rs.emu_opts);
  llm::GpuExecOptions o;
  o.vram_budget = budget.b.vram;
  o.ram_budget = budget.b.ram;
  o.verify = verify;
  o.slots = rs.slots;
  o.queues = rs.queues;
  o.gpus = rs.gpus;
  o.gpu_ids = rs.gpu_ids;
  // --drive-per-gpu: each GPU streams through a modeled drive of its own (its own controller threads and
  // pacing) over the same image, as N drives holding a copy each would serve it.
  std::vector<std::unique_ptr<bench::DriveControllers>> gpu_drives;
  if (rs.drive_per_gpu) {
    c.drive_per_gpu = true;
    for (uint32_t g = 0; g < rs.gpus; ++g) {
      gpu_drives.push_back(std::make_unique<bench::DriveControllers>(spec.devices, drive, spec.devices.size() > 1 ? rs.queues : 2 * rs.queues,
                                                                     rs.emu_opts));
      const std::span<host::Controller* const> gc = gpu_drives.back()->controllers();
      o.gpu_controllers.emplace_back(gc.begin(), gc.end());
    }
  }
  if (prefetch == "on" || prefetch == "off") {  // the lag prefetch, or neither; no pre-gating either way
    o.expert_prefetch = prefetch == "on";
    o.expert_pregate = 0;
  }
  if (const uint32_t n = pregate_count(prefetch)) o.expert_pregate = n;
  o.expert_pregate_first = pregate_first_count(prefetch);
  o.expert_overlap = rs.overlap;
  o.expert_window_bytes = rs.expert_io.window_bytes;
  o.expert_read_bytes = rs.expert_io.read_bytes;
  const bench::MmapLayerSource* source = nullptr;  // owned by the executor
  std::shared_ptr<bench::ls::Pacer> pacer;         // the mmap loaders' modeled drive(s); none: unpaced
  if (const std::optional<bench::MmapResidency> residency = mmap_residency(mode)) {
    // The drive the controllers model, --emu-opts overrides included, so both loaders meet the same drive.
    if (const emu::DriveModel* dm = drive_ctrls.drive_model()) pacer = std::make_shared<bench::ls::Pacer>(dm->params(), c.members);
    o.nvme_source = [&, pacer, residency](std::vector<llm::PackedRanges> r) {
      auto s = std::make_unique<bench::MmapLayerSource>(images, m, std::move(r), pacer, *residency);
      source = s.get();
      return s;
    };
  }
  auto ex = llm::make_gpu_executor(drive_ctrls.controllers(), m, warmup + tokens + 1, o);
  uint32_t pos = 0, tok = 1;
  auto next = [&](std::span<const float> logits) { return uint32_t(std::max_element(logits.begin(), logits.end()) - logits.begin()); };
  for (uint32_t i = 0; i < warmup; ++i) tok = next(ex->step(tok, pos++));
  // The fetcher's clocks and counts so far: the chain bound counts the timed tokens' fetches only.
  const llm::ExecStats warm = ex->stats();
  // What each modeled drive has served so far: the controllers' (a striped set's members in order, then
  // each GPU's own drive with --drive-per-gpu); an mmap loader's paced reads count as their member's (its
  // pacer stands for the same drive, which also serves the expert fetcher's reads).
  const auto served_now = [&] {
    std::vector<uint64_t> v = drive_ctrls.served_bytes();
    for (uint32_t i = 0; pacer && i < pacer->drives(); ++i) v.at(i) += pacer->admitted_bytes(i);
    for (const auto& g : gpu_drives) {
      const std::vector<uint64_t> b = g->served_bytes();
      v.insert(v.end(), b.begin(), b.end());
    }
    return v;
  };
  const std::vector<uint64_t> served0 = served_now();
  std::vector<const bench::DriveControllers*> all_drives{&drive_ctrls};
  for (const auto& g : gpu_drives) all_drives.push_back(g.get());
  const bench::EngineCpuTimer cpu(all_drives);
  const uint64_t faults0 = source ? source->page_faults() : 0;
  const auto t0 = std::chrono::steady_clock::now();
  uint64_t h = 0xCBF29CE484222325ull;
  for (uint32_t i = 0; i < tokens; ++i) {
    const std::span<const float> logits = ex->step(tok, pos++);
    h = fnv1a(logits, h);
    tok = next(logits);
  }
  c.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  c.host_cpu = cpu.seconds();
  c.served = bench::served_between(served0, served_now());
  if (source) c.loader_faults = source->page_faults() - faults0;
  ex->finish();
  c.stats = ex->stats();
  c.tokens = tokens;
  c.logits_hash = h;
  c.tps = c.seconds > 0 ? tokens / c.seconds : 0;
  // The host link's floor is the plan's (a drive's rate of 0 bounds nothing there): every routed expert not
  // in VRAM crosses the link, cache hit or not. The drives' floor is what they served.
  const double drive_bw = c.drive_bw = drive_ctrls.read_bandwidth();  // the profile's, or --emu-opts' bw=
  const double link_s = c.stats.gpus.empty() ? c.stats.plan.bound_seconds(0, rs.h2d) : llm::gpus_bound_seconds(c.stats.gpus, 0, rs.h2d, true);
  // A drive per GPU: no token ends before each GPU's drive read, in its own turn, what its slots could not
  // hold ahead (turns_floor_seconds; 0 where the slots hold every streamed layer, the engine's auto).
  const double turns_s = rs.drive_per_gpu ? llm::turns_floor_seconds(c.stats.gpus, drive_bw * c.members) : 0;
  double bound_s = bench::served_bound_seconds(c.served, tokens, drive_bw, std::max(link_s, turns_s));
  c.nvme_bytes_per_token = bench::served_bytes_per_token(c.served, tokens);
  const double plan_s = c.stats.gpus.empty() ? c.stats.plan.bound_seconds(drive_bw * c.members, rs.h2d)
                                             : llm::gpus_bound_seconds(c.stats.gpus, drive_bw * c.members, rs.h2d, rs.drive_per_gpu);
  c.plan_bound_tps = plan_s > 0 ? 1 / plan_s : 0;
  c.plan_nvme_bytes_per_token = c.stats.plan.nvme_bytes_per_token();
  // A dense model's plan bytes are exact (each streamed layer once a token), so drives that served fewer
  // in the window read ahead of it: deep slots filled before the timed tokens began (a slow first token)
  // and too few timed tokens to wear that off (2 x H200, 70B, --slots 8, 3 tokens: 6.75 of 9.4 GiB a
  // token, tok/s 123 % of the plan's bound). The bound is then the plan's, whose eff shows the head start.
  if (!c.stats.plan.any_fetched_experts()) {
    bound_s = std::max(bound_s, plan_s);
    if (c.nvme_bytes_per_token < 0.95 * c.plan_nvme_bytes_per_token)
      std::fprintf(stderr, "llm_tokens: note: %s %s: the drives served %s a timed token, the plan streams %s: reads ran ahead "
                   "of the timed tokens (deep streaming slots); the bound is the plan's: give more --tokens\n",
                   c.budget.c_str(), c.drive_label().c_str(), text::human_bytes(c.nvme_bytes_per_token).c_str(),
                   text::human_bytes(c.plan_nvme_bytes_per_token).c_str());
  }
  c.bound_tps = bound_s > 0 ? 1 / bound_s : 0;
  // No prefetch ran (off, or auto that chose none): each layer's reads waited for its router, so the
  // dependent chain bounds the cell too (bench/chain_bound.h). With a prefetch the reads overlap the
  // compute and the chain is no floor.
  const llm::ExecStats& s = c.stats;
  if (s.has_experts && !s.expert_prefetch && !s.expert_pregate && bound_s > 0) {
    bench::ChainTimes t;
    t.wall_seconds = c.seconds;
    t.stall_seconds = bench::added_seconds(warm.prefetch.stall_seconds, s.prefetch.stall_seconds);
    t.read_seconds = std::min(t.stall_seconds, bench::added_seconds(warm.prefetch.read_seconds, s.prefetch.read_seconds));
    t.after_reads_seconds = bench::added_seconds(warm.prefetch.tail_seconds, s.prefetch.tail_seconds);
    t.expert_bytes = s.experts.bytes_read - warm.experts.bytes_read;
    t.fetches = s.experts.tokens - warm.experts.tokens;
    // Each fetch reads one drive set, its members at once: the shared one's, or with --drive-per-gpu its
    // GPU's own, whose bytes count at that drive's rate while the others idle (the GPUs' ranges run in
    // turn). Not every served counter's rate at once: that counted the shared controller, idle for the
    // experts then, and the GPUs' drives as if they read together.
    const double set_bw = drive_bw * c.members;
    std::vector<bench::ChainReads> reads;
    if (rs.drive_per_gpu && s.gpus.size() == warm.gpus.size()) {
      for (size_t g = 0; g < s.gpus.size(); ++g) reads.push_back({s.gpus[g].expert_bytes_read - warm.gpus[g].expert_bytes_read, set_bw});
    } else {
      reads.push_back({t.expert_bytes, set_bw});
    }
    c.chain = bench::chain_bound(t, tokens, reads, bound_s);
  }
  return c;
}

// A bound of 0: nothing crosses a drive or the host link (every byte in VRAM), so the cell has no I/O
// floor to compare with: null, not 0 % efficiency.
std::string json_number(double v, int digits) {
  if (v <= 0) return "null";
  char b[48];
  std::snprintf(b, sizeof b, "%.*f", digits, v);
  return b;
}

// The chain bound's members (null where it does not apply: a prefetch ran, no experts fetched, an error).
std::string chain_json(const Cell& c) {
  const auto& x = c.chain;
  if (!x)
    return "\"chain_bound_tokens_per_second\":null,\"chain_efficiency\":null,\"chain_outside_reads_seconds_per_token\":null,"
           "\"chain_after_reads_seconds_per_token\":null,\"chain_read_floor_seconds_per_token\":null,\"chain_stall_seconds_per_token\":null,"
           "\"chain_stall_read_seconds_per_token\":null,\"chain_fetches_per_token\":null,\"chain_overhead_seconds_per_fetch\":null,";
  char b[640];
  std::snprintf(b, sizeof b,
                "\"chain_bound_tokens_per_second\":%s,\"chain_efficiency\":%s,\"chain_outside_reads_seconds_per_token\":%.6f,"
                "\"chain_after_reads_seconds_per_token\":%.6f,\"chain_read_floor_seconds_per_token\":%.6f,\"chain_stall_seconds_per_token\":%.6f,"
                "\"chain_stall_read_seconds_per_token\":%.6f,\"chain_fetches_per_token\":%.3f,\"chain_overhead_seconds_per_fetch\":%.7f,",
                json_number(x->tokens_per_second(), 6).c_str(), json_number(c.tps * x->seconds, 4).c_str(), x->outside_seconds,
                x->after_reads_seconds, x->read_floor_seconds, x->stall_seconds, x->read_seconds, x->fetches, x->overhead_per_fetch_seconds);
  return b;
}

std::string cell_json(const Cell& c, double h2d) {
  const auto& e = c.stats;
  char b[1024];
  std::snprintf(b, sizeof b,
                "{\"tool\":\"llm_tokens\",\"model\":%s,\"budget\":%s,\"drive\":%s,\"drives\":%u,\"queues\":%u,\"mode\":%s,\"verify_mode\":\"%s\",\"expert_prefetch\":%s,\"tokens\":%u,"
                "\"seconds\":%.6f,\"tokens_per_second\":%.6f,\"bound_tokens_per_second\":%s,\"efficiency\":%s,"
                "\"host_cpu_seconds\":%.6f,\"h2d_bytes_per_second\":%.0f,\"drive_bytes_per_second\":%.0f,"
                "\"vram_layers\":%u,\"ram_layers\":%u,\"nvme_layers\":%u,\"expert_hits\":%llu,\"experts_routed\":%llu,"
                "\"expert_faults\":%llu,\"expert_bytes_read\":%llu,\"lag_routed\":%llu,\"lag_predicted_hits\":%llu,"
                "\"lag_wasted_bytes\":%llu,\"logits_fnv1a\":\"%016llx\",",
                text::json_string(c.model).c_str(), text::json_string(c.budget).c_str(), text::json_string(c.drive).c_str(),
                c.members, c.queues, text::json_string(c.mode).c_str(), c.verify ? "on" : "off", text::json_string(c.prefetch).c_str(), c.tokens,
                c.seconds, c.tps, json_number(c.bound_tps, 6).c_str(), json_number(c.bound_tps > 0 ? c.tps / c.bound_tps : 0, 4).c_str(), c.host_cpu, h2d,
                c.drive_bw * c.members, e.resident_layers, e.ram_layers, e.streamed_layers,
                (unsigned long long)e.experts.hits, (unsigned long long)e.experts.requested, (unsigned long long)e.experts.faults,
                (unsigned long long)e.experts.bytes_read, (unsigned long long)e.lag.routed,
                (unsigned long long)e.lag.predicted_hits, (unsigned long long)e.lag.wasted_bytes,
                (unsigned long long)c.logits_hash);
  // The error text and the plan can be long: appended, not formatted into the fixed buffer.
  std::string prefetch;
  if (e.has_experts)
    prefetch = std::string("\"expert_overlap\":") + (e.expert_overlap ? "true," : "false,") +
               "\"expert_window_bytes\":" + std::to_string(e.expert_window_bytes) + "," +
               "\"expert_read_bytes\":" + std::to_string(e.expert_read_bytes) + "," +
               llm::prefetch_json({e.expert_prefetch, e.expert_pregate, e.expert_pregate_first}, e.prefetch, e.experts) + ",";
  char emu[160];
  if (c.emu_tps > 0)
    std::snprintf(emu, sizeof emu, "\"emulator_tokens_per_second\":%.6f,\"efficiency_vs_lower\":%.4f,", c.emu_tps,
                  c.tps / c.lower_tps());
  else
    std::snprintf(emu, sizeof emu, "\"emulator_tokens_per_second\":null,\"efficiency_vs_lower\":null,");
  const std::string faults = "\"loader_page_faults\":" + (c.loader_faults ? std::to_string(*c.loader_faults) : std::string("null")) + ",";
  char gen[160] = "\"generator_bytes_per_second\":null,\"generator_cpu_seconds_per_gb\":null,\"generator_threads\":null,";
  if (c.generator)
    std::snprintf(gen, sizeof gen, "\"generator_bytes_per_second\":%.0f,\"generator_cpu_seconds_per_gb\":%.4f,\"generator_threads\":%u,",
                  c.generator->bytes_per_second(), c.generator->cpu_seconds_per_gb(), c.generator->threads);
  const std::string verify = c.error.empty() ? "\"verify\":" + llm::verify_json(e.verify) + "," : "";
  std::string served = "\"drive_bytes_served\":[";
  for (size_t i = 0; i < c.served.size(); ++i) served += (i ? "," : "") + std::to_string(c.served[i]);
  // Bytes are 0 where nothing was read (all in VRAM or RAM), null where the cell did not run.
  const auto bytes = [&](double v) { return c.served.empty() ? std::string("null") : std::to_string(uint64_t(v + 0.5)); };
  served += "],\"nvme_bytes_per_token\":" + bytes(c.nvme_bytes_per_token) + ",\"plan_nvme_bytes_per_token\":" +
            bytes(c.plan_nvme_bytes_per_token) + ",\"plan_bound_tokens_per_second\":" + json_number(c.plan_bound_tps, 6) +
            ",\"plan_efficiency\":" + json_number(c.plan_bound_tps > 0 ? c.tps / c.plan_bound_tps : 0, 4) + ",";
  return b + served + prefetch + chain_json(c) + emu + faults + gen + verify + "\"emu_opts\":" + text::json_string(c.emu_opts) + "," + ("\"error\":" + (c.error.empty() ? std::string("null") : text::json_string(c.error))) + ",\"plan\":" +
         (e.plan.layers.empty() ? std::string("null") : llm::plan_json(e.plan)) + ",\"gpus\":" +
         std::to_string(std::max<size_t>(1, e.gpus.size())) + ",\"drive_per_gpu\":" + (c.drive_per_gpu ? "true" : "false") + ",\"gpu_plans\":" + (e.gpus.empty() ? std::string("null") : llm::gpus_json(e.gpus)) +
         "}\n";
}

// pf: the width of the prefetch column (the longest --expert-prefetch entry, at least 4).
void print_cell(const Cell& c, int pf) {
  if (!c.error.empty()) {
    std::printf("%-22s %-10s %-7s %-10s %-3s %-*s ERROR: %s\n", text::printable(c.model).c_str(), c.budget.c_str(),
                c.drive_label().c_str(), c.mode.c_str(), c.verify ? "on" : "off", pf, c.prefetch.c_str(),
                text::printable(c.error).c_str());
  } else {
    const auto& x = c.stats.experts;
    const auto& p = c.stats.prefetch;
    double stall = 0;
    for (double v : p.stall_seconds) stall += v;
    char experts[256] = "-";
    if (c.stats.has_experts) {
      const int n = std::snprintf(experts, sizeof experts, "%llu/%llu; lag %.0f %%; prefetch %llu/%llu; stall %.3f s",
                                  (unsigned long long)x.hits, (unsigned long long)x.requested, 100 * c.stats.lag.hit_rate(),
                                  (unsigned long long)p.hits, (unsigned long long)p.reads, stall);
      if (const auto& ch = c.chain; ch && n > 0 && size_t(n) < sizeof experts)
        std::snprintf(experts + n, sizeof experts - n, "; chain %.3f tok/s %.0f %% (outside reads %.1f ms/tok, %+.0f us/fetch over the rate)",
                      ch->tokens_per_second(), 100 * c.tps * ch->seconds, 1e3 * ch->outside_seconds, 1e6 * ch->overhead_per_fetch_seconds);
    }
    else if (c.loader_faults)
      std::snprintf(experts, sizeof experts, "loader page faults %.0f a token", double(*c.loader_faults) / std::max(c.tokens, 1u));
    char emu[48] = "        -      -";
    if (c.emu_tps > 0) std::snprintf(emu, sizeof emu, "%9.3f %5.0f%%", c.emu_tps, 100 * c.tps / c.lower_tps());
    char bound[32] = "        -      -";  // all in VRAM: no I/O floor
    if (c.bound_tps > 0) std::snprintf(bound, sizeof bound, "%9.3f %5.0f%%", c.bound_tps, 100 * c.tps / c.bound_tps);
    std::printf("%-22s %-10s %-7s %-10s %-3s %-*s %3u/%3u/%3u %9.3f %s %10s %s %8.3f s %s\n", text::printable(c.model).c_str(), c.budget.c_str(),
                c.drive_label().c_str(), c.mode.c_str(), c.verify ? "on" : "off", pf, c.prefetch.c_str(), c.stats.resident_layers, c.stats.ram_layers,
                c.stats.streamed_layers, c.tps, bound, text::human_bytes(c.nvme_bytes_per_token).c_str(), emu, c.host_cpu, experts);
  }
  std::fflush(stdout);
}

// --image PATH[,PATH...]: one image, or a striped set's member images in order.
ModelSpec image_model(const std::string& list) {
  ModelSpec spec;
  try {
    spec.images = text::split_list("--image", list);
  } catch (const text::ParseError& e) {
    throw cli::UsageError(e.what());
  }
  for (const std::string& p : spec.images) spec.devices.push_back("emu:" + p);
  return spec;
}

// --device emu:...: one namespace given whole, or a generated striped set's members (llm_modeled_drive.h).
ModelSpec device_model(const std::string& device) { return ModelSpec{bench::emu_model_devices(device), {}}; }

// The generator's own rate for an emu:gen model (every core, 1 s), printed: the emulator, not the
// generator, must be the limit of its cells (compare with the drives' rates and the emu column).
std::optional<llm::gen::GenerationRate> generator_rate(const ModelSpec& spec) {
  const auto image = llm::gen::generated_image(spec.devices[0]);
  if (!image) return std::nullopt;
  const llm::gen::GenerationRate r = llm::gen::measure_generation(image->model(), 0, 1.0);
  std::printf("%s: generated on read: %.2f GB/s on %u threads (%.2f GB/s each, %.3f CPU s per GB); its record's "
              "checksums took %.1f s at open\n",
              image->record().name.c_str(), r.bytes_per_second() / 1e9, r.threads, r.bytes_per_second() / 1e9 / r.threads,
              r.cpu_seconds_per_gb(), image->checksum_seconds());
  return r;
}

int run(const cli::Args& args, const std::vector<ModelSpec>& models) {
  const std::vector<Budget> budgets = parse_budgets(args);
  const std::vector<std::string> drives = args.get_list("drives", "sn530,pcie4,pcie5");
  const std::vector<std::string> modes = args.get_list("modes", "gpunvme,mmap,mmap-evict");
  for (const std::string& d : drives)
    if (!bench::ls::drive_profile_known(d)) throw cli::UsageError("--drives: unknown drive '" + d + "' (" + bench::ls::drive_profile_names() + ")");
  for (const std::string& md : modes)
    if (md != "gpunvme" && !mmap_residency(md))
      throw cli::UsageError("--modes: '" + md + "' is not gpunvme, mmap or mmap-evict");
  std::vector<bool> verifies;
  for (const std::string& v : args.get_list("verify", "on")) {
    if (v != "on" && v != "off") throw cli::UsageError("--verify: '" + v + "' is not on or off (or a list: on,off)");
    verifies.push_back(v == "on");
  }
  const std::vector<std::string> prefetches = args.get_list("expert-prefetch", "auto");
  for (const std::string& p : prefetches) {
    const std::string base = prefetch_base(p);
    uint32_t n = 0;
    bool first_ok = true;
    try {
      const std::optional<uint32_t> first = pregate_first_count(p);
      first_ok = !first || (*first <= llm::kMaxRoutedExperts && base != "on" && base != "off");
    } catch (const text::ParseError&) {
      first_ok = false;
    }
    if (!first_ok)
      throw cli::UsageError("--expert-prefetch: '" + p + "': +first:M needs auto or pregate:N before it and M from 0 to k "
                            "(M experts of the next token's first fetched layer, read ahead at the last; default N)");
    if (base == "auto" || base == "on" || base == "off") continue;
    try {
      n = pregate_count(p);
    } catch (const text::ParseError&) {
    }
    if (n == 0 || n > llm::kMaxRoutedExperts)
      throw cli::UsageError("--expert-prefetch: '" + p + "' is not auto, on, off or pregate:N (N predicted experts per layer, 1..k)");
  }
  if (prefetches.empty()) throw cli::UsageError("--expert-prefetch is empty (auto, on, off, pregate:N, or a list: on,off)");
  const std::string overlap_arg = args.get("expert-overlap", "auto");
  if (overlap_arg != "auto" && overlap_arg != "on" && overlap_arg != "off")
    throw cli::UsageError("--expert-overlap: '" + overlap_arg + "' is not auto, on or off");
  RunSettings rs;
  rs.overlap = overlap_arg == "auto" ? std::nullopt : std::optional<bool>(overlap_arg == "on");
  rs.tokens = args.get_u32("tokens", 3);
  rs.warmup = args.get_u32("warmup", 1);
  rs.slots = llm::parse_slots_flag(args);
  rs.queues = args.get_u32("queues", 8);
  try {
    const llm::GpuChoice gpus = llm::parse_gpus(args.get("gpus", "1"));
    rs.gpus = gpus.count, rs.gpu_ids = gpus.ids;
  } catch (const std::invalid_argument& e) {
    throw cli::UsageError(e.what());
  }
  rs.drive_per_gpu = args.has("drive-per-gpu");
  if (rs.drive_per_gpu && rs.gpus < 2) throw cli::UsageError("--drive-per-gpu needs --gpus 2 or more");
  if (rs.gpus > 1 && (modes.size() != 1 || modes[0] != "gpunvme"))
    throw cli::UsageError("--gpus above 1 runs the gpunvme mode only (the mmap loaders feed one GPU): give --modes gpunvme");
  rs.expert_io = llm::parse_expert_io_flags(args);
  if (args.has("emu-opts")) {
    rs.emu_opts = args.get("emu-opts");
    if (rs.emu_opts.empty()) throw cli::UsageError("--emu-opts is empty (e.g. poll=spin)");
    if (rs.emu_opts.find_first_of("=") == std::string::npos) throw cli::UsageError("--emu-opts: '" + rs.emu_opts + "' has no key=value");
    if (rs.emu_opts.find("drive=") != std::string::npos || rs.emu_opts.find("threads=") != std::string::npos)
      throw cli::UsageError("--emu-opts: drive= and threads= are the cell's own (--drives, --queues)");
  }
  if (rs.tokens == 0) throw cli::UsageError("--tokens must be at least 1");
  if (rs.queues == 0 || rs.queues > 16) throw cli::UsageError("--queues must be 1 to 16 (the emulated controller gets up to two threads a queue)");
  std::string why;
  if (!llm::gpu_available(&why)) throw std::runtime_error("llm_tokens needs a GPU: " + why);
  llm::check_gpus_here(rs.gpus, rs.gpu_ids);
  // The link measured is the first GPU's (one GPU by id: the one the engine runs on).
  if (!rs.gpu_ids.empty()) device::check_cuda(cudaSetDevice(rs.gpu_ids[0]), "cudaSetDevice for --gpus");
  rs.h2d = bench::measure_h2d();
  std::printf("host-to-GPU copy from pinned memory: %.2f GB/s\n", rs.h2d / 1e9);
  int pf_width = 4;
  for (const std::string& p : prefetches) pf_width = std::max(pf_width, int(p.size()));
  std::printf("%-22s %-10s %-7s %-10s %-3s %-*s %11s %9s %9s %6s %10s %9s %6s %10s %s\n", "model", "VRAM:RAM", "drive", "loader", "vfy", pf_width, "pf",
              "V/R/N lay", "tok/s", "bound", "eff", "NVMe/tok", "emu", "eff<", "host CPU", "MoE: expert cache hits; lag prediction; prefetch hits/read; stall[; chain bound, eff]. mmap: page faults");
  std::vector<std::string> run_devices;  // every device: --json-out may be none of them (runtime/guard/output_file.h)
  for (const ModelSpec& spec : models) run_devices.insert(run_devices.end(), spec.devices.begin(), spec.devices.end());
  guard::OutputFile json = args.has("json-out") ? guard::OutputFile::open(args.get("json-out"), run_devices, "--json-out") : guard::OutputFile();
  int errors = 0;
  for (const ModelSpec& spec : models) {
    // Unthrottled, with readers' locks: the startup loads (VRAM and RAM tiers) are not what the cells measure.
    // An emu:gen namespace checksums its model here, once (examples/llm/tools/emu_gen.h).
    llm::DeviceSet set(spec.devices);
    const llm::ModelOnDevice m = llm::open_model(set.namespaces());
    const std::optional<llm::gen::GenerationRate> generator = generator_rate(spec);
    if (spec.images.empty() && std::any_of(modes.begin(), modes.end(), [](const std::string& md) { return mmap_residency(md).has_value(); }))
      std::printf("%s: no mmap cells (the mmap loaders read image files: give --image)\n", text::printable(spec.devices[0]).c_str());
    for (const Budget& b : budgets) {
      std::optional<uint64_t> first_hash;
      std::map<std::string, double> capacity;  // "loader/prefetch" -> tok/s with drive none
      // A plan with nothing on NVMe reads no drive per token: one cell stands for every drive and loader.
      const llm::ResidencyPlan plan = llm::plan_residency(llm::layer_bytes(m), b.b);
      const bool drive_free = plan.count(llm::Tier::kNvme) == 0 && !plan.any_fetched_experts();
      // The prefetch dimension only where experts are fetched ("-": not applicable).
      const std::vector<std::string> pfs = plan.any_fetched_experts() ? prefetches : std::vector<std::string>{"-"};
      for (const std::string& d : drives) {
        for (const std::string& md : modes) {
          bool auto_ran_without = false;  // an auto cell ran with the prefetch off: an off cell would repeat it
          for (const std::string& pf : pfs) {
            for (const bool vf : verifies) {
              if (drive_free && (d != drives.front() || md != modes.front())) continue;
              if (pf == "off" && auto_ran_without) continue;
              if (spec.images.empty() && mmap_residency(md)) continue;
              Cell c;
              const std::string key = md + "/" + pf + (vf ? "" : "/noverify");
              try {
                c = run_cell(spec, m, b, d, md, pf, vf, rs);
                // The emulator's own ceiling for this cell: the same cell unthrottled, if it ran first.
                const auto cap = capacity.find(key);
                if (d == "none") capacity[key] = c.tps;
                else if (cap != capacity.end()) c.emu_tps = cap->second;
                if (first_hash && *first_hash != c.logits_hash) c.error = "logits differ from this budget's first cell (the weights read differ)";
                if (!first_hash) first_hash = c.logits_hash;
                auto_ran_without |= prefetch_base(pf) == "auto" && !c.stats.expert_prefetch && !c.stats.expert_pregate;
              } catch (const std::exception& e) {
                c = Cell{m.file->model_name(), b.text, d, md};
                c.prefetch = pf;
                c.verify = vf;
                c.members = uint32_t(spec.devices.size());
                c.drive_bw = bench::ls::drive_read_bandwidth(d);  // the profile's: no controller to ask
                c.error = e.what();
              }
              c.generator = generator;
              errors += !c.error.empty();
              print_cell(c, pf_width);
              if (json) {
                json.write(cell_json(c, rs.h2d));
                json.flush();
              }
            }
          }
        }
      }
    }
  }
  if (json) json.commit();  // every cell is in it, a failed one with its error
  return errors ? 1 : 0;
}

// --image and --device repeat: collected, in order, before cli::Args (which takes each option once).
int parse_and_run(int argc, char** argv) {
  std::vector<ModelSpec> models;
  std::vector<char*> rest{argv[0]};
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--image") == 0 && i + 1 < argc) models.push_back(image_model(argv[++i]));
    else if (std::strcmp(argv[i], "--device") == 0 && i + 1 < argc) models.push_back(device_model(argv[++i]));
    else rest.push_back(argv[i]);
  }
  const cli::Args args(int(rest.size()), rest.data(), 1, {"budgets", "drives", "modes", "verify", "expert-prefetch", "expert-overlap", "expert-window", "expert-read", "tokens", "warmup", "slots", "queues", "emu-opts", "json-out", "gpus"}, {"drive-per-gpu"});
  if (args.help_asked()) return args.print_help("llm_tokens", kHelp);
  if (!args.positional().empty()) throw cli::UsageError("unexpected argument '" + args.positional().front() + "'");
  if (models.empty())
    throw cli::UsageError("give --image PATH (a namespace image holding a deployed model) or --device emu:gen,shape=NAME,type=T");
  return run(args, models);
}

}  // namespace

int main(int argc, char** argv) {
  return cli::run_tool("llm_tokens", kHelp, [&] { return parse_and_run(argc, argv); });
}
