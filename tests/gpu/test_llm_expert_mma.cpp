// The grouped MoE's expert products on the tensor cores (examples/llm/compute/gpu_expert_mma.h), for
// every weight type: a stack of 5 experts whose tokens make full, partial, single and no tiles (and
// empty tiles after the last, as a launch over a bound has), over rows that end in a partial tile; each output within gemm_error_bound (the dense prompt product's
// bound, gpu_gemm.h) of the exact product plus the expert's bias; the same experts found through a
// fetch's table in a scratchpad laid out otherwise give the same bits; an expert whose read failed, or a
// table naming another expert, gives NaN for its tile and leaves the others alone. Then in the engine: a
// MoE prompt whose experts are fetched from the emulated drive gives the all-in-VRAM logits to the bit.
#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>
#include <catch2/generators/catch_generators_range.hpp>

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <span>
#include <vector>

#include "device_array.h"
#include "examples/llm/compute/gpu_expert_mma.h"
#include "examples/llm/compute/gpu_moe_group.h"
#include "examples/llm/engine/executor.h"
#include "examples/llm/engine/model_on_device.h"
#include "examples/llm/quant/weight_types.h"
#include "gpu_rig.h"
#include "llm_fixtures.h"
#include "runtime/gguf/ggml_types.h"
#include "runtime/model/tensor_names.h"
#include "tests/llm/tiny_model.h"

using namespace gpunvme;
using namespace gpunvme::llm;
using Catch::Generators::from_range;
using gpunvme::test::DeviceArray;

namespace {

constexpr uint32_t kExperts = 5;
const std::vector<GgmlType> kTypes(kComputedTypes.begin(), kComputedTypes.end());

// The exact product of a row (dequantized on the host) with x, in double.
double exact_dot(GgmlType t, const uint8_t* row, uint32_t cols, const float* x) {
  double s = 0;
  float g[kGroup];
  for (uint32_t grp = 0; grp < cols / kGroup; ++grp) {
    dequant_group(t, row, grp, g);
    for (int l = 0; l < kGroup; ++l) s += double(g[l]) * x[grp * kGroup + l];
  }
  return s;
}

// The grouping gpu_group_by_expert must make (gpu_moe_group.h), on the host: GroupedMoe::group's.
struct Grouping {
  std::vector<uint32_t> rows, pos, used;
  std::vector<ExpertTile> tiles;
};
Grouping group_on_host(const std::vector<uint32_t>& routes, uint32_t n, uint32_t k, uint32_t n_expert, uint32_t max_tiles) {
  std::vector<uint32_t> count(n_expert), first(n_expert);
  for (uint32_t i = 0; i < n * k; ++i) ++count[routes[size_t(i / k) * 2 * k + i % k]];
  Grouping g;
  g.rows.resize(size_t(n) * k), g.pos.resize(size_t(n) * k), g.tiles.assign(max_tiles, ExpertTile{});
  uint32_t next = 0, tiles = 0;
  for (uint32_t e = 0; e < n_expert; ++e) {
    first[e] = next;
    for (uint32_t r = 0; r < count[e]; r += kExpertTileTokens)
      g.tiles[tiles++] = {e, uint32_t(g.used.size()) % k, next + r, std::min(kExpertTileTokens, count[e] - r)};
    if (count[e]) g.used.push_back(e);
    next += count[e];
  }
  for (uint32_t i = 0; i < n * k; ++i) {
    const uint32_t r = first[routes[size_t(i / k) * 2 * k + i % k]]++;
    g.rows[r] = i / k, g.pos[i] = r;
  }
  return g;
}

}  // namespace

TEST_CASE("MoE tokens grouped by expert on the device: the host's grouping, its empty tiles to the bound", "[gpu][llm][gemm]") {
  REQUIRE_GPU();
  struct Case {
    uint32_t n, k, n_expert;
    bool skewed;  // most choices on a few experts: full tiles, and most experts with no token
  };
  const Case c = GENERATE(Case{1, 8, 128, false}, Case{7, 8, 128, false}, Case{33, 2, 8, false}, Case{517, 8, 128, false},
                          Case{512, 8, 128, true}, Case{300, 4, 300, false}, Case{64, 1, 1, false}, Case{2048, 8, 128, true});
  CAPTURE(c.n, c.k, c.n_expert, c.skewed);
  std::mt19937 rng(c.n * 131 + c.n_expert);
  std::vector<uint32_t> routes(size_t(c.n) * 2 * c.k);
  for (uint32_t t = 0; t < c.n; ++t) {
    std::vector<uint32_t> ids(c.n_expert);
    for (uint32_t e = 0; e < c.n_expert; ++e) ids[e] = e;
    std::shuffle(ids.begin(), ids.end(), rng);
    if (c.skewed && t % 4 != 0)  // three tokens of four choose experts 0 .. k-1
      for (uint32_t j = 0; j < c.k; ++j) std::swap(ids[j], *std::find(ids.begin(), ids.end(), j));
    for (uint32_t j = 0; j < c.k; ++j) {
      routes[size_t(t) * 2 * c.k + j] = ids[j];
      const float w = 1.0f / float(c.k);
      std::memcpy(&routes[size_t(t) * 2 * c.k + c.k + j], &w, 4);
    }
  }
  const uint32_t rows = c.n * c.k, max_tiles = expert_tiles_bound(rows, c.n_expert) + 5;
  const Grouping want = group_on_host(routes, c.n, c.k, c.n_expert, max_tiles);
  DeviceArray<uint32_t> droutes(routes), drows(std::vector<uint32_t>(rows, ~0u)), dpos(std::vector<uint32_t>(rows, ~0u)),
      dused(std::vector<uint32_t>(c.n_expert, ~0u));
  DeviceArray<ExpertTile> dtiles(std::vector<ExpertTile>(max_tiles, ExpertTile{7, 7, 7, 7}));
  gpu_group_by_expert(nullptr, droutes.p, c.n, c.k, c.n_expert, drows.p, dpos.p, dtiles.p, max_tiles, dused.p);
  REQUIRE(cudaGetLastError() == cudaSuccess);
  CHECK(drows.get(rows) == want.rows);
  CHECK(dpos.get(rows) == want.pos);
  const std::vector<uint32_t> used = dused.get(c.n_expert);
  CHECK(std::vector<uint32_t>(used.begin(), used.begin() + want.used.size()) == want.used);
  const std::vector<ExpertTile> tiles = dtiles.get(max_tiles);
  uint32_t real = 0;
  for (uint32_t i = 0; i < max_tiles; ++i) {
    CAPTURE(i);
    CHECK(tiles[i].expert == want.tiles[i].expert);
    CHECK(tiles[i].slot == want.tiles[i].slot);
    CHECK(tiles[i].row0 == want.tiles[i].row0);
    CHECK(tiles[i].count == want.tiles[i].count);
    real += tiles[i].count ? 1 : 0;
  }
  CHECK(real <= expert_tiles_bound(rows, c.n_expert));
  if (c.skewed) CHECK(tiles[0].count == kExpertTileTokens);
}

TEST_CASE("grouped expert products on the tensor cores: within gemm_error_bound, fetched = resident to the bit",
          "[gpu][llm][gemm]") {
  REQUIRE_GPU();
  const GgmlType t = GENERATE(from_range(kTypes));
  // 544: a last step of 32 columns (the kernel's steps are 64 wide), for the types of 32-element blocks;
  // the k-quants' rows are whole 256-element super-blocks: 1280 for them.
  const uint32_t wide = GENERATE(512u, 768u, 544u);
  const uint32_t rows = 300, cols = wide % gguf::ggml_traits(t).block_size == 0 ? wide : 1280;
  CAPTURE(gguf::ggml_type_name(uint32_t(t)), cols);
  std::mt19937 rng(uint32_t(t) * 31 + cols);
  const std::vector<uint8_t> w = llm::test::random_rows(t, cols, uint64_t(rows) * kExperts, rng);
  const uint64_t row_bytes = w.size() / (uint64_t(rows) * kExperts), mat = row_bytes * rows;
  // Tokens per expert: two tiles (64 + 6), none, one, one full tile, a partial one.
  const uint32_t counts[kExperts] = {70, 0, 1, 64, 33};
  std::vector<ExpertTile> tiles;
  uint32_t total = 0, used = 0;
  for (uint32_t e = 0; e < kExperts; ++e) {
    for (uint32_t r = 0; r < counts[e]; r += kExpertTileTokens)
      tiles.push_back({e, used, total + r, std::min(kExpertTileTokens, counts[e] - r)});
    total += counts[e];
    used += counts[e] ? 1 : 0;
  }
  // Empty tiles after the last, as a launch sized by expert_tiles_bound has them: nothing read or written.
  tiles.resize(tiles.size() + 3, ExpertTile{});
  std::vector<float> x(size_t(total) * cols), bias(size_t(kExperts) * rows);
  std::normal_distribution<float> d;
  for (float& v : x) v = d(rng);
  for (float& v : bias) v = d(rng);
  DeviceArray<uint8_t> dw(w);
  DeviceArray<float> dx(x), dbias(bias), dscale(std::vector<float>(total, NAN));
  DeviceArray<uint16_t> dxh(std::vector<uint16_t>(size_t(total) * cols, 0));
  DeviceArray<ExpertTile> dtiles(tiles);
  gpu_gemm_inputs(nullptr, gemm_elem_for(t), dx.p, total, cols, dxh.p, dscale.p);
  const std::vector<float> poison(size_t(total) * rows, NAN);
  DeviceArray<float> dy(poison), dfetched(poison), dfailed(poison);
  const ExpertWeights resident{t, row_bytes, rows, cols, dw.p, mat};
  gpu_expert_products(nullptr, resident, dtiles.p, uint32_t(tiles.size()), dxh.p, dscale.p, dbias.p, dy.p);

  // The used experts in a scratchpad in reverse order, each behind a part of another projection; the
  // fetch's table in reverse order of routing index too.
  const uint32_t ids[] = {0, 2, 3, 4};
  std::vector<uint8_t> scratch;
  std::vector<stream::GpuFetchedExpert> table(used);
  std::vector<uint32_t> selection(used);
  for (uint32_t j = used; j-- > 0;) {
    selection[j] = used - 1 - j;
    stream::GpuFetchedExpert& e = table[selection[j]];
    e.expert = ids[j];
    e.part_count = 2;
    e.part_proj[0] = uint32_t(model::Projection::kUp), e.part_offset[0] = scratch.size(), e.part_bytes[0] = mat;
    scratch.insert(scratch.end(), mat, uint8_t(0x55));  // another projection's bytes: not to be read
    e.part_proj[1] = uint32_t(model::Projection::kGate), e.part_offset[1] = scratch.size(), e.part_bytes[1] = mat;
    scratch.insert(scratch.end(), w.begin() + ids[j] * mat, w.begin() + (ids[j] + 1) * mat);
  }
  DeviceArray<uint8_t> dscratch(scratch);
  DeviceArray<stream::GpuFetchedExpert> dtable(table);
  DeviceArray<uint32_t> dsel(selection);
  ExpertWeights fetched{t, row_bytes, rows, cols, nullptr, 0, dscratch.p, dtable.p, dsel.p, uint32_t(model::Projection::kGate)};
  gpu_expert_products(nullptr, fetched, dtiles.p, uint32_t(tiles.size()), dxh.p, dscale.p, dbias.p, dfetched.p);
  // Expert 2's read failed and expert 3's entry names expert 1: their tiles NaN, the others as before.
  table[selection[1]].failed = 1;
  table[selection[2]].expert = 1;
  DeviceArray<stream::GpuFetchedExpert> dbad(table);
  fetched.ex = dbad.p;
  gpu_expert_products(nullptr, fetched, dtiles.p, uint32_t(tiles.size()), dxh.p, dscale.p, dbias.p, dfailed.p);
  REQUIRE(cudaGetLastError() == cudaSuccess);

  const auto y = dy.get(poison.size()), yf = dfetched.get(poison.size()), ybad = dfailed.get(poison.size());
  double worst = 0;  // the largest error as a fraction of its bound
  uint32_t row0 = 0;
  for (uint32_t e = 0; e < kExperts; ++e) {
    for (uint32_t k = row0; k < row0 + counts[e]; ++k)
      for (uint32_t r = 0; r < rows; ++r) {
        const uint8_t* row = w.data() + e * mat + r * row_bytes;
        const double want = exact_dot(t, row, cols, &x[size_t(k) * cols]) + bias[size_t(e) * rows + r];
        const double bound = gemm_error_bound(t, row, cols, &x[size_t(k) * cols]);
        const float got = y[size_t(k) * rows + r];
        CAPTURE(e, k, r, got, want, bound);
        REQUIRE(std::isfinite(got));
        REQUIRE(std::fabs(got - want) <= bound);
        worst = std::max(worst, std::fabs(got - want) / bound);
        const bool bad = e == 2 || e == 3;
        REQUIRE((bad ? std::isnan(ybad[size_t(k) * rows + r]) : ybad[size_t(k) * rows + r] == got));
      }
    row0 += counts[e];
  }
  INFO("largest error: " << worst << " of the bound");
  CHECK(worst > 0);
  CHECK(std::memcmp(y.data(), yf.data(), y.size() * sizeof(float)) == 0);
}

// The generated MoE model (3 layers, 8 experts, top 2) with a 100-token prompt, its experts all in VRAM
// or fetched from the emulated drive (VRAM + RAM + NVMe layers, an expert cache of half the experts):
// the prompt's logits to the bit and the greedy steps after them; the fetched prompt read its experts
// in groups of K (a few fetches per layer, where token by token made one per token); the tensor cores
// ran (GPUNVME_MOE_MMA=0 gives other bits); the CPU executor's logits within 1 % of their largest
// magnitude (test_llm_gemm.cpp's allowance for the dense prompt product).
TEST_CASE("grouped expert products in the engine: a 100-token MoE prompt, fetched = resident to the bit", "[gpu][llm][gemm]") {
  REQUIRE_GPU();
  gpunvme::test::DeployedModel d(8, "moe-mma-test");
  gpunvme::test::Opened o(d.device);
  const uint32_t n_prompt = 100, n_ctx = 128, steps = 4;
  const std::vector<uint32_t> prompt = llm::test::random_tokens(n_prompt, o.m.config.n_vocab, 9);
  uint64_t widest = 0, all_experts = 0;
  for (const llm::LayerBytes& b : llm::layer_bytes(o.m)) widest = std::max(widest, b.dense), all_experts += b.experts;
  llm::GpuExecOptions all, fetched;
  all.resident_layers = o.m.config.n_layer;
  fetched.vram_budget = fetched.ram_budget = widest;
  *fetched.vram_budget += llm::kv_cache_bytes(o.m.config, llm::KvCacheShape{}, n_ctx);  // one layer beside the KV cache
  fetched.expert_cache_bytes = all_experts / 2;
  all.max_batch = fetched.max_batch = n_prompt;
  struct Run {
    std::vector<float> logits;  // the prompt's last token's
    std::vector<uint32_t> tokens;
    llm::ExecStats after_prompt;
  };
  auto run = [&](llm::Executor& ex) {
    Run r;
    const std::span<const float> l = ex.pass(prompt, 0, false);
    r.logits.assign(l.begin(), l.end());
    r.after_prompt = ex.stats();
    uint32_t tok = uint32_t(std::max_element(l.begin(), l.end()) - l.begin());
    for (uint32_t i = 0; i < steps; ++i) {
      r.tokens.push_back(tok);
      const std::span<const float> s = ex.step(tok, n_prompt + i);
      tok = uint32_t(std::max_element(s.begin(), s.end()) - s.begin());
    }
    ex.finish();
    return r;
  };
  const Run resident = run(*llm::make_gpu_executor(*o.ctrl, o.m, n_ctx, all));
  const Run streamed = run(*llm::make_gpu_executor(*o.ctrl, o.m, n_ctx, fetched));
  REQUIRE(streamed.after_prompt.has_experts);
  const uint64_t fetches = streamed.after_prompt.experts.tokens;
  CAPTURE(fetches);
  CHECK(fetches > 0);
  CHECK(fetches <= uint64_t(o.m.config.n_layer) * 4);  // at most 8 experts / 2 per fetch at each layer
  REQUIRE(llm::test::same_bits(resident.logits, streamed.logits));
  CHECK(resident.tokens == streamed.tokens);
  {
    struct Unset {
      ~Unset() { ::unsetenv("GPUNVME_MOE_MMA"); }
    } unset;
    ::setenv("GPUNVME_MOE_MMA", "0", 1);  // read when the executor's forward pass is made
    const Run fp32 = run(*llm::make_gpu_executor(*o.ctrl, o.m, n_ctx, all));
    CHECK(!llm::test::same_bits(resident.logits, fp32.logits));
  }
  const Run cpu = run(*llm::make_cpu_executor(o.m, n_ctx));
  float diff = 0, mag = 0;
  for (size_t j = 0; j < cpu.logits.size(); ++j) {
    diff = std::max(diff, std::fabs(resident.logits[j] - cpu.logits[j]));
    mag = std::max(mag, std::fabs(cpu.logits[j]));
  }
  CAPTURE(diff, mag);
  CHECK(diff <= 0.01f * mag);
}
