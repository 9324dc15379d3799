// dequant_dump FILE.gguf OUTDIR: dequantizes every tensor of a type the engine computes with the
// engine's own block routines (quant/dequant.h, the code the GPU kernels run) and writes tensor k's
// floats to OUTDIR/k.f32 (after checking that the 32-element group route gives the same bits), printing "k<TAB>type<TAB>elements<TAB>name" per tensor. tests/llm/dequant_check.py
// compares the files with gguf-py's gguf.quants.dequantize.
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "examples/llm/quant/dequant.h"
#include "runtime/gguf/byte_source.h"
#include "runtime/gguf/gguf_file.h"
#include "runtime/guard/output_file.h"


int main(int argc, char** argv) {
  using namespace gpunvme;
  if (argc != 3) {
    std::fprintf(stderr, "usage: dequant_dump FILE.gguf OUTDIR\n");
    return 2;
  }
  try {
    const gguf::GgufFile f = gguf::GgufFile::open(argv[1]);
    gguf::FileSource file(argv[1]);
    const auto& ts = f.tensors();
    for (size_t k = 0; k < ts.size(); ++k) {
      const auto& t = ts[k];
      if (!llm::computes(t.type.type)) continue;
      std::vector<uint8_t> raw(t.size_bytes);
      if (file.read(t.file_offset, raw.data(), raw.size()) != raw.size()) throw std::runtime_error(t.name + ": the file is truncated");
      std::vector<float> out(t.n_elements);
      const uint64_t blocks = t.n_elements / t.type.block_size;
      for (uint64_t i = 0; i < blocks; ++i) llm::dequant_block(t.type.type, raw.data(), i, out.data() + i * t.type.block_size);
      // The kernels' route (32-element groups) must give the same bits as the whole-block route.
      float g[llm::kGroup];
      for (uint64_t i = 0; i < t.n_elements / llm::kGroup; ++i) {
        llm::dequant_group(t.type.type, raw.data(), i, g);
        if (std::memcmp(g, out.data() + i * llm::kGroup, sizeof g) != 0)
          throw std::runtime_error(t.name + ": dequant_group(" + std::to_string(i) + ") differs from dequant_block");
      }
      guard::OutputFile o = guard::OutputFile::open(std::string(argv[2]) + "/" + std::to_string(k) + ".f32", {});
      o.write(out.data(), out.size() * sizeof(float));
      o.commit();
      std::printf("%zu\t%.*s\t%llu\t%s\n", k, int(t.type.name.size()), t.type.name.data(),
                  static_cast<unsigned long long>(t.n_elements), t.name.c_str());
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dequant_dump: %s\n", e.what());
    return 1;
  }
  return 0;
}
