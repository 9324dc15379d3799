// The weight types the engine computes, as one table (ggml's per-type traits in spirit): a row per type
// binds its ggml id to its block struct (blocks.h). Generated from it: the type check (computes), the
// names in messages, both dequantisation dispatches (dequant.h: by a type known at run time, for the CPU
// and the GPU alike, and by a type known when compiling, for the kernels) and the GPU kernels' dispatch
// (with_weight_type). A new type is a row here, its block struct in blocks.h and its dequant_block in
// dequant.h (plus a dequant_group there when its block is not one 32-element group); tests/llm's
// weight-types test then holds its two dequantisations equal and its kernel dispatch present.
#pragma once
#include <array>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "examples/llm/quant/blocks.h"

namespace gpunvme::llm {

// One row of the table: ggml type T stored as blocks B. Elements and bytes per block come from
// runtime/gguf/ggml_types.h's table (ggml's numbers); B's size is held to them here, so a wrong field
// fails to compile.
template <GgmlType T, class B>
struct WeightRow {
  static constexpr GgmlType type = T;
  using Block = B;
  static constexpr uint32_t kElems = gguf::ggml_traits(T).block_size;
  static_assert(sizeof(B) == gguf::ggml_traits(T).type_size, "a block struct's size differs from ggml's bytes per block");
  static_assert(kElems % 32 == 0 || 32 % kElems == 0, "dequant_group's 32-element groups must tile the blocks");
};

template <class... Rows>
struct WeightTable {};

// The table. Order is only the order of the names in messages.
using WeightTypes = WeightTable<
    WeightRow<GgmlType::F32, F32Value>,
    WeightRow<GgmlType::F16, F16Value>,
    WeightRow<GgmlType::BF16, BF16Value>,
    WeightRow<GgmlType::Q8_0, BlockQ8_0>,
    WeightRow<GgmlType::Q4_0, BlockQ4_0>,
    WeightRow<GgmlType::Q5_0, BlockQ5_0>,
    WeightRow<GgmlType::Q4_K, BlockQ4_K>,
    WeightRow<GgmlType::Q5_K, BlockQ5_K>,
    WeightRow<GgmlType::Q6_K, BlockQ6_K>,
    WeightRow<GgmlType::MXFP4, BlockMXFP4>>;  // quant/mxfp4.h (committed as b2648d6 before this table)

// The row of type T, at compile time (a type without a row does not compile).
template <GgmlType T, class Table = WeightTypes>
struct RowOf;
template <GgmlType T, class R, class... Rs>
struct RowOf<T, WeightTable<R, Rs...>>
    : std::conditional_t<R::type == T, std::type_identity<R>, RowOf<T, WeightTable<Rs...>>> {};
template <GgmlType T>
struct RowOf<T, WeightTable<>> {
  static_assert(T != T, "no row for this weight type in WeightTypes (quant/weight_types.h)");
};
template <GgmlType T>
using RowFor = typename RowOf<T>::type;

template <class... Rows>
GPUNVME_HD constexpr bool computes_in(WeightTable<Rows...>, GgmlType t) {
  return ((t == Rows::type) || ...);
}

// The types the engine computes: the table's rows.
GPUNVME_HD constexpr bool computes(GgmlType t) { return computes_in(WeightTypes{}, t); }
static_assert(computes(GgmlType::F32) && !computes(GgmlType::Q2_K));  // and, naming every row: their asserts

template <class... Rows>
std::string type_names_in(WeightTable<Rows...>) {
  std::string s;
  ((s += (s.empty() ? "" : " ") + std::string(gguf::ggml_traits(Rows::type).name)), ...);
  return s;
}

template <class... Rows>
constexpr std::array<GgmlType, sizeof...(Rows)> types_in(WeightTable<Rows...>) {
  return {Rows::type...};
}
// The table's types in its order: what a test of every type iterates (the GPU kernels' tests).
inline constexpr auto kComputedTypes = types_in(WeightTypes{});

// "F32 F16 ... Q6_K": the table's types by ggml's names, for messages that say what the engine computes.
inline std::string computed_type_names() { return type_names_in(WeightTypes{}); }

// The kernels take the weight type as a template argument (gpu_warp.cuh says why); host code picks the
// instantiation with with_weight_type, which calls f(WeightType<t>{}) for the row of t. Its cases are the
// table's rows, the same list as dequant.h's dispatch, so every type the engine loads has a kernel.
template <GgmlType T>
using WeightType = std::integral_constant<GgmlType, T>;

template <class F, class... Rows>
void with_weight_type_in(WeightTable<Rows...>, GgmlType t, F&& f) {
  if (!((t == Rows::type && (f(WeightType<Rows::type>{}), true)) || ...))
    throw std::invalid_argument("no kernel for weight type " + gguf::ggml_type_name(uint32_t(t)) + " (the engine computes " +
                                computed_type_names() + ")");
}

template <class F>
void with_weight_type(GgmlType t, F&& f) {
  with_weight_type_in(WeightTypes{}, t, f);
}

}  // namespace gpunvme::llm
