// llm_pass_compute: what the engine's matrix kernels cost per pass over a dense model's layers, for passes
// of n tokens (issue #17: the extra compute of a speculative pass of k + 1 tokens, and of a prompt batch),
// with nothing read from a drive: each of a layer's seven matrices (q, k, v, o, gate, up, down) at the
// shape's full size in GPU memory, random but valid blocks (the model generator's), timed with CUDA
// events, times the layer count. Every (matrix, n) is first checked: the batched kernel's rows for the
// first and last token must have the bits of the matrix-vector kernel's (a batched pass gives
// token-by-token logits); a mismatch prints an error and no number. Attention, norms and the head are not
// included (they are small next to the matrices up to a few thousand positions); the engine's own pass
// times (scripts/llm/bench_passes.py) include everything. With --gemm, prompt passes (512 and 2048 tokens by
// default): the FP32 batched kernel against the tensor-core product (compute/gpu_gemm.h), each result
// checked against the other within the 16-bit rounding bound first.
#include <cuda_runtime.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "device/cuda_check.h"
#include "examples/llm/compute/block.h"
#include "examples/llm/compute/gpu_forward.h"
#include "examples/llm/compute/gpu_gemm.h"
#include "examples/llm/compute/gpu_matmul.h"
#include "examples/llm/compute/q8_scope.h"
#include "examples/llm/quant/weight_types.h"
#include "examples/llm/model/config.h"
#include "examples/llm/model/weights.h"
#include "examples/llm/tools/generated_model.h"
#include "examples/llm/tools/model_shapes.h"
#include "host/text/escape.h"
#include "host/text/numbers.h"
#include "runtime/cli/args.h"
#include "runtime/gguf/ggml_types.h"
#include "runtime/gguf/gguf_file.h"
#include "runtime/guard/output_file.h"

using namespace gpunvme;
using namespace gpunvme::llm;

namespace {

const cli::Help kHelp = {
    "usage: llm_pass_compute [--shape NAME] [--type q6_k|q4_k|q8_0] [--tokens 1,2,3,...] [--reps N] [--gemm] [--json-out FILE]\n"
    "       llm_pass_compute --decode [--types LIST] [--matrices LIST] [--reps N] [--json-out FILE]\n"
    "       llm_pass_compute --decode-pass [--shape NAME] [--type T] [--layers N] [--q8] [--reps N] [--json-out FILE]\n"
    "       llm_pass_compute --attention [--shape NAME] [--positions LIST] [--tokens LIST] [--reps N]\n"
    "\n"
    "Times the engine's GPU matrix kernels over one pass of a dense model shape: the seven matrices of a\n"
    "layer at full size in GPU memory, times the layers, for passes of each token count. Every result is\n"
    "checked (bit for bit, or within the 16-bit bound for --gemm) before any number; a mismatch is an error.\n"
    "\n"
    "  --shape NAME    a dense shape of llm_make_model (default llama3-70b)\n"
    "  --type T        q6_k (default), q4_k or q8_0\n"
    "  --tokens LIST   token counts per pass (default 1,2,3,5,9,17,32,128,512,2048)\n"
    "  --reps N        timed repetitions per matrix and token count, median kept (default 3)\n"
    "  --gemm          prompt passes: the FP32 batched kernel against the tensor-core product, TFLOP/s\n"
    "  --decode        single-token products: GB/s of weights per type and matrix beside a device copy\n"
    "  --types LIST    --decode: weight types (default q4_k,q5_k,q6_k,q8_0,q4_0,mxfp4,f16)\n"
    "  --matrices LIST --decode: ROWSxCOLS shapes (default Llama-3-70B's and -8B's)\n"
    "  --decode-pass   one token's pass over the shape's (first N --layers) layers: ms per token, by part\n"
    "  --q8            --decode-pass: the FP32 products beside the 8-bit x ones (the default; gpu_matvec_q8)\n"
    "  --attention     a layer's attention alone at --positions (default 64,2048), --tokens 1,4,32\n"
    "  --json-out F    also write the rows as one JSON object\n",
    "\n"
    "Default mode: seconds per pass, the extra over one token, and TFLOP/s (2 flops per weight and token)\n"
    "for each token count (speculative passes of k + 1 tokens and prompt batches). Before timing, the\n"
    "batched kernel's first and last token are checked against the matrix-vector kernel, bit for bit. Last,\n"
    "the single-token kernel (x staged in shared memory) is timed against the warp-per-row kernel it\n"
    "replaced, on the same matrices, after the same check: GB/s of weights for both and the ratio.\n"
    "\n"
    "--gemm: default tokens 512,2048 (each above 32); the FP32 batched kernel against the tensor-core\n"
    "product (gpu_gemm.h), TFLOP/s of each and the ratio; before timing, sampled rows of the first and last\n"
    "token must agree within gemm_error_bound.\n"
    "\n"
    "--decode (issue 36): for each weight type and matrix, the GB/s of weight bytes the matrix-vector kernel\n"
    "reads, beside a device-to-device copy timed in the same run (its read and write bytes counted: the\n"
    "card's memory bandwidth in practice) and the percentage of it; each product first checked bit for bit\n"
    "against the warp-per-row kernel. Each launch reads another copy of the matrix (256 MiB of copies at\n"
    "least), so none is served from the L2 cache; the launches go through a CUDA graph (the GPU's time, not\n"
    "the host's). Default matrices: 8192x8192,28672x8192,8192x28672,4096x4096,14336x4096,4096x14336.\n"
    "\n"
    "--decode-pass (issue 36): a generated model of --shape and --type, every weight in GPU memory, one\n"
    "token at position 64 (after 64 passes that fill the cache): ms per token of its layers (not the\n"
    "embedding nor the head) launched by the host as the engine does, the same kernels replayed from a CUDA\n"
    "graph (no launch gaps), and graphs of the matrix products alone and of the other kernels alone; for\n"
    "the decode fusions (norm+Q/K/V, Q/K norm+RoPE+KV store+attention, O(+post-norm)+add, norm+gate/up+GLU,\n"
    "down(+post-norm)+add) and without them, after checking both give the same hidden state, bit\n"
    "for bit. Kernels: the graph's nodes per token. A MoE shape (its experts in GPU memory, token by token)\n"
    "adds its layer by part: a graph of each part's kernels alone, us per layer. --q8: the table again with\n"
    "the one-token products on 8-bit activations (GPUNVME_MATVEC_Q8's path, gpu_matmul.h), and the largest\n"
    "difference of its hidden state from the FP32 kernels' (absolute, and relative to the largest value).\n"
    "\n"
    "--attention (issue 36): one layer's attention of the small passes (GpuForward::attend, and for one\n"
    "token the fused rope_store_attend) over a cache of random halves, for passes of each --tokens count\n"
    "whose first token is at each of --positions: us per layer from a CUDA graph, and the GB/s of K and V\n"
    "the pass's tokens see.\n"};

struct Matrix {
  std::string name;
  uint32_t rows = 0, cols = 0;
  uint8_t* w = nullptr;
  uint64_t row_bytes = 0;
};

struct DeviceBuffer {
  void* p = nullptr;
  explicit DeviceBuffer(uint64_t bytes) { device::check_cuda(cudaMalloc(&p, bytes), "cudaMalloc"); }
  ~DeviceBuffer() { cudaFree(p); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  template <class T>
  T* as() const { return static_cast<T*>(p); }
};

// A rows x cols matrix of the generator's blocks: 256 distinct rows, repeated (the kernels' time does not
// depend on the values; the check compares two kernels on the same bytes).
std::vector<uint8_t> make_rows(uint32_t type, uint32_t cols, uint32_t rows, uint64_t seed) {
  const auto info = gguf::ggml_type_info(type);
  const uint64_t blocks = cols / info->block_size, row_bytes = blocks * info->type_size;
  const uint32_t distinct = std::min<uint32_t>(rows, 256);
  std::vector<uint8_t> out(row_bytes * rows);
  for (uint32_t r = 0; r < distinct; ++r)
    for (uint64_t b = 0; b < blocks; ++b)
      gen::make_block(type, gen::Fill::kWeight, cols, seed * 1000003 + r * blocks + b, &out[r * row_bytes + b * info->type_size]);
  for (uint32_t r = distinct; r < rows; ++r) std::memcpy(&out[r * row_bytes], &out[(r % distinct) * row_bytes], row_bytes);
  return out;
}

GpuMatrix view(const Matrix& m, uint32_t type) {
  return {GgmlType(type), m.w, m.row_bytes, m.rows, m.cols, nullptr, 0};
}

// The batched kernel's rows for tokens 0 and n-1 against the matrix-vector kernel's, bit for bit.
bool same_bits(const Matrix& m, uint32_t type, const float* x, uint32_t n, float* y, float* ref) {
  gpu_matmul(nullptr, view(m, type), x, n, nullptr, y);
  for (uint32_t t : {0u, n - 1}) {
    gpu_matmul(nullptr, view(m, type), x + uint64_t(t) * m.cols, 1, nullptr, ref);
    std::vector<float> a(m.rows), b(m.rows);
    device::check_cuda(cudaMemcpy(a.data(), y + uint64_t(t) * m.rows, m.rows * 4, cudaMemcpyDeviceToHost), "copy");
    device::check_cuda(cudaMemcpy(b.data(), ref, m.rows * 4, cudaMemcpyDeviceToHost), "copy");
    if (std::memcmp(a.data(), b.data(), a.size() * 4) != 0) return false;
  }
  return true;
}

template <class Launch>
double median_seconds(uint32_t reps, Launch launch) {
  cudaEvent_t a, b;
  device::check_cuda(cudaEventCreate(&a), "event");
  device::check_cuda(cudaEventCreate(&b), "event");
  std::vector<double> t;
  for (uint32_t r = 0; r < reps; ++r) {
    device::check_cuda(cudaEventRecord(a), "event");
    launch();
    device::check_cuda(cudaEventRecord(b), "event");
    device::check_cuda(cudaEventSynchronize(b), "kernel");
    float ms = 0;
    device::check_cuda(cudaEventElapsedTime(&ms, a, b), "event time");
    t.push_back(ms / 1e3);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// The staged matrix-vector kernel (gpu_matmul for one token) against the warp-per-row kernel it replaced,
// bit for bit.
bool same_bits_unstaged(const Matrix& m, uint32_t type, const float* x, float* y, float* ref) {
  gpu_matmul(nullptr, view(m, type), x, 1, nullptr, y);
  gpu_matvec_unstaged(nullptr, view(m, type), x, nullptr, ref);
  std::vector<float> a(m.rows), b(m.rows);
  device::check_cuda(cudaMemcpy(a.data(), y, m.rows * 4, cudaMemcpyDeviceToHost), "copy");
  device::check_cuda(cudaMemcpy(b.data(), ref, m.rows * 4, cudaMemcpyDeviceToHost), "copy");
  return std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

struct Options {
  std::string shape = "llama3-70b";
  uint32_t type = uint32_t(GgmlType::Q6_K);
  std::vector<uint32_t> tokens{1, 2, 3, 5, 9, 17, 32, 128, 512, 2048};
  uint32_t reps = 3;
  bool gemm = false;
  bool decode = false;
  bool decode_pass = false;
  bool q8 = false;  // --q8: --decode-pass with the FP32 and the 8-bit-activation products
  bool attention = false;
  uint32_t layers = 0;  // --layers: the shape's first layers only (0: all)
  std::vector<uint32_t> positions{64, 2048};
  std::vector<GgmlType> types{GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::Q8_0,
                              GgmlType::Q4_0, GgmlType::MXFP4, GgmlType::F16};
  std::vector<std::pair<uint32_t, uint32_t>> matrices{{8192, 8192}, {28672, 8192}, {8192, 28672},
                                                      {4096, 4096}, {14336, 4096}, {4096, 14336}};
  std::string json_out;
};

// The comma-separated items of a list option.
std::vector<std::string> split_list(const std::string& list) {
  std::vector<std::string> items;
  for (size_t at = 0; at <= list.size();) {
    const size_t end = std::min(list.find(',', at), list.size());
    items.push_back(list.substr(at, end - at));
    at = end + 1;
  }
  return items;
}

// A weight type the engine computes, by ggml's name in any case ("q6_k", "MXFP4").
GgmlType computed_type_named(const std::string& name) {
  std::string upper = name;
  for (char& c : upper) c = char(std::toupper(static_cast<unsigned char>(c)));
  for (GgmlType t : kComputedTypes)
    if (gguf::ggml_type_name(uint32_t(t)) == upper) return t;
  throw cli::UsageError("--types: '" + text::printable(name) + "' is not a type the engine computes (" + computed_type_names() + ")");
}

Options parse(int argc, char** argv) {
  const cli::Args args(argc, argv, 1, {"shape", "type", "tokens", "reps", "json-out", "types", "matrices", "positions", "layers"},
                        {"gemm", "decode", "decode-pass", "attention", "q8"});
  if (args.help_asked()) std::exit(args.print_help("llm_pass_compute", kHelp));
  if (!args.positional().empty()) throw cli::UsageError("unexpected argument '" + args.positional()[0] + "'");
  Options o;
  o.shape = args.get("shape", o.shape);
  const std::string type = args.get("type", "q6_k");
  if (type != "q6_k" && type != "q4_k" && type != "q8_0")
    throw cli::UsageError("--type must be q6_k, q4_k or q8_0, not '" + text::printable(type) + "'");
  o.type = uint32_t(type == "q6_k" ? GgmlType::Q6_K : type == "q4_k" ? GgmlType::Q4_K : GgmlType::Q8_0);
  o.gemm = args.has("gemm");
  o.decode = args.has("decode");
  o.decode_pass = args.has("decode-pass");
  o.attention = args.has("attention");
  o.q8 = args.has("q8");
  if (o.q8 && !o.decode_pass) throw cli::UsageError("--q8 goes with --decode-pass");
  if (int(o.gemm) + int(o.decode) + int(o.decode_pass) + int(o.attention) > 1)
    throw cli::UsageError("--gemm, --decode, --decode-pass and --attention are four modes: give one");
  if (args.has("positions") && !o.attention) throw cli::UsageError("--positions goes with --attention");
  if (args.has("positions")) {
    o.positions.clear();
    for (const std::string& p : split_list(args.get("positions"))) {
      const uint64_t v = text::parse_u64("--positions", p);
      if (v > (1u << 20)) throw cli::UsageError("--positions: each up to 2^20");
      o.positions.push_back(uint32_t(v));
    }
  }
  if (o.attention && !args.has("tokens")) o.tokens = {1, 4, 32};
  if (o.decode_pass && args.has("tokens")) throw cli::UsageError("--decode-pass times one token a pass: no --tokens");
  if (!o.decode && (args.has("types") || args.has("matrices"))) throw cli::UsageError("--types and --matrices go with --decode");
  if (args.has("types")) {
    o.types.clear();
    for (const std::string& t : split_list(args.get("types"))) o.types.push_back(computed_type_named(t));
  }
  if (args.has("matrices")) {
    o.matrices.clear();
    for (const std::string& m : split_list(args.get("matrices"))) {
      const size_t x = m.find('x');
      if (x == std::string::npos) throw cli::UsageError("--matrices: '" + text::printable(m) + "' is not ROWSxCOLS (e.g. 8192x28672)");
      const uint64_t rows = text::parse_u64("--matrices rows", m.substr(0, x)), cols = text::parse_u64("--matrices cols", m.substr(x + 1));
      if (rows == 0 || rows > (1u << 20) || cols == 0 || cols % 256 != 0 || cols > (1u << 18))
        throw cli::UsageError("--matrices: '" + text::printable(m) + "': rows 1..2^20 and columns a multiple of 256 up to 2^18");
      o.matrices.emplace_back(uint32_t(rows), uint32_t(cols));
    }
  }
  if (o.gemm) o.tokens = {512, 2048};
  if (args.has("tokens")) {
    o.tokens.clear();
    std::string list = args.get("tokens");
    for (size_t at = 0; at <= list.size();) {
      const size_t end = std::min(list.find(',', at), list.size());
      const uint64_t n = text::parse_u64("--tokens", list.substr(at, end - at));
      if (n == 0 || n > 8192) throw cli::UsageError("--tokens: each count must be 1..8192");
      o.tokens.push_back(uint32_t(n));
      at = end + 1;
    }
  }
  if (o.attention)
    for (uint32_t n : o.tokens)
      if (n > kSmallPassTokens) throw cli::UsageError("--attention times small passes: --tokens up to " + std::to_string(kSmallPassTokens));
  if (o.gemm)
    for (uint32_t n : o.tokens)
      if (n <= kSmallPassTokens)
        throw cli::UsageError("--gemm times prompt passes: each --tokens count must be above " + std::to_string(kSmallPassTokens) +
                              " (smaller passes keep the matrix-vector kernels)");
  o.layers = args.get_u32("layers", 0);
  if (args.has("layers") && (!o.decode_pass || o.layers == 0)) throw cli::UsageError("--layers N (N >= 1) goes with --decode-pass");
  o.reps = args.get_u32("reps", o.reps);
  if (o.reps == 0) throw cli::UsageError("--reps must be at least 1");
  o.json_out = args.get("json-out");
  return o;
}

// --gemm: for each prompt pass of n tokens, the seven matrices through the FP32 batched kernel and through
// the tensor-core product. Each (matrix, n) is checked first: for tokens 0 and n - 1 and every 61st row,
// the two within gemm_error_bound of each other (computed on the host from the matrix's bytes); a miss
// prints an error and no number. Returns the exit status.
int time_prompt_passes(const Options& o, const gen::Shape& s, const std::vector<Matrix>& ms,
                       const std::vector<std::vector<uint8_t>>& bytes, const std::vector<float>& xh, const float* x,
                       uint32_t widest, uint32_t tallest, uint64_t weights, FILE* json) {
  const uint32_t n_max = *std::max_element(o.tokens.begin(), o.tokens.end());
  DeviceBuffer y(uint64_t(n_max) * tallest * 4), ref(uint64_t(n_max) * tallest * 4);
  TensorGemm gemm(n_max, widest);
  const ScopedQ8Types fp32(0);  // the FP32 batched kernel (8-bit x off)
  auto tensor = [&](const Matrix& m, uint32_t n, float* out) {
    gpu_matmul_pass(nullptr, &gemm, view(m, o.type), x, n, nullptr, out);
  };
  std::printf("%s, %s matrices, %u layers: prompt passes, FP32 batched kernel vs tensor cores (%s, cuBLASLt)\n", s.name.c_str(),
              gguf::ggml_type_name(o.type).c_str(), s.layers, gemm_elem_for(GgmlType(o.type)) == GemmElem::kF16 ? "FP16" : "BF16");
  std::printf("%7s | %12s | %12s | %9s | %9s | %7s | %s\n", "tokens", "FP32 s/pass", "tensor s/pass", "FP32 TF/s", "tensor TF/s",
              "ratio", "worst error / bound");
  std::string rows_json;
  for (uint32_t n : o.tokens) {
    double batched = 0, tc = 0, worst = 0;
    for (size_t i = 0; i < ms.size(); ++i) {
      const Matrix& m = ms[i];
      tensor(m, n, y.as<float>());
      gpu_matmul_batched(nullptr, view(m, o.type), x, n, nullptr, ref.as<float>());
      std::vector<float> a(uint64_t(n) * m.rows), b(a.size());
      device::check_cuda(cudaMemcpy(a.data(), y.p, a.size() * 4, cudaMemcpyDeviceToHost), "copy");
      device::check_cuda(cudaMemcpy(b.data(), ref.p, b.size() * 4, cudaMemcpyDeviceToHost), "copy");
      for (uint32_t t : {0u, n - 1})
        for (uint32_t r = 0; r < m.rows; r += 61) {
          const double bound = gemm_error_bound(GgmlType(o.type), &bytes[i][uint64_t(r) * m.row_bytes], m.cols, &xh[uint64_t(t) * m.cols]);
          const double err = std::fabs(double(a[uint64_t(t) * m.rows + r]) - b[uint64_t(t) * m.rows + r]);
          if (!(err <= bound)) {
            std::fprintf(stderr, "llm_pass_compute: ERROR: %s, %u tokens, token %u row %u: tensor cores %g, FP32 kernel %g, "
                         "beyond the 16-bit rounding bound %g: no figure\n", m.name.c_str(), n, t, r,
                         double(a[uint64_t(t) * m.rows + r]), double(b[uint64_t(t) * m.rows + r]), bound);
            return 1;
          }
          worst = std::max(worst, err / bound);
        }
      batched += median_seconds(o.reps, [&] { gpu_matmul_batched(nullptr, view(m, o.type), x, n, nullptr, ref.as<float>()); });
      tc += median_seconds(o.reps, [&] { tensor(m, n, y.as<float>()); });
    }
    const double flop = 2.0 * weights * s.layers * n, pb = batched * s.layers, pt = tc * s.layers;
    std::printf("%7u | %10.3f s | %10.3f s | %9.1f | %9.1f | %6.1fx | %.3f\n", n, pb, pt, flop / pb / 1e12, flop / pt / 1e12,
                pb / pt, worst);
    char row[320];
    std::snprintf(row, sizeof row,
                  "{\"tokens\":%u,\"fp32_seconds_per_pass\":%.6f,\"tensor_seconds_per_pass\":%.6f,\"fp32_tflops\":%.3f,"
                  "\"tensor_tflops\":%.3f,\"worst_error_of_bound\":%.4f,\"checked\":true}",
                  n, pb, pt, flop / pb / 1e12, flop / pt / 1e12, worst);
    rows_json += (rows_json.empty() ? "" : ",") + std::string(row);
  }
  const std::string line = "{\"tool\":\"llm_pass_compute\",\"mode\":\"gemm\",\"shape\":" + text::json_string(s.name) +
                           ",\"type\":" + text::json_string(gguf::ggml_type_name(o.type)) + ",\"layers\":" + std::to_string(s.layers) +
                           ",\"weights_per_layer\":" + std::to_string(weights) + ",\"rows\":[" + rows_json + "]}";
  std::printf("%s\n", line.c_str());
  if (json) std::fprintf(json, "%s\n", line.c_str());
  return 0;
}

// Weights of any computed type for timing: the generator's blocks where it makes the type, else random
// bytes with every half a small finite value (scales, F16 weights): the kernels' time does not depend on
// the values, and the bit check compares two kernels on the same bytes.
std::vector<uint8_t> timing_rows(GgmlType t, uint32_t cols, uint32_t rows, uint64_t seed) {
  switch (t) {
    case GgmlType::Q4_K: case GgmlType::Q6_K: case GgmlType::Q5_0: case GgmlType::Q8_0: case GgmlType::MXFP4:
    case GgmlType::F32:
      return make_rows(uint32_t(t), cols, rows, seed);
    default: break;
  }
  const auto info = gguf::ggml_type_info(uint32_t(t));
  const uint64_t row_bytes = uint64_t(cols) / info->block_size * info->type_size;
  std::vector<uint8_t> out(row_bytes * rows);
  std::mt19937_64 rng(seed);
  for (auto& b : out) b = uint8_t(rng());
  auto small_half = [&](uint64_t at) {  // |v| < 2: exponent field at most 15, sign and mantissa random
    const uint16_t h = uint16_t((rng() & 0x83FFu) | ((rng() % 16) << 10));
    std::memcpy(&out[at], &h, 2);
  };
  const uint64_t blocks = out.size() / info->type_size;
  for (uint64_t b = 0; b < blocks; ++b) {
    const uint64_t at = b * info->type_size;
    if (t == GgmlType::F16 || t == GgmlType::Q4_0 || t == GgmlType::Q5_K) small_half(at);  // the weight; d
    if (t == GgmlType::Q5_K) small_half(at + 2);                                                // dmin
  }
  return out;
}

// Kernel launches captured once into a CUDA graph on a stream of their own, so that their time is the
// GPU's, not the host's cost per launch (a few microseconds, as long as a small matrix's product). The
// stream is a blocking one: events on the default stream order it.
class CapturedLaunches {
 public:
  // `on`: capture on (and launch on) that blocking stream, which the caller keeps; else one of its own.
  template <class Enqueue>
  explicit CapturedLaunches(Enqueue enqueue, cudaStream_t on = nullptr) : own_(on == nullptr) {
    if (own_) device::check_cuda(cudaStreamCreate(&stream_), "cudaStreamCreate");
    else stream_ = on;
    device::check_cuda(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
    enqueue(reinterpret_cast<gpu_stream_t>(stream_));
    cudaGraph_t g = nullptr;
    device::check_cuda(cudaStreamEndCapture(stream_, &g), "cudaStreamEndCapture");
    cudaGraphGetNodes(g, nullptr, &nodes_);
    const cudaError_t made = cudaGraphInstantiate(&exec_, g, 0);
    cudaGraphDestroy(g);
    device::check_cuda(made, "cudaGraphInstantiate");
  }
  ~CapturedLaunches() {
    if (exec_) cudaGraphExecDestroy(exec_);
    if (own_) cudaStreamDestroy(stream_);
  }
  CapturedLaunches(const CapturedLaunches&) = delete;
  CapturedLaunches& operator=(const CapturedLaunches&) = delete;
  void launch() const { device::check_cuda(cudaGraphLaunch(exec_, stream_), "cudaGraphLaunch"); }
  size_t nodes() const { return nodes_; }  // kernels and copies captured

 private:
  bool own_ = true;
  cudaStream_t stream_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
  size_t nodes_ = 0;
};

// --decode: GB/s of weight bytes of the single-token kernel (gpu_matmul, n = 1) per type and matrix, beside
// a device-to-device copy timed in the same run (read + write bytes). Returns the exit status.
int time_decode(const Options& o, FILE* json) {
  const ScopedQ8Types fp32(0);  // the FP32 kernel (8-bit x off), checked against the warp-per-row kernel
  // The copy: 1 GiB to another GiB, median of the repetitions.
  const uint64_t copy_bytes = 1ull << 30;
  double copy_gbps = 0;
  {
    DeviceBuffer a(copy_bytes), b(copy_bytes);
    device::check_cuda(cudaMemset(a.p, 1, copy_bytes), "cudaMemset");
    const double t = median_seconds(std::max(o.reps, 5u), [&] {
      device::check_cuda(cudaMemcpyAsync(b.p, a.p, copy_bytes, cudaMemcpyDeviceToDevice), "cudaMemcpyAsync");
    });
    copy_gbps = 2.0 * copy_bytes / t / 1e9;
  }
  std::printf("device-to-device copy: %.0f GB/s (read + write bytes)\n", copy_gbps);
  std::printf("%-6s | %13s | %10s | %9s | %8s | %s\n", "type", "rows x cols", "MB", "GB/s", "of copy", "us per product");
  std::string rows_json;
  uint32_t widest = 0;
  for (const auto& [rows, cols] : o.matrices) widest = std::max(widest, cols);
  std::vector<float> xh(widest);
  std::mt19937 rng(11);
  std::normal_distribution<float> d;
  for (float& v : xh) v = d(rng);
  DeviceBuffer x(uint64_t(widest) * 4);
  device::check_cuda(cudaMemcpy(x.p, xh.data(), xh.size() * 4, cudaMemcpyHostToDevice), "inputs");
  for (GgmlType t : o.types)
    for (const auto& [rows, cols] : o.matrices) {
      const auto info = gguf::ggml_type_info(uint32_t(t));
      if (cols % info->block_size != 0) continue;
      const auto bytes = timing_rows(t, cols, rows, uint64_t(t) * 7919 + rows + cols);
      const uint64_t mat = bytes.size();
      const uint32_t copies = uint32_t(std::clamp<uint64_t>(((256ull << 20) + mat - 1) / mat, 1, 64));
      DeviceBuffer w(mat * copies), y(uint64_t(rows) * 4), ref(uint64_t(rows) * 4);
      device::check_cuda(cudaMemcpy(w.p, bytes.data(), mat, cudaMemcpyHostToDevice), "weights");
      for (uint32_t c = 1; c < copies; ++c)
        device::check_cuda(cudaMemcpy(w.as<uint8_t>() + c * mat, w.p, mat, cudaMemcpyDeviceToDevice), "weights");
      Matrix m{"decode", rows, cols, w.as<uint8_t>(), mat / rows};
      if (!same_bits_unstaged(m, uint32_t(t), x.as<float>(), y.as<float>(), ref.as<float>())) {
        std::fprintf(stderr, "llm_pass_compute: ERROR: %s %ux%u: the matrix-vector kernel's bits differ from the warp-per-row kernel's: no figure\n",
                     gguf::ggml_type_name(uint32_t(t)).c_str(), rows, cols);
        return 1;
      }
      const CapturedLaunches graph([&](gpu_stream_t s) {
        for (uint32_t c = 0; c < copies; ++c) {
          Matrix mc = m;
          mc.w = w.as<uint8_t>() + c * mat;
          gpu_matmul(s, view(mc, uint32_t(t)), x.as<float>(), 1, nullptr, y.as<float>());
        }
      });
      const double secs = median_seconds(o.reps, [&] { graph.launch(); }) / copies;
      const double gbps = mat / secs / 1e9;
      const std::string shape = std::to_string(rows) + "x" + std::to_string(cols);
      std::printf("%-6s | %13s | %10.1f | %9.0f | %7.1f%% | %.1f\n", gguf::ggml_type_name(uint32_t(t)).c_str(), shape.c_str(),
                  mat / 1e6, gbps, 100 * gbps / copy_gbps, secs * 1e6);
      char row[288];
      std::snprintf(row, sizeof row,
                    "{\"type\":\"%s\",\"rows\":%u,\"cols\":%u,\"bytes\":%llu,\"seconds\":%.9f,\"weight_gb_per_s\":%.1f,"
                    "\"of_copy\":%.4f,\"bits_checked\":true}",
                    gguf::ggml_type_name(uint32_t(t)).c_str(), rows, cols, static_cast<unsigned long long>(mat), secs, gbps,
                    gbps / copy_gbps);
      rows_json += (rows_json.empty() ? "" : ",") + std::string(row);
    }
  const std::string line = "{\"tool\":\"llm_pass_compute\",\"mode\":\"decode\",\"copy_gb_per_s\":" +
                           std::to_string(copy_gbps) + ",\"rows\":[" + rows_json + "]}";
  std::printf("%s\n", line.c_str());
  if (json) std::fprintf(json, "%s\n", line.c_str());
  return 0;
}

// The block's operations forwarded to the GPU backend, or skipped: a pass of the matrix products alone
// (`others` off) or of the rest alone (`products` off) is captured to split a token's time; with `fused`
// off, the decode fusions (block.h's matmuls, norm_matmuls, gated_matmul, norm_gated_matmul, matmul_add,
// rope_store_kv, rope_store_attend, norm_add, matmul_norm_add, norm_moe_add) run as the operations they stand for. The norms, the GLU and the residual adds
// that run inside a fused product's kernel count as products; a post-norm with its add counts as the others.
class SplitBackend final : public Backend {
 public:
  explicit SplitBackend(GpuForward& g) : g_(g) {}
  bool products = true, others = true, fused = true;
  // A MoE shape's breakdown: the one-token operations of these classes only (kAll: every one).
  enum Op : uint32_t { kQkv = 1, kAttend = 2, kO = 4, kNorm = 8, kMoe = 16, kAdd = 32, kFusedMoe = 64, kAll = ~0u };
  uint32_t ops = kAll;

  void norm(Act in, const TensorRef& w, Act out) override { if (others && (ops & kNorm)) g_.norm(in, w, out); }
  void matmul(const TensorRef& w, const TensorRef& bias, Act in, Act out) override { if (products) g_.matmul(w, bias, in, out); }
  void head_norm_rope(Act qk, const TensorRef& norm, const RopeParams& rope) override { if (others) g_.head_norm_rope(qk, norm, rope); }
  void store_kv(uint32_t layer) override { if (others) g_.store_kv(layer); }
  void attend(const AttnParams& p) override { if (others) g_.attend(p); }
  void glu(Act gate, Act up, FfnAct act) override { if (others) g_.glu(gate, up, act); }
  void moe(const LayerWeights& l, Act in, Act out) override { if (ops & kMoe) g_.moe(l, in, out); }
  void add(Act x, Act y) override { if (others && (ops & kAdd)) g_.add(x, y); }
  void set_pass(std::span<const PassToken> tokens) override { g_.set_pass(tokens); }
  using Backend::set_pass;
  void write(Act a, std::span<const float> v) override { g_.write(a, v); }
  std::vector<float> read(Act a) override { return g_.read(a); }
  void matmuls(std::span<const Product> ps, Act in) override {
    if (!fused) return Backend::matmuls(ps, in);
    if (products) g_.matmuls(ps, in);
  }
  void norm_matmuls(const TensorRef& norm_w, Act in, std::span<const Product> ps) override {  // the norm: in the product
    if (!fused) return Backend::norm_matmuls(norm_w, in, ps);
    if (products && (ops & kQkv)) g_.norm_matmuls(norm_w, in, ps);
  }
  void gated_matmul(const TensorRef& gate, const TensorRef& up, Act in, FfnAct act) override {
    if (!fused) return Backend::gated_matmul(gate, up, in, act);
    if (products) g_.gated_matmul(gate, up, in, act);
  }
  void norm_gated_matmul(const TensorRef& norm_w, Act in, const TensorRef& gate, const TensorRef& up, FfnAct act) override {
    if (!fused) return Backend::norm_gated_matmul(norm_w, in, gate, up, act);
    if (products) g_.norm_gated_matmul(norm_w, in, gate, up, act);
  }
  void matmul_add(const TensorRef& w, const TensorRef& bias, Act in, Act x) override {  // the add is the product's epilogue
    if (!fused) return Backend::matmul_add(w, bias, in, x);
    if (products && (ops & kO)) g_.matmul_add(w, bias, in, x);
  }
  void rope_store_kv(const TensorRef& q_norm, const TensorRef& k_norm, const RopeParams& rope, uint32_t layer) override {
    if (!fused) return Backend::rope_store_kv(q_norm, k_norm, rope, layer);
    if (others) g_.rope_store_kv(q_norm, k_norm, rope, layer);
  }
  void norm_add(Act y, const TensorRef& w, Act x) override {
    if (!fused) return Backend::norm_add(y, w, x);
    if (others) g_.norm_add(y, w, x);
  }
  void rope_store_attend(const TensorRef& q_norm, const TensorRef& k_norm, const RopeParams& rope, const AttnParams& p) override {
    if (!fused) return Backend::rope_store_attend(q_norm, k_norm, rope, p);
    if (others && (ops & kAttend)) g_.rope_store_attend(q_norm, k_norm, rope, p);
  }
  void norm_moe_add(const TensorRef& norm_w, const LayerWeights& l, Act x) override {  // the fused launches count as products
    if (!fused || !(ops & kFusedMoe)) return Backend::norm_moe_add(norm_w, l, x);  // norm, moe and add as selected
    if (products) g_.norm_moe_add(norm_w, l, x);
  }
  void matmul_norm_add(const TensorRef& w, const TensorRef& bias, Act in, const TensorRef& norm_w, Act x) override {
    if (!fused) return Backend::matmul_norm_add(w, bias, in, norm_w, x);  // the norm and the add: the product's epilogue
    if (products) g_.matmul_norm_add(w, bias, in, norm_w, x);
  }

 private:
  GpuForward& g_;
};

// A MoE shape's one-token layer by part: for each, a graph of the pass with that part's kernels alone
// (the others skipped; their buffers keep the last pass's values), ms per token and kernels. Returns the
// rows as JSON.
template <class Pass>
std::string time_moe_parts(const Options& o, const ModelConfig& c, GpuForward& g, SplitBackend& b, Pass pass, cudaStream_t st) {
  using B = SplitBackend;
  struct Part {
    const char* name;
    uint32_t ops, moe;
  };
  const Part parts[] = {{"norm+QKV", B::kQkv, 0},
                        {"QK norm+RoPE+KV+attention", B::kAttend, 0},
                        {"O+add", B::kO, 0},
                        {"ffn norm", B::kNorm, 0},
                        {"router product", B::kMoe, GpuForward::kMoeRouter},
                        {"top-k routing", B::kMoe, GpuForward::kMoeRoute},
                        {"experts' gate+up", B::kMoe, GpuForward::kMoeGateUp},
                        {"experts' GLU", B::kMoe, GpuForward::kMoeGlu},
                        {"experts' down", B::kMoe, GpuForward::kMoeDown},
                        {"weighted sum", B::kMoe, GpuForward::kMoeSum},
                        {"MoE copy", B::kMoe, GpuForward::kMoeCopy},
                        {"residual add", B::kAdd, 0},
                        {"fused norm+MoE+add", B::kFusedMoe, 0},
                        {"all", B::kAll, ~0u}};
  constexpr uint32_t kTokens = 16;
  b.fused = true;
  std::printf("%s one-token layer by part (a graph of that part alone): us per layer\n", c.arch_name.c_str());
  std::string json;
  for (const Part& p : parts) {
    b.ops = p.ops;
    g.time_moe_parts(p.moe ? p.moe : ~0u);
    const CapturedLaunches gr([&](gpu_stream_t) { pass(); }, st);
    const size_t nodes = gr.nodes();
    const double s = median_seconds(o.reps, [&] {
      for (uint32_t t = 0; t < kTokens; ++t) gr.launch();
    }) / kTokens;
    b.ops = B::kAll;
    g.time_moe_parts(~0u);
    const double us = s * 1e6 / c.n_layer;
    std::printf("  %-28s | %8.2f us | %5.2f kernels\n", p.name, us, double(nodes) / c.n_layer);
    char row[200];
    std::snprintf(row, sizeof row, "{\"part\":\"%s\",\"us_per_layer\":%.3f,\"kernels_per_layer\":%.2f}", p.name, us,
                  double(nodes) / c.n_layer);
    json += (json.empty() ? "" : ",") + std::string(row);
  }
  return json;
}

// --decode-pass: see the help. Returns the exit status.
int time_decode_pass(const Options& o, const gen::Shape& s, FILE* json) {
  const std::string name = s.name + "-" + gguf::ggml_type_name(o.type);
  gen::GeneratedModel gm(gen::model_layout(s, o.type, name), 1);
  const gguf::GgufFile f = gguf::GgufFile::read(gm);
  const ModelConfig c = read_config(f);
  const ModelWeights w = map_weights(f, c);
  DeviceBuffer bytes(gm.size());
  {
    std::vector<uint8_t> chunk(64ull << 20);
    for (uint64_t at = 0; at < gm.size(); at += chunk.size()) {
      const size_t n = size_t(std::min<uint64_t>(chunk.size(), gm.size() - at));
      if (gm.read(at, chunk.data(), n) != n) throw std::runtime_error("the generated model returned fewer bytes than asked");
      device::check_cuda(cudaMemcpy(bytes.as<uint8_t>() + at, chunk.data(), n, cudaMemcpyHostToDevice), "weights");
    }
  }
  const uint8_t* base = bytes.as<uint8_t>();
  const PackedRanges whole = PackedRanges::span(0, gm.size());
  const WeightView view{base, &whole};
  cudaStream_t st = nullptr;  // blocking: median_seconds's events on the default stream order it
  device::check_cuda(cudaStreamCreate(&st), "cudaStreamCreate");
  struct StreamGuard {
    cudaStream_t s;
    ~StreamGuard() { cudaStreamDestroy(s); }
  } guard{st};
  constexpr uint32_t kPos = 64, kTokens = 16;  // the position timed; passes per timed repetition
  GpuForward g(c, w, 2 * kPos, GlobalWeights{view.at(w.token_embd), view.at(w.output_norm), view.at(w.output)},
               reinterpret_cast<gpu_stream_t>(st), 1, true);
  SplitBackend b(g);
  auto pass = [&] {
    for (const LayerWeights& l : w.layers) {
      g.use_layer(view);
      run_block(c, l, b);
    }
  };
  std::vector<float> x0(c.n_embd);
  std::mt19937 rng(3);
  std::normal_distribution<float> d;
  for (float& v : x0) v = d(rng);
  for (uint32_t p = 0; p < kPos; ++p) {  // the cache's first positions (and every kernel's first launch)
    b.set_pass(p, 1);
    b.write(Act::kX, x0);
    pass();
  }
  b.set_pass(kPos, 1);
  const ScopedQ8Types q8_default(gpu_matvec_q8_types());  // the setting back after --q8's two tables
  std::string rows_json, q8_json;
  std::vector<float> fp32_hidden;
  for (int q8 = 0; q8 < (o.q8 ? 2 : 1); ++q8) {
    if (o.q8) gpu_set_matvec_q8(q8 == 1);
    const char* path = gpu_matvec_q8_takes(GgmlType(o.type), c.n_embd) ? "8-bit x" : "FP32";
    std::vector<float> hidden[2];  // [fused]
    for (int fused = 0; fused < 2; ++fused) {
      b.fused = fused;
      b.write(Act::kX, x0);
      pass();
      hidden[fused] = b.read(Act::kX);
    }
    if (std::memcmp(hidden[1].data(), hidden[0].data(), hidden[0].size() * sizeof(float)) != 0) {
      std::fprintf(stderr, "llm_pass_compute: ERROR: %s: the fused decode pass's hidden state differs from the unfused one's: no figure\n",
                   name.c_str());
      return 1;
    }
    if (q8 == 0) fp32_hidden = hidden[1];
    std::printf("%s, %u layers, one token at position %u, every weight in GPU memory, %s products: ms per token of the layers\n",
                name.c_str(), c.n_layer, kPos, path);
    std::printf("%-8s | %12s | %10s | %12s | %12s | %8s | %s\n", "kernels", "host-launched", "graph", "products only", "others only",
                "gaps", "kernels per token");
    for (int fused = 1; fused >= 0; --fused) {
      b.fused = fused;
      const double host = median_seconds(o.reps, [&] {
        for (uint32_t t = 0; t < kTokens; ++t) pass();
      }) / kTokens;
      auto graph_ms = [&](bool products, bool others, size_t* nodes) {
        b.products = products, b.others = others;
        const CapturedLaunches gr([&](gpu_stream_t) { pass(); }, st);
        b.products = b.others = true;
        if (nodes) *nodes = gr.nodes();
        return median_seconds(o.reps, [&] {
          for (uint32_t t = 0; t < kTokens; ++t) gr.launch();
        }) / kTokens;
      };
      size_t nodes = 0;
      const double all = graph_ms(true, true, &nodes), prod = graph_ms(true, false, nullptr), rest = graph_ms(false, true, nullptr);
      const char* label = fused ? "fused" : "unfused";
      std::printf("%-8s | %10.3f ms | %7.3f ms | %9.3f ms | %9.3f ms | %5.3f ms | %zu (%.1f a layer)\n", label, host * 1e3, all * 1e3,
                  prod * 1e3, rest * 1e3, (host - all) * 1e3, nodes, double(nodes) / c.n_layer);
      char row[400];
      std::snprintf(row, sizeof row,
                    "{\"products\":\"%s\",\"kernels\":\"%s\",\"host_launched_ms\":%.4f,\"graph_ms\":%.4f,\"products_only_ms\":%.4f,"
                    "\"others_only_ms\":%.4f,\"kernels_per_token\":%zu}",
                    path, label, host * 1e3, all * 1e3, prod * 1e3, rest * 1e3, nodes);
      rows_json += (rows_json.empty() ? "" : ",") + std::string(row);
    }
    if (q8 == 1) {  // the 8-bit path's hidden state against the FP32 kernels'
      double diff = 0.0, top = 0.0;
      for (size_t i = 0; i < hidden[1].size(); ++i) {
        diff = std::max(diff, double(std::fabs(hidden[1][i] - fp32_hidden[i])));
        top = std::max(top, double(std::fabs(fp32_hidden[i])));
      }
      std::printf("8-bit x against FP32: hidden state's largest difference %.4g (%.3g of its largest value %.4g)\n", diff,
                  top > 0 ? diff / top : 0.0, top);
      char row[160];
      std::snprintf(row, sizeof row, ",\"q8_hidden_max_abs_diff\":%.6g,\"q8_hidden_max_rel_diff\":%.6g", diff, top > 0 ? diff / top : 0.0);
      q8_json = row;
    }
  }
  std::string parts_json;
  if (c.is_moe()) parts_json = ",\"parts\":[" + time_moe_parts(o, c, g, b, pass, st) + "]";
  const std::string line = "{\"tool\":\"llm_pass_compute\",\"mode\":\"decode-pass\",\"model\":" + text::json_string(name) +
                           ",\"layers\":" + std::to_string(c.n_layer) + ",\"position\":" + std::to_string(kPos) +
                           ",\"bits_equal\":true" + q8_json + ",\"rows\":[" + rows_json + "]" + parts_json + "}";
  std::printf("%s\n", line.c_str());
  if (json) std::fprintf(json, "%s\n", line.c_str());
  return 0;
}

// --attention: see the help. Returns the exit status.
int time_attention(const Options& o, const gen::Shape& s, FILE* json) {
  gen::GeneratedModel gm(gen::model_layout(s, o.type, s.name), 1);
  const gguf::GgufFile f = gguf::GgufFile::read(gm);
  ModelConfig c = read_config(f);
  const ModelWeights w = map_weights(f, c);
  c.n_layer = 1;  // one layer's cache: the attention reads nothing else
  const uint32_t n_max = *std::max_element(o.tokens.begin(), o.tokens.end());
  const uint32_t ctx = *std::max_element(o.positions.begin(), o.positions.end()) + n_max;
  cudaStream_t st = nullptr;
  device::check_cuda(cudaStreamCreate(&st), "cudaStreamCreate");
  struct StreamGuard {
    cudaStream_t s;
    ~StreamGuard() { cudaStreamDestroy(s); }
  } guard{st};
  GpuForward g(c, w, ctx, GlobalWeights{}, reinterpret_cast<gpu_stream_t>(st), kSmallPassTokens, false);
  std::mt19937 rng(5);
  std::normal_distribution<float> d;
  auto random = [&](Act a, uint32_t n) {
    std::vector<float> v(size_t(n) * act_width(c, a));
    for (float& x : v) x = d(rng);
    g.write(a, v);
  };
  for (uint32_t p = 0; p < ctx; p += kSmallPassTokens) {  // every position's K and V
    const uint32_t n = std::min(kSmallPassTokens, ctx - p);
    g.set_pass(p, n);
    random(Act::kK, n);
    random(Act::kV, n);
    g.store_kv(0);
  }
  std::printf("%s, %u/%u heads of %u, attention of one layer: us per layer\n", s.name.c_str(), c.n_head, c.n_head_kv, c.head_dim);
  std::printf("%9s | %6s | %10s | %12s | %12s\n", "position", "tokens", "attend", "fused", "KV GB/s");
  constexpr uint32_t kLaunches = 20;  // per graph replay
  std::string rows_json;
  const AttnParams p{0, 0, {}};
  for (uint32_t pos : o.positions)
    for (uint32_t n : o.tokens) {
      g.set_pass(pos, n);
      random(Act::kQ, n);
      random(Act::kK, n);
      random(Act::kV, n);
      g.store_kv(0);
      auto graph_us = [&](bool fused) {
        const CapturedLaunches gr([&](gpu_stream_t) {
          for (uint32_t i = 0; i < kLaunches; ++i) fused ? g.rope_store_attend({}, {}, RopeParams{}, p) : g.attend(p);
        }, st);
        return median_seconds(o.reps, [&] { gr.launch(); }) / kLaunches * 1e6;
      };
      const double plain = graph_us(false), fused = n == 1 ? graph_us(true) : 0.0;
      double seen = 0;  // positions the pass's tokens see, summed
      for (uint32_t t = 0; t < n; ++t) seen += pos + t + 1;
      const double gbps = seen * c.kv_dim() * 2 * sizeof(uint16_t) / (plain * 1e-6) / 1e9;
      std::printf("%9u | %6u | %7.2f us | %9s | %12.0f\n", pos, n, plain, n == 1 ? (std::to_string(fused).substr(0, 6) + " us").c_str() : "-",
                  gbps);
      char row[256];
      std::snprintf(row, sizeof row, "{\"position\":%u,\"tokens\":%u,\"attend_us\":%.3f,\"fused_us\":%.3f,\"kv_gb_per_s\":%.1f}", pos, n,
                    plain, fused, gbps);
      rows_json += (rows_json.empty() ? "" : ",") + std::string(row);
    }
  const std::string line = "{\"tool\":\"llm_pass_compute\",\"mode\":\"attention\",\"model\":" + text::json_string(s.name) +
                           ",\"rows\":[" + rows_json + "]}";
  std::printf("%s\n", line.c_str());
  if (json) std::fprintf(json, "%s\n", line.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  gen::Shape s;
  try {
    o = parse(argc, argv);
    s = gen::shape_named(o.shape);
    if (s.experts != 0 && !o.decode_pass)
      throw cli::UsageError("--shape " + o.shape + " is a MoE shape: its experts run token by token; give a dense one (or --decode-pass)");
    if (o.layers) s.layers = std::min(s.layers, o.layers);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "llm_pass_compute: %s\n", e.what());
    return 2;
  }
  try {
    // Opened first: a path the rule refuses (runtime/guard/output_file.h) ends the run before it starts.
    guard::OutputFile json = o.json_out.empty() ? guard::OutputFile() : guard::OutputFile::open(o.json_out, {}, "--json-out");
    if (o.decode) {
      const int rc = time_decode(o, json ? json.stream() : nullptr);
      if (rc == 0 && json) json.commit();
      return rc;
    }
    if (o.attention) {
      const int rc = time_attention(o, s, json ? json.stream() : nullptr);
      if (rc == 0 && json) json.commit();
      return rc;
    }
    if (o.decode_pass) {
      const int rc = time_decode_pass(o, s, json ? json.stream() : nullptr);
      if (rc == 0 && json) json.commit();
      return rc;
    }
    const uint32_t head = s.hidden / s.heads;
    std::vector<Matrix> ms = {{"q", s.heads * head, s.hidden},     {"k", s.kv_heads * head, s.hidden},
                              {"v", s.kv_heads * head, s.hidden},  {"o", s.hidden, s.heads * head},
                              {"gate", s.ffn, s.hidden},           {"up", s.ffn, s.hidden},
                              {"down", s.hidden, s.ffn}};
    std::vector<std::unique_ptr<DeviceBuffer>> keep;
    std::vector<std::vector<uint8_t>> host_bytes;  // --gemm: the error bound is computed from them
    uint64_t weights = 0, weight_bytes = 0;
    uint32_t widest = 0, tallest = 0;
    for (size_t i = 0; i < ms.size(); ++i) {
      const auto bytes = make_rows(o.type, ms[i].cols, ms[i].rows, i + 1);
      keep.push_back(std::make_unique<DeviceBuffer>(bytes.size()));
      device::check_cuda(cudaMemcpy(keep.back()->p, bytes.data(), bytes.size(), cudaMemcpyHostToDevice), "weights");
      ms[i].w = keep.back()->as<uint8_t>();
      ms[i].row_bytes = bytes.size() / ms[i].rows;
      weights += uint64_t(ms[i].rows) * ms[i].cols;
      weight_bytes += bytes.size();
      if (o.gemm) host_bytes.push_back(bytes);
      widest = std::max(widest, ms[i].cols);
      tallest = std::max(tallest, ms[i].rows);
    }
    const uint32_t n_max = *std::max_element(o.tokens.begin(), o.tokens.end());
    std::vector<float> xh(uint64_t(n_max) * widest);
    std::mt19937 rng(7);
    std::normal_distribution<float> d;
    for (float& v : xh) v = d(rng);
    DeviceBuffer x(xh.size() * 4), y(uint64_t(n_max) * tallest * 4), ref(uint64_t(tallest) * 4);
    device::check_cuda(cudaMemcpy(x.p, xh.data(), xh.size() * 4, cudaMemcpyHostToDevice), "inputs");
    if (o.gemm) {
      const int rc = time_prompt_passes(o, s, ms, host_bytes, xh, x.as<float>(), widest, tallest, weights, json ? json.stream() : nullptr);
      if (rc == 0 && json) json.commit();
      return rc;
    }
    std::printf("%s, %s matrices, %u layers (%.2f G weights per layer); matrix kernels per pass (%s):\n",
                s.name.c_str(), gguf::ggml_type_name(o.type).c_str(), s.layers, weights / 1e9,
                gpu_matvec_q8_takes(GgmlType(o.type), ms[0].cols) ? "8-bit x" : "FP32");
    std::printf("%7s | %12s | %14s | %9s | %14s\n", "tokens", "s per pass", "extra over 1", "TFLOP/s", "weight GB/s");
    std::string rows_json;
    double one = 0;
    for (uint32_t n : o.tokens) {
      double layer = 0;
      for (const Matrix& m : ms) {
        if (!same_bits(m, o.type, x.as<float>(), n, y.as<float>(), ref.as<float>())) {
          std::fprintf(stderr, "llm_pass_compute: ERROR: %s, %u tokens: the batched kernel's bits differ from the matrix-vector kernel's: no figure\n",
                       m.name.c_str(), n);
          return 1;
        }
        layer += median_seconds(o.reps, [&] { gpu_matmul(nullptr, view(m, o.type), x.as<float>(), n, nullptr, y.as<float>()); });
      }
      const double pass = layer * s.layers, tflops = 2.0 * weights * s.layers * n / pass / 1e12;
      const double gbps = double(weight_bytes) * s.layers / pass / 1e9;
      if (n == 1) one = pass;
      std::printf("%7u | %10.4f s | %12s | %9.2f | %14.0f\n", n, pass,
                  one > 0 ? (std::to_string(int((pass - one) * 1e3)) + " ms").c_str() : "-", tflops, gbps);
      char row[256];
      std::snprintf(row, sizeof row, "{\"tokens\":%u,\"seconds_per_pass\":%.6f,\"tflops\":%.3f,\"weight_gb_per_s\":%.1f,\"bits_checked\":true}",
                    n, pass, tflops, gbps);
      rows_json += (rows_json.empty() ? "" : ",") + std::string(row);
    }
    // The single-token FP32 kernel against the warp-per-row kernel it replaced, same matrices, same run.
    const ScopedQ8Types fp32(0);
    double staged = 0, unstaged = 0;
    for (const Matrix& m : ms) {
      if (!same_bits_unstaged(m, o.type, x.as<float>(), y.as<float>(), ref.as<float>())) {
        std::fprintf(stderr, "llm_pass_compute: ERROR: %s: the staged kernel's bits differ from the warp-per-row kernel's: no figure\n",
                     m.name.c_str());
        return 1;
      }
      staged += median_seconds(o.reps, [&] { gpu_matmul(nullptr, view(m, o.type), x.as<float>(), 1, nullptr, y.as<float>()); });
      unstaged += median_seconds(o.reps, [&] { gpu_matvec_unstaged(nullptr, view(m, o.type), x.as<float>(), nullptr, ref.as<float>()); });
    }
    const double layer_bytes = double(weight_bytes);
    std::printf("one token, staged vs warp-per-row kernel: %.0f vs %.0f GB/s of weights (%.2fx), bits equal\n",
                layer_bytes / staged / 1e9, layer_bytes / unstaged / 1e9, unstaged / staged);
    char cmp[256];
    std::snprintf(cmp, sizeof cmp, "{\"staged_gb_per_s\":%.1f,\"warp_per_row_gb_per_s\":%.1f,\"speedup\":%.3f,\"bits_equal\":true}",
                  layer_bytes / staged / 1e9, layer_bytes / unstaged / 1e9, unstaged / staged);
    if (json) {
      std::fprintf(json.stream(), "{\"tool\":\"llm_pass_compute\",\"shape\":%s,\"type\":%s,\"layers\":%u,\"weights_per_layer\":%llu,\"rows\":[%s],\"matvec_vs_warp_per_row\":%s}\n",
                   text::json_string(s.name).c_str(), text::json_string(gguf::ggml_type_name(o.type)).c_str(), s.layers,
                   static_cast<unsigned long long>(weights), rows_json.c_str(), cmp);
      json.commit();
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "llm_pass_compute: %s\n", e.what());
    return 1;
  }
  return 0;
}
