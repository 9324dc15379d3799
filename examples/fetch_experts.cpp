// A toy router picks top-k experts per (token, layer) of a MoE model; the expert fetcher reads
// their slices (all projections, or --down-only) into a scratchpad, optionally through an LRU cache;
// every fetched part is compared with the GGUF file. Prints the cache metrics.
//
//   fetch_experts [--device emu:ram,size=128M,lba=4096] [--gguf moe.gguf [--deployed]]
//                 [--layers 8] [--experts 32] [--top-k 4] [--tokens 64] [--cache-mb 0] [--down-only]
//                 [--path auto|gpu|cpu]
//
// --path gpu (the default where a GPU is present): the router is a kernel that writes the expert ids
// into GPU memory, the GpuExpertFetcher's kernels place and read them, and a consumer kernel waits
// for each expert's readiness and checksums its parts: no host round trip per token.
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "example_model.h"
#include "host/error.h"
#include "host/locked_open.h"
#include "host/text/escape.h"
#include "runtime/cli/args.h"
#include "runtime/stream/cpu_submitter.h"
#include "runtime/stream/expert_fetcher.h"
#if GPUNVME_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "gpu_toys.h"
#include "runtime/stream/gpu_queues.h"
#include "runtime/stream/gpu_expert_fetcher.h"
#endif

using namespace gpunvme;

namespace {

const cli::Help kHelp = {
    std::string("usage: fetch_experts [--device DEV] [--gguf FILE [--deployed]] [--layers N] [--experts N] [--top-k K]\n"
                "                     [--tokens N] [--cache-mb MB] [--down-only] [--path auto|gpu|cpu] [--allow-write] [--force]\n"
                "\n"
                "A toy router picks top-k experts per (token, layer) of a MoE model; the expert fetcher reads their\n"
                "slices into a scratchpad, optionally through an LRU cache; every fetched part is compared with the\n"
                "GGUF file. Prints the cache metrics. Without --gguf a generated MoE model is written first.\n"
                "\n"
                "  --device DEV        default emu:ram,size=128M,lba=4096\n"
                "  --gguf FILE         a real MoE model, written at 1 MiB first unless --deployed says it is there\n"
                "  --layers N          generated model: layers (default 8); --experts N: experts per layer (default 32)\n"
                "  --top-k K           experts fetched per layer and token (default 4)\n"
                "  --tokens N          tokens to route and fetch experts for (default 64)\n"
                "  --cache-mb MB       LRU expert cache (default 0: none)\n"
                "  --down-only         fetch only the down projection of each expert\n"
                "  --path auto|gpu|cpu gpu (default where a GPU is present): router, fetcher and consumer kernels,\n"
                "                      no host round trip per token; cpu: the CPU fetcher\n") +
        guard::kWriteFlagsHelp,
    std::string("\n") + host::device_string_help()};

void print_metrics(const stream::FetcherMetrics& mt, const std::vector<uint32_t>& resident) {
  std::printf("fetches %llu, experts requested %llu: %llu faulted (%.2f per fetch), %llu hits (%.1f%%), %.1f MB read\n",
              (unsigned long long)mt.tokens, (unsigned long long)mt.requested, (unsigned long long)mt.faults,
              mt.faults_per_token(), (unsigned long long)mt.hits, 100 * mt.hit_rate(), mt.bytes_read / 1e6);
  std::printf("steady state: %llu fetches, %.2f faults per fetch; resident per layer:", (unsigned long long)mt.steady_tokens,
              mt.steady_faults_per_token());
  for (uint32_t n : resident) std::printf(" %u", n);
  std::printf("\n");
}

#if GPUNVME_HAVE_CUDA
// The GPU path: router, fetch and consumer kernels on one stream for every (token, layer).
int fetch_on_gpu(host::Controller& ctrl, const example::OnDevice& m, const std::vector<uint8_t>& file,
                 const stream::ExpertCatalog& cat, uint32_t top_k, uint32_t tokens, double cache_mb) {
  stream::GpuQueues q(ctrl, 2, 4, 256);
  stream::GpuSubmitter gpu(ctrl, q.raw, 1);
  stream::GpuExpertFetcher f(ctrl, gpu, cat, {.max_experts_per_fetch = top_k, .cache_bytes = uint64_t(cache_mb * 1e6)});
  std::printf("GPU path: %zu queues; scratchpad %.2f MB, %.1f KB per expert, cache %u experts\n", q.raw.size(),
              f.scratchpad().size() / 1e6, f.expert_slot_bytes() / 1e3, f.cache_capacity());
  // What the consumer must find: every part's checksum from the file, and which experts exist.
  std::vector<uint64_t> expected(size_t(cat.n_layers) * cat.n_experts * 4, 0);
  std::vector<uint8_t> has(size_t(cat.n_layers) * cat.n_experts, 0);
  for (uint32_t l = 0; l < cat.n_layers; ++l)
    for (uint32_t e = 0; e < cat.n_experts; ++e) {
      const auto& parts = cat.of(l, e);
      has[size_t(l) * cat.n_experts + e] = !parts.empty();
      for (size_t k = 0; k < parts.size(); ++k) {
        const model::ExpertExtent* x = m.map->expert(l, e, parts[k].proj);
        if (!x) throw std::runtime_error("an expert slice of the catalog is not in the map");
        expected[(size_t(l) * cat.n_experts + e) * 4 + k] = example::toy_checksum(file.data() + x->file_offset, x->extent.byte_length);
      }
    }
  example::DeviceVec<uint64_t> d_expected(expected);
  example::DeviceVec<uint8_t> d_has(has);
  example::DeviceVec<uint32_t> ids(top_k);
  example::DeviceVec<unsigned long long> counters(2);  // parts checked, bad parts
  cudaStream_t s = nullptr;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  auto ss = reinterpret_cast<stream::cuda_stream_t>(s);
  const uint8_t* scratch = static_cast<const uint8_t*>(f.scratchpad().device());
  for (uint32_t t = 0; t < tokens; ++t)
    for (uint32_t l = 0; l < cat.n_layers; ++l) {
      example::enqueue_router(ss, ids.p, top_k, t, l, cat.n_experts, d_has.p);
      f.fetch(l, ids.p, top_k, ss);
      example::enqueue_check_experts(ss, f.device_result(), f.device_experts(), scratch, d_expected.p, l, cat.n_experts,
                                     counters.p, counters.p + 1);
    }
  f.wait();
  cudaStreamSynchronize(s);
  cudaStreamDestroy(s);
  const std::vector<unsigned long long> c = counters.get();
  print_metrics(f.metrics(), f.resident_per_layer());
  std::printf("verified %llu expert parts on the GPU against the file's checksums: %llu mismatches\n", c[0], c[1]);
  std::printf(c[1] == 0 && c[0] > 0 ? "OK\n" : "FAIL\n");
  return c[1] == 0 && c[0] > 0 ? 0 : 1;
}
#endif
}  // namespace

int main(int argc, char** argv) {
  std::string device, gguf_path;
  guard::WritePermission permission;
  bool deployed = false, down_only = false;
  std::string path;
  uint32_t layers = 0, experts = 0, top_k = 0, tokens = 0;
  double cache_mb = 0;
  try {
    const cli::Args args(argc, argv, 1, {"device", "gguf", "layers", "experts", "top-k", "tokens", "cache-mb", "path"},
                         {"deployed", "down-only", "allow-write", "force"});
    if (args.help_asked()) return args.print_help("fetch_experts", kHelp);
    if (!args.positional().empty())
      throw cli::UsageError("unexpected argument '" + args.positional().front() + "' (see --help)");
    device = args.get("device", "emu:ram,size=128M,lba=4096");
    gguf_path = args.get("gguf");
    deployed = args.has("deployed");
    permission = {args.has("allow-write"), args.has("force")};
    down_only = args.has("down-only");
    layers = args.get_u32("layers", 8);
    experts = args.get_u32("experts", 32);
    top_k = args.get_u32("top-k", 4);
    tokens = args.get_u32("tokens", 64);
    cache_mb = args.get_double("cache-mb", 0);
    if (tokens == 0) throw cli::UsageError("--tokens must be at least 1 (tokens to route and fetch experts for)");
    if (top_k == 0) throw cli::UsageError("--top-k must be at least 1 (experts fetched per layer and token)");
    if (layers == 0 || layers > 100000) throw cli::UsageError("--layers must be 1..100000");
    if (experts == 0 || experts > (1u << 20)) throw cli::UsageError("--experts must be 1..1048576");
    if (cache_mb > 1e9) throw cli::UsageError("--cache-mb must be at most 1000000000");
    path = args.get("path", "auto");
  } catch (const cli::UsageError& e) {
    cli::print_usage_error("fetch_experts", e, kHelp);
    return 2;
  }
  try {
    if (!deployed) guard::check_write_allowed(device, permission, example::kWhatWeWrite);
    auto ctrl = host::open_for(/*writes=*/!deployed, device);  // under the lock deploy takes (host/locked_open.h)
    auto qp = ctrl->create_io_queue_pair(1, std::min<uint32_t>(256, ctrl->max_queue_entries()));
    const std::vector<uint8_t> file =
        gguf_path.empty() ? example::moe_model(layers, experts, 2000) : example::read_file(gguf_path);
    example::OnDevice m = example::put_and_find(*ctrl, *qp, file, deployed, permission);
    const auto which = down_only ? stream::ExpertParts::kDownOnly : stream::ExpertParts::kAll;
    stream::ExpertCatalog cat = stream::ExpertCatalog::from_map(*m.map, which);
    std::printf("model: %s, %u layers with experts, %u experts each, %.1f MB; found: %s\n",
                text::printable(m.file->model_name()).c_str(), cat.n_layers, cat.n_experts, file.size() / 1e6,
                text::printable(m.detected.describe()).c_str());
    if (cat.n_experts == 0) throw std::runtime_error("the model has no MoE experts");
    if (example::use_gpu_path(path)) {
#if GPUNVME_HAVE_CUDA
      return fetch_on_gpu(*ctrl, m, file, cat, top_k, tokens, cache_mb);
#endif
    }
    stream::CpuSubmitter sub(*ctrl, *qp);
    stream::ExpertFetcher f(*ctrl, sub, cat,
                            {.max_experts_per_fetch = top_k, .cache_bytes = uint64_t(cache_mb * 1e6)});
    std::printf("scratchpad %.2f MB, %.1f KB per expert, cache %u experts\n", f.scratchpad().size() / 1e6,
                f.expert_slot_bytes() / 1e3, f.cache_capacity());
    uint64_t parts = 0, bad = 0;
    const uint8_t* sp = f.scratchpad().as<uint8_t>();
    for (uint32_t t = 0; t < tokens; ++t) {
      for (uint32_t l = 0; l < cat.n_layers; ++l) {
        // Toy router: scores favour a few experts per layer (as real routers do), ties broken by hash.
        std::vector<std::pair<uint64_t, uint32_t>> score;
        for (uint32_t e = 0; e < cat.n_experts; ++e) {
          if (cat.of(l, e).empty()) continue;
          score.push_back({example::toy_score(t, l, e, cat.n_experts), e});
        }
        std::sort(score.rbegin(), score.rend());
        std::vector<uint32_t> sel;
        for (uint32_t k = 0; k < top_k && k < score.size(); ++k) sel.push_back(score[k].second);
        const auto& res = f.fetch(l, sel);
        for (size_t i = 0; i < res.size(); ++i) {
          f.wait(i);  // per-expert readiness: a consumer could start on expert 0 here
          for (const auto& p : res[i].parts) {
            const model::ExpertExtent* x = m.map->expert(l, res[i].expert, p.proj);
            ++parts;
            if (!x || x->extent.byte_length != p.bytes ||
                std::memcmp(sp + p.offset, file.data() + x->file_offset, p.bytes) != 0) {
              ++bad;
              std::fprintf(stderr, "MISMATCH: token %u layer %u expert %u %s\n", t, l, res[i].expert,
                           model::projection_name(p.proj));
            }
          }
        }
      }
    }
    f.wait_all();
    print_metrics(f.metrics(), f.resident_per_layer());
    std::printf("verified %llu expert parts against the file: %llu mismatches\n", (unsigned long long)parts,
                (unsigned long long)bad);
    ctrl->delete_io_queue_pair(*qp);
    std::printf(bad == 0 && parts > 0 ? "OK\n" : "FAIL\n");
    return bad == 0 && parts > 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fetch_experts: %s\n", e.what());
    return 1;
  }
}
