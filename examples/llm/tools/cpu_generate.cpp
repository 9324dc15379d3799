// cpu_generate FILE.gguf --prompt-ids 1,2,3 [-n N] [--top K]: greedy decoding with the engine's CPU
// executor on a host file, one JSON object per generated token on stdout:
//   {"step": 0, "token": 42, "top": [[42, 3.25], [7, 3.01], ...]}
// tests/llm/reference_check.py compares this with llama.cpp's reference data.
#include <cstdio>
#include <fstream>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>
#include <algorithm>

#include "examples/llm/compute/cpu_forward.h"
#include "runtime/gguf/gguf_file.h"

namespace {

std::vector<uint32_t> parse_ids(const std::string& s) {
  std::vector<uint32_t> ids;
  size_t i = 0;
  while (i < s.size()) {
    size_t j = s.find(',', i);
    if (j == std::string::npos) j = s.size();
    const std::string tok = s.substr(i, j - i);
    if (tok.empty() || tok.find_first_not_of("0123456789") != std::string::npos || tok.size() > 9)
      throw std::runtime_error("--prompt-ids: '" + tok + "' is not a token id (decimal, comma-separated)");
    ids.push_back(uint32_t(std::stoul(tok)));
    i = j + 1;
  }
  if (ids.empty()) throw std::runtime_error("--prompt-ids: no ids");
  return ids;
}

std::vector<uint8_t> slurp(const std::string& path, uint64_t bytes) {
  std::ifstream in(path, std::ios::binary);
  std::vector<uint8_t> b(bytes);
  if (!in.read(reinterpret_cast<char*>(b.data()), std::streamsize(bytes))) throw std::runtime_error(path + ": short read");
  return b;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace gpunvme;
  try {
    std::string file, ids_text;
    uint32_t n = 32, top = 5;
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      auto next = [&]() -> std::string {
        if (i + 1 >= argc) throw std::runtime_error(a + " needs a value");
        return argv[++i];
      };
      if (a == "--prompt-ids") ids_text = next();
      else if (a == "-n") n = uint32_t(std::stoul(next()));
      else if (a == "--top") top = uint32_t(std::stoul(next()));
      else if (file.empty() && a[0] != '-') file = a;
      else throw std::runtime_error("unknown argument " + a);
    }
    if (file.empty() || ids_text.empty()) throw std::runtime_error("usage: cpu_generate FILE.gguf --prompt-ids 1,2,3 [-n N] [--top K]");
    const auto ids = parse_ids(ids_text);
    const gguf::GgufFile f = gguf::GgufFile::open(file);
    const llm::ModelConfig c = llm::read_config(f);
    const llm::ModelWeights w = llm::map_weights(f, c);
    const std::vector<uint8_t> bytes = slurp(file, f.data_end());
    llm::CpuForward fwd(c, w, bytes, uint32_t(ids.size() + n));
    const std::vector<float>* logits = nullptr;
    uint32_t pos = 0;
    for (uint32_t id : ids) logits = &fwd.eval(id, pos++);
    std::vector<uint32_t> order(c.n_vocab);
    for (uint32_t step = 0; step < n; ++step) {
      std::iota(order.begin(), order.end(), 0u);
      std::partial_sort(order.begin(), order.begin() + top, order.end(),
                        [&](uint32_t a, uint32_t b) { return (*logits)[a] > (*logits)[b] || ((*logits)[a] == (*logits)[b] && a < b); });
      std::printf("{\"step\": %u, \"token\": %u, \"top\": [", step, order[0]);
      for (uint32_t k = 0; k < top; ++k) std::printf("%s[%u, %.9g]", k ? ", " : "", order[k], double((*logits)[order[k]]));
      std::printf("]}\n");
      std::fflush(stdout);
      if (step + 1 < n) logits = &fwd.eval(order[0], pos++);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cpu_generate: %s\n", e.what());
    return 1;
  }
  return 0;
}
