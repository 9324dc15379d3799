// A GGUF model made on the fly: the header from the layout (model_shapes.h), every tensor's bytes
// generated when read. Random but valid: each block comes from a generator seeded by (seed, tensor,
// block), so any byte range can be read in any order, any number of times, with the same result (the
// deploy's chunk checksums and `gpunvme verify --against` depend on it), and a 57 GB model needs no
// 57 GB file. Scale fields are finite (normal halves; MXFP4: powers of two) chosen so a matrix's values
// are about 1/sqrt(input size) and centred (a k-quant block with only positive mins leans one way and
// makes greedy decoding repeat one token).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "examples/llm/tools/model_shapes.h"
#include "runtime/gguf/byte_source.h"

namespace gpunvme::llm::gen {

class GeneratedModel final : public gguf::ByteSource {
 public:
  // threads: reads of 1 MiB and more are split over this many threads (0: hardware concurrency).
  GeneratedModel(const ModelLayout& layout, uint64_t seed, uint32_t threads = 0);
  size_t read(uint64_t offset, void* dst, size_t len) override;
  uint64_t size() const override { return size_; }
  std::string describe() const override { return "generated model"; }
  // Bytes [offset, offset + len), which must lie inside the model, on the calling thread: what
  // read() does in each of its threads. Safe from many threads at once (the emulator's gen: namespace).
  void generate(uint64_t offset, void* dst, size_t len) const;

 private:
  struct Placed {
    TensorPlan plan;
    uint64_t begin = 0;  // absolute file offset
    uint32_t block_bytes = 0, block_elems = 0;
  };
  void fill_blocks(const Placed& t, uint32_t index, uint64_t lo, uint64_t hi, uint8_t* dst) const;

  std::vector<uint8_t> header_;  // [0, data offset): header and padding
  std::vector<Placed> tensors_;  // ascending offsets
  uint64_t size_ = 0, seed_ = 0;
  uint32_t threads_ = 1;
};

// One block of `type` (Q4_K, Q6_K: one super-block; Q8_0, MXFP4: 32 elements; F32: one value) for
// `fill` and a row of `cols` elements, from `rng_seed`. Exposed for the tests.
void make_block(uint32_t type, Fill fill, uint64_t cols, uint64_t rng_seed, uint8_t* out);

}  // namespace gpunvme::llm::gen
