// Fixtures of the GPU streaming suites (test_gpu_stream.cpp, test_gpu_recovery.cpp): CUDA streams,
// zeroed device counters, synthetic layers and MoE catalogs whose bytes hold the namespace pattern.
#pragma once
#include <catch2/catch_test_macros.hpp>

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "gpu_check.h"
#include "runtime/model/lba_map.h"
#include "runtime/stream/expert_fetcher.h"
#include "runtime/stream/layer_streamer.h"

namespace gpunvme::test {

// A CUDA stream and a few device counters, freed at scope end.
struct Streams {
  cudaStream_t io = nullptr, compute = nullptr;
  Streams() {
    int lo = 0, hi = 0;
    cudaDeviceGetStreamPriorityRange(&lo, &hi);
    REQUIRE(cudaStreamCreateWithPriority(&io, cudaStreamNonBlocking, hi) == cudaSuccess);
    REQUIRE(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking) == cudaSuccess);
  }
  ~Streams() {
    cudaStreamDestroy(io);
    cudaStreamDestroy(compute);
  }
  stream::cuda_stream_t s_io() const { return reinterpret_cast<stream::cuda_stream_t>(io); }
  stream::cuda_stream_t s_compute() const { return reinterpret_cast<stream::cuda_stream_t>(compute); }
};

template <class T>
struct DeviceZeros {
  T* p = nullptr;
  size_t n;
  explicit DeviceZeros(size_t count) : n(count) {
    REQUIRE(cudaMalloc(&p, sizeof(T) * n) == cudaSuccess);
    REQUIRE(cudaMemset(p, 0, sizeof(T) * n) == cudaSuccess);
  }
  ~DeviceZeros() { cudaFree(p); }
  std::vector<T> get() const {
    std::vector<T> v(n);
    cudaDeviceSynchronize();
    REQUIRE(cudaMemcpy(v.data(), p, sizeof(T) * n, cudaMemcpyDeviceToHost) == cudaSuccess);
    return v;
  }
};

// Layers of three tensors each with unaligned starts and ends (byte ranges of a "file" at LBA 0).
inline std::vector<std::vector<model::Extent>> make_layers(uint32_t n, uint32_t lba) {
  std::vector<std::vector<model::Extent>> layers(n);
  for (uint32_t l = 0; l < n; ++l)
    for (uint32_t t = 0; t < 3; ++t) {
      const uint64_t off = uint64_t(l) * (6 << 20) + uint64_t(t) * (2 << 20) + 37 + 100 * t;
      const uint64_t len = (1 << 20) + 333 * t + 13 + (l % 3) * 4096;
      layers[l].push_back(model::byte_range_to_extent(off, len, lba, 0));
    }
  return layers;
}

// The consumer's byte ranges of a plan, appended to `out`: where each piece's bytes start in the slot,
// and where they came from on the namespace.
inline void append_pieces(const plan::CommandPlan& plan, uint32_t lba, std::vector<VerifySpan>& out) {
  for (const plan::Piece& p : plan.pieces)
    out.push_back(VerifySpan{p.data_offset, p.source.first_lba * lba + p.source.byte_in_first, p.source.byte_length});
}
// ... of a slot view.
inline std::vector<VerifySpan> pieces_of(const stream::SlotView& v, uint32_t lba) {
  std::vector<VerifySpan> out;
  append_pieces(*v.plan, lba, out);
  return out;
}
// Every layer's pieces in one table (both slots' plans have the same pieces), for one device copy:
// layer l's are spans[first[l] .. first[l + 1]).
struct LayerSpans {
  std::vector<VerifySpan> spans;
  std::vector<uint32_t> first;
};
inline LayerSpans layer_spans(const stream::LayerStreamer& s, uint32_t n_layers, uint32_t lba) {
  LayerSpans t;
  t.first.assign(n_layers + 1, 0);
  for (uint32_t l = 0; l < n_layers; ++l) {
    append_pieces(s.plan(l, 0), lba, t.spans);
    t.first[l + 1] = uint32_t(t.spans.size());
  }
  return t;
}

// A synthetic MoE catalog: n_layers x n_experts experts of three slices with unaligned starts.
inline stream::ExpertCatalog make_catalog(uint32_t n_layers, uint32_t n_experts, uint32_t lba, std::vector<uint64_t>* ns_offsets,
                                          uint64_t part_bytes = 96 << 10) {
  stream::ExpertCatalog c;
  c.n_layers = n_layers;
  c.n_experts = n_experts;
  c.parts.resize(size_t(n_layers) * n_experts);
  ns_offsets->assign(size_t(n_layers) * n_experts * 4, 0);
  uint64_t off = 4096 + 17;
  for (uint32_t l = 0; l < n_layers; ++l)
    for (uint32_t e = 0; e < n_experts; ++e)
      for (uint32_t k = 0; k < 3; ++k) {
        const uint64_t len = part_bytes + 257 * k + 31 * e;
        const model::Projection proj = k == 0 ? model::Projection::kGate : k == 1 ? model::Projection::kUp
                                                                                  : model::Projection::kDown;
        c.parts[size_t(l) * n_experts + e].push_back({proj, model::byte_range_to_extent(off, len, lba, 0)});
        (*ns_offsets)[(size_t(l) * n_experts + e) * 4 + k] = off;
        off += len + 1000 + 8 * k;
      }
  return c;
}

}  // namespace gpunvme::test
