// libFuzzer target: the GGUF header parser on arbitrary bytes, then the LBA map and the deploy
// record parser on whatever parses. Any crash, sanitizer report, leak or exception other than
// GgufError/ModelError is a bug. Build and run with scripts/gguf_fuzz.sh.
#include <cstddef>
#include <cstdint>
#include <span>

#include "runtime/gguf/gguf_file.h"
#include "runtime/model/deploy_record.h"
#include "runtime/model/lba_map.h"
#include "runtime/model/model_error.h"

using namespace gpunvme;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::span<const uint8_t> bytes(data, size);
  try {
    auto f = gguf::GgufFile::parse(bytes);
    // Touch everything the parser produced.
    for (const auto& [key, v] : f.metadata().entries()) {
      if (v.type() == gguf::ValueType::ARRAY) {
        const auto& a = v.as_array();
        if (a.count > 0 && a.elem_type != gguf::ValueType::ARRAY) (void)a.at(a.count - 1);
      }
      (void)key;
    }
    (void)f.model_name();
    for (uint32_t bs : {512u, 4096u}) {
      try {
        model::LbaMap map(f, bs, 2048);
        for (const auto& l : map.layers()) (void)map.layer(l.layer);
        for (const auto& e : map.experts()) (void)map.expert(e.layer, e.expert, e.proj);
      } catch (const model::ModelError&) {
      }
    }
  } catch (const gguf::GgufError&) {
  }
  // The same bytes as a record block (the record parser also reads device bytes it did not write).
  if (size >= 512) {
    try {
      (void)model::parse_record(bytes.first(512), 0);
    } catch (const model::ModelError&) {
    }
  }
  return 0;
}
