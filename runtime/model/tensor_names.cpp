#include "runtime/model/tensor_names.h"

#include <charconv>

namespace gpunvme::model {
namespace {

// Parses a decimal number at the front of s (no sign, no leading '+'), advancing s past it.
std::optional<uint32_t> take_number(std::string_view& s) {
  uint32_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p == s.data()) return std::nullopt;
  s.remove_prefix(static_cast<size_t>(p - s.data()));
  return v;
}

bool take(std::string_view& s, std::string_view prefix) {
  if (!s.starts_with(prefix)) return false;
  s.remove_prefix(prefix.size());
  return true;
}

std::optional<Projection> take_projection(std::string_view& s) {
  // Longest first: "gate_up" before "gate".
  if (take(s, "ffn_gate_up")) return Projection::kGateUp;
  if (take(s, "ffn_gate")) return Projection::kGate;
  if (take(s, "ffn_up")) return Projection::kUp;
  if (take(s, "ffn_down")) return Projection::kDown;
  return std::nullopt;
}

}  // namespace

const char* projection_name(Projection p) {
  switch (p) {
    case Projection::kGate: return "gate";
    case Projection::kUp: return "up";
    case Projection::kDown: return "down";
    case Projection::kGateUp: return "gate_up";
  }
  return "?";
}

std::optional<uint32_t> layer_of(std::string_view name) {
  if (!take(name, "blk.")) return std::nullopt;
  auto n = take_number(name);
  if (!n || !name.starts_with('.')) return std::nullopt;
  return n;
}

std::optional<ExpertName> parse_expert_name(std::string_view name) {
  if (!take(name, "blk.")) return std::nullopt;
  auto layer = take_number(name);
  if (!layer || !take(name, ".")) return std::nullopt;
  auto proj = take_projection(name);
  if (!proj) return std::nullopt;
  if (name == "_exps.weight") return ExpertName{*layer, *proj, true, 0};
  if (!take(name, ".")) return std::nullopt;
  auto expert = take_number(name);
  if (!expert || name != ".weight") return std::nullopt;
  if (*proj == Projection::kGateUp) return std::nullopt;  // no per-expert fused form exists
  return ExpertName{*layer, *proj, false, *expert};
}

}  // namespace gpunvme::model
