// tokenize FILE.gguf [--no-bos] [--special]: reads one hex-encoded UTF-8 text per stdin line (hex, so
// any bytes and newlines survive), prints its token ids comma-separated per line; --special parses
// control tokens' texts as those tokens (llama_tokenize's parse_special). tests/llm/tokenizer_check.py
// feeds llama.cpp's reference cases through it.
// tokenize FILE.gguf --eog: prints the end-of-generation token ids (Vocab::eog) comma-separated.
#include <cstdio>
#include <iostream>
#include <stdexcept>
#include <string>
#include <utility>

#include "examples/llm/tokenizer/tokenizer.h"
#include "runtime/gguf/gguf_file.h"

namespace {

std::string unhex(const std::string& h) {
  if (h.size() % 2) throw std::runtime_error("odd-length hex line");
  std::string s;
  for (size_t i = 0; i < h.size(); i += 2) s += char(std::stoi(h.substr(i, 2), nullptr, 16));
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace gpunvme;
  bool bos = true, special = false, eog = false;
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--no-bos") bos = false;
    else if (a == "--special") special = true;
    else if (a == "--eog") eog = true;
    else argc = 0;  // unknown: usage below
  }
  if (argc < 2) {
    std::fprintf(stderr, "usage: tokenize FILE.gguf [--no-bos] [--special] < hex-lines | tokenize FILE.gguf --eog\n");
    return 2;
  }
  try {
    const llm::Tokenizer tok(llm::read_vocab(gguf::GgufFile::open(argv[1])));
    if (eog) {
      const char* sep = "";
      for (uint32_t id : tok.vocab().eog) std::printf("%s%u", std::exchange(sep, ","), id);
      std::printf("\n");
      return 0;
    }
    std::string line;
    while (std::getline(std::cin, line)) {
      const auto ids = tok.encode(unhex(line), bos, special);
      for (size_t i = 0; i < ids.size(); ++i) std::printf("%s%u", i ? "," : "", ids[i]);
      std::printf("\n");
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tokenize: %s\n", e.what());
    return 1;
  }
  return 0;
}
