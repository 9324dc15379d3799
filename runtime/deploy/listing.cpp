#include "runtime/deploy/listing.h"

#include <cstdio>

#include "runtime/cli/format.h"
#include "runtime/model/model_error.h"

namespace gpunvme::deploy {
namespace {

std::string json_str(const std::string& s) {
  std::string o = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      o += '\\';
      o += char(c);
    } else if (c < 0x20) {
      char b[8];
      std::snprintf(b, sizeof b, "\\u%04x", c);
      o += b;
    } else {
      o += char(c);
    }
  }
  return o + "\"";
}

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

std::string line(const char* fmt, auto... a) {
  char b[512];
  std::snprintf(b, sizeof b, fmt, a...);
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

std::string format_listing(const Listing& l, const ListOptions& opt) {
  const auto& m = *l.map;
  const auto& f = *l.file;
  const bool rec = l.detected.record.has_value();
  std::string o;
  if (opt.json) {
    o += "{\n  \"device\": " + json_str(l.device) + ",\n  \"lba_size\": " + std::to_string(l.lba_size) +
         ",\n  \"device_lbas\": " + std::to_string(l.n_lbas) + ",\n  \"model\": " + json_str(l.name()) +
         ",\n  \"architecture\": " + json_str(f.architecture()) + ",\n  \"found_by\": " +
         json_str(rec ? "deploy record" : "GGUF magic") + ",\n  \"start_lba\": " + std::to_string(m.start_lba()) +
         ",\n  \"model_bytes\": " + std::to_string(l.model_bytes()) + ",\n  \"gguf_version\": " +
         std::to_string(f.version()) + ",\n  \"data_offset\": " + std::to_string(f.data_offset()) +
         ",\n  \"tensor_count\": " + std::to_string(f.tensors().size()) + ",\n  \"extent\": " +
         json_extent(m.model_extent()) + ",\n  \"layers\": [";
    for (size_t i = 0; i < m.layers().size(); ++i) {
      const auto& L = m.layers()[i];
      o += std::string(i ? "," : "") + "\n    {\"layer\": " + std::to_string(L.layer) + ", \"tensors\": " +
           std::to_string(L.tensors.size()) + ", \"extent\": " + json_extent(L.extent) + "}";
    }
    o += "\n  ],\n  \"globals\": [";
    for (size_t i = 0; i < m.globals().size(); ++i) {
      const auto& t = m.tensors()[m.globals()[i]];
      o += std::string(i ? "," : "") + "\n    {\"name\": " + json_str(t.tensor->name) + ", \"extent\": " +
           json_extent(t.extent) + "}";
    }
    o += "\n  ]";
    if (opt.tensors) {
      o += ",\n  \"tensors\": [";
      for (size_t i = 0; i < m.tensors().size(); ++i) {
        const auto& t = m.tensors()[i];
        o += std::string(i ? "," : "") + "\n    {\"name\": " + json_str(t.tensor->name) + ", \"type\": " +
             json_str(gguf::ggml_type_name(t.tensor->type_id)) + ", \"file_offset\": " +
             std::to_string(t.tensor->file_offset) + ", \"extent\": " + json_extent(t.extent) + "}";
      }
      o += "\n  ]";
    }
    if (opt.experts) {
      o += ",\n  \"experts\": [";
      for (size_t i = 0; i < m.experts().size(); ++i) {
        const auto& e = m.experts()[i];
        o += std::string(i ? "," : "") + "\n    {\"layer\": " + std::to_string(e.layer) + ", \"expert\": " +
             std::to_string(e.expert) + ", \"projection\": " + json_str(model::projection_name(e.proj)) +
             ", \"stacked\": " + (e.stacked ? "true" : "false") + ", \"extent\": " + json_extent(e.extent) + "}";
      }
      o += "\n  ]";
    }
    return o + "\n}\n";
  }

  const auto& ext = m.model_extent();
  o += "model      " + (l.name().empty() ? std::string("(unnamed)") : "'" + l.name() + "'") +
       (f.architecture().empty() ? "" : " (" + f.architecture() + ")") + "\n";
  o += "device     " + l.device + ": " + std::to_string(l.n_lbas) + " blocks of " + std::to_string(l.lba_size) +
       " bytes (" + cli::human_bytes(double(l.n_lbas) * l.lba_size) + ")\n";
  o += "found by   " +
       (rec ? "deploy record at LBA " + std::to_string(l.detected.record->record_lba) + " (" +
                  std::to_string(l.detected.record->n_chunks()) + " chunk CRCs of " +
                  cli::human_bytes(double(l.detected.record->chunk_bytes())) + ")"
            : std::string("GGUF magic (no deploy record: written by dd?)")) +
       "\n";
  o += line("start LBA  %llu; model %s (%llu bytes), tensors at LBA %s\n", (unsigned long long)m.start_lba(),
            cli::human_bytes(double(l.model_bytes())).c_str(), (unsigned long long)l.model_bytes(), lbas(ext).c_str());
  o += line("GGUF       v%u, %zu tensors, %zu metadata keys, data section at byte %llu, %zu layers\n", f.version(),
            f.tensors().size(), f.metadata().size(), (unsigned long long)f.data_offset(), m.layers().size());
  o += "\nlayers\n" + line("  %-8s %-24s %12s %8s\n", "layer", "LBAs", "bytes", "tensors");
  for (const auto& L : m.layers()) {
    o += line("  blk.%-4u %-24s %12llu %8zu\n", L.layer, lbas(L.extent).c_str(), (unsigned long long)L.extent.byte_length,
              L.tensors.size());
  }
  o += "\nnon-layer tensors\n";
  for (size_t gi : m.globals()) {
    const auto& t = m.tensors()[gi];
    o += line("  %-36s %-24s %12llu  %s\n", t.tensor->name.c_str(), lbas(t.extent).c_str(),
              (unsigned long long)t.extent.byte_length, gguf::ggml_type_name(t.tensor->type_id).c_str());
  }
  if (opt.tensors) {
    o += "\ntensors\n" + line("  %-36s %-8s %-24s %6s %12s\n", "name", "type", "LBAs", "+byte", "bytes");
    for (const auto& t : m.tensors()) {
      o += line("  %-36s %-8s %-24s %6u %12llu\n", t.tensor->name.c_str(),
                gguf::ggml_type_name(t.tensor->type_id).c_str(), lbas(t.extent).c_str(), t.extent.byte_in_first,
                (unsigned long long)t.extent.byte_length);
    }
  }
  if (opt.experts) {
    o += "\nexperts\n";
    if (m.experts().empty()) o += "  (none: not a mixture-of-experts model)\n";
    for (const auto& e : m.experts()) {
      o += line("  blk.%-4u expert %-4u %-8s %-24s %12llu%s\n", e.layer, e.expert, model::projection_name(e.proj),
                lbas(e.extent).c_str(), (unsigned long long)e.extent.byte_length, e.stacked ? "" : "  (own tensor)");
    }
  }
  return o;
}

}  // namespace gpunvme::deploy
