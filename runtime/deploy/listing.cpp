#include "runtime/deploy/listing.h"

#include <cstdio>

#include "host/text/escape.h"
#include "host/text/human_bytes.h"
#include "runtime/model/model_error.h"

namespace gpunvme::deploy {
namespace {

using text::json_string;
using text::printable;
using text::human_bytes;

std::string json_extent(const model::Extent& e) {
  return "{\"first_lba\": " + std::to_string(e.first_lba) + ", \"lba_count\": " + std::to_string(e.lba_count) +
         ", \"byte_in_first\": " + std::to_string(e.byte_in_first) + ", \"bytes\": " + std::to_string(e.byte_length) + "}";
}

std::string lbas(const model::Extent& e) {
  char b[64];
  std::snprintf(b, sizeof b, "%llu..%llu", (unsigned long long)e.first_lba,
                (unsigned long long)(e.lba_count ? e.end_lba() - 1 : e.first_lba));
  return b;
}

// printf into a string of any length (names can be long; a cut line would lose its newline).
std::string line(const char* fmt, auto... a) {
  const int n = std::snprintf(nullptr, 0, fmt, a...);
  std::string b(size_t(n > 0 ? n : 0) + 1, '\0');
  std::snprintf(b.data(), b.size(), fmt, a...);
  b.pop_back();
  return b;
}

}  // namespace

std::string Listing::name() const {
  if (detected.record && !detected.record->name.empty()) return detected.record->name;
  return file ? file->model_name() : "";
}

uint64_t Listing::model_bytes() const { return detected.record ? detected.record->model_bytes : file->data_end(); }

Listing list_model(const model::BlockIo& io, std::optional<uint64_t> start_lba) {
  Listing l;
  l.device = io.name;
  l.lba_size = io.lba_size;
  l.n_lbas = io.n_lbas;
  l.detected = model::detect_model(io, start_lba);
  l.file = std::make_unique<gguf::GgufFile>(model::read_model_header(io, l.detected));
  l.map = std::make_unique<model::LbaMap>(*l.file, io.lba_size, l.detected.start_lba);
  return l;
}

namespace {

// ---- JSON: every string through json_string, so any name (newlines, escapes, bytes that are not
// UTF-8) still makes one valid JSON document.

std::string json_header(const Listing& l) {
  const auto& m = *l.map;
  const auto& f = *l.file;
  const bool rec = l.detected.record.has_value();
  return "{\n  \"device\": " + json_string(l.device) + ",\n  \"lba_size\": " + std::to_string(l.lba_size) +
         ",\n  \"device_lbas\": " + std::to_string(l.n_lbas) + ",\n  \"model\": " + json_string(l.name()) +
         ",\n  \"architecture\": " + json_string(f.architecture()) + ",\n  \"found_by\": " +
         json_string(rec ? "deploy record" : "GGUF magic") + ",\n  \"start_lba\": " + std::to_string(m.start_lba()) +
         ",\n  \"model_bytes\": " + std::to_string(l.model_bytes()) + ",\n  \"gguf_version\": " +
         std::to_string(f.version()) + ",\n  \"data_offset\": " + std::to_string(f.data_offset()) +
         ",\n  \"tensor_count\": " + std::to_string(f.tensors().size()) + ",\n  \"extent\": " +
         json_extent(m.model_extent());
}

// ",\n  \"key\": [ item, item ]" with one item per element of `n` elements.
template <class Item>
std::string json_array(const char* key, size_t n, Item item) {
  std::string o = ",\n  \"" + std::string(key) + "\": [";
  for (size_t i = 0; i < n; ++i) o += std::string(i ? "," : "") + "\n    " + item(i);
  return o + "\n  ]";
}

std::string format_json(const Listing& l, const ListOptions& opt) {
  const auto& m = *l.map;
  std::string o = json_header(l);
  o += json_array("layers", m.layers().size(), [&](size_t i) {
    const auto& L = m.layers()[i];
    return "{\"layer\": " + std::to_string(L.layer) + ", \"tensors\": " + std::to_string(L.tensors.size()) +
           ", \"extent\": " + json_extent(L.extent) + "}";
  });
  o += json_array("globals", m.globals().size(), [&](size_t i) {
    const auto& t = m.tensors()[m.globals()[i]];
    return "{\"name\": " + json_string(t.tensor->name) + ", \"extent\": " + json_extent(t.extent) + "}";
  });
  if (opt.tensors) {
    o += json_array("tensors", m.tensors().size(), [&](size_t i) {
      const auto& t = m.tensors()[i];
      return "{\"name\": " + json_string(t.tensor->name) + ", \"type\": " +
             json_string(gguf::ggml_type_name(t.tensor->type_id)) + ", \"file_offset\": " +
             std::to_string(t.tensor->file_offset) + ", \"extent\": " + json_extent(t.extent) + "}";
    });
  }
  if (opt.experts) {
    o += json_array("experts", m.experts().size(), [&](size_t i) {
      const auto& e = m.experts()[i];
      return "{\"layer\": " + std::to_string(e.layer) + ", \"expert\": " + std::to_string(e.expert) +
             ", \"projection\": " + json_string(model::projection_name(e.proj)) + ", \"stacked\": " +
             (e.stacked ? "true" : "false") + ", \"extent\": " + json_extent(e.extent) + "}";
    });
  }
  return o + "\n}\n";
}

// ---- text: names from the file go through printable(), so none can end a line or forge one.

std::string text_summary(const Listing& l) {
  const auto& m = *l.map;
  const auto& f = *l.file;
  const bool rec = l.detected.record.has_value();
  std::string o;
  o += "model      " + (l.name().empty() ? std::string("(unnamed)") : "'" + printable(l.name()) + "'") +
       (f.architecture().empty() ? "" : " (" + printable(f.architecture()) + ")") + "\n";
  o += "device     " + printable(l.device) + ": " + std::to_string(l.n_lbas) + " blocks of " +
       std::to_string(l.lba_size) + " bytes (" + human_bytes(double(l.n_lbas) * l.lba_size) + ")\n";
  o += "found by   " +
       (rec ? "deploy record at LBA " + std::to_string(l.detected.record->record_lba) + " (" +
                  std::to_string(l.detected.record->n_chunks()) + " chunk CRCs of " +
                  human_bytes(double(l.detected.record->chunk_bytes())) + ")"
            : std::string("GGUF magic (no deploy record: written by dd?)")) +
       "\n";
  o += line("start LBA  %llu; model %s (%llu bytes), tensors at LBA %s\n", (unsigned long long)m.start_lba(),
            human_bytes(double(l.model_bytes())).c_str(), (unsigned long long)l.model_bytes(),
            lbas(m.model_extent()).c_str());
  o += line("GGUF       v%u, %zu tensors, %zu metadata keys, data section at byte %llu, %zu layers\n", f.version(),
            f.tensors().size(), f.metadata().size(), (unsigned long long)f.data_offset(), m.layers().size());
  return o;
}

std::string text_layers_and_globals(const model::LbaMap& m) {
  std::string o = "\nlayers\n" + line("  %-8s %-24s %12s %8s\n", "layer", "LBAs", "bytes", "tensors");
  for (const auto& L : m.layers()) {
    o += line("  blk.%-4u %-24s %12llu %8zu\n", L.layer, lbas(L.extent).c_str(), (unsigned long long)L.extent.byte_length,
              L.tensors.size());
  }
  o += "\nnon-layer tensors\n";
  for (size_t gi : m.globals()) {
    const auto& t = m.tensors()[gi];
    o += line("  %-36s %-24s %12llu  %s\n", printable(t.tensor->name).c_str(), lbas(t.extent).c_str(),
              (unsigned long long)t.extent.byte_length, gguf::ggml_type_name(t.tensor->type_id).c_str());
  }
  return o;
}

std::string text_tensors(const model::LbaMap& m) {
  std::string o = "\ntensors\n" + line("  %-36s %-8s %-24s %6s %12s\n", "name", "type", "LBAs", "+byte", "bytes");
  for (const auto& t : m.tensors()) {
    o += line("  %-36s %-8s %-24s %6u %12llu\n", printable(t.tensor->name).c_str(),
              gguf::ggml_type_name(t.tensor->type_id).c_str(), lbas(t.extent).c_str(), t.extent.byte_in_first,
              (unsigned long long)t.extent.byte_length);
  }
  return o;
}

std::string text_experts(const model::LbaMap& m) {
  std::string o = "\nexperts\n";
  if (m.experts().empty()) o += "  (none: not a mixture-of-experts model)\n";
  for (const auto& e : m.experts()) {
    o += line("  blk.%-4u expert %-4u %-8s %-24s %12llu%s\n", e.layer, e.expert, model::projection_name(e.proj),
              lbas(e.extent).c_str(), (unsigned long long)e.extent.byte_length, e.stacked ? "" : "  (own tensor)");
  }
  return o;
}

}  // namespace

std::string format_listing(const Listing& l, const ListOptions& opt) {
  if (opt.json) return format_json(l, opt);
  std::string o = text_summary(l) + text_layers_and_globals(*l.map);
  if (opt.tensors) o += text_tensors(*l.map);
  if (opt.experts) o += text_experts(*l.map);
  return o;
}

}  // namespace gpunvme::deploy
