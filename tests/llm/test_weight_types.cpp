// The weight-type table (examples/llm/quant/weight_types.h) and what is generated from it: the type
// check, the names, the kernel dispatch and both dequantisation dispatches agree for every ggml type, and
// each row's two dequantisations (block, 32-element group) give the same bits on random bytes. A new row
// is tested here without a line of this file changing.
#include <catch2/catch_test_macros.hpp>

#include <cstring>
#include <random>
#include <set>
#include <stdexcept>
#include <vector>

#include "examples/llm/quant/dequant.h"

using namespace gpunvme;
using gguf::GgmlType;

namespace {

template <class... Rows>
std::vector<GgmlType> row_types(llm::WeightTable<Rows...>) {
  return {Rows::type...};
}

// Random bytes for `blocks` blocks of row R: a random half scale is NaN or inf one time in 32, so most
// blocks give finite values (dequant_check.py tries the formats' edge cases against gguf-py).
template <class R>
std::vector<uint8_t> random_row(std::mt19937& rng, uint64_t blocks) {
  std::vector<uint8_t> b(blocks * sizeof(typename R::Block));
  for (auto& v : b) v = uint8_t(rng());
  return b;
}

template <class R>
void check_row_routes(std::mt19937& rng) {
  const uint64_t elems = 512, blocks = elems / R::kElems;
  const std::vector<uint8_t> row = random_row<R>(rng, blocks);
  std::vector<float> by_block(elems), by_group(elems), by_type(elems), by_const(elems);
  for (uint64_t i = 0; i < blocks; ++i) llm::dequant_block(R::type, row.data(), i, by_block.data() + i * R::kElems);
  for (uint64_t g = 0; g < elems / llm::kGroup; ++g) {
    llm::dequant_group(R::type, row.data(), g, by_group.data() + g * llm::kGroup);
    llm::dequant_group_of<R>(row.data(), g, by_type.data() + g * llm::kGroup);
    llm::dequant_group<R::type>(row.data(), g, by_const.data() + g * llm::kGroup);
  }
  INFO("type " << gguf::ggml_type_name(uint32_t(R::type)));
  CHECK(std::memcmp(by_block.data(), by_group.data(), elems * 4) == 0);
  CHECK(std::memcmp(by_group.data(), by_type.data(), elems * 4) == 0);
  CHECK(std::memcmp(by_group.data(), by_const.data(), elems * 4) == 0);
  size_t finite = 0;  // values, not a row of zeros or NaNs that any route would match
  for (float v : by_block) finite += v == v && v != 0.0f && v - v == 0.0f;
  CHECK(finite > elems / 2);
}

template <class... Rows>
void check_routes(llm::WeightTable<Rows...>) {
  std::mt19937 rng(33);
  (check_row_routes<Rows>(rng), ...);
}

}  // namespace

TEST_CASE("every ggml type: computes, the kernel dispatch and the names agree with the table") {
  const std::vector<GgmlType> rows = row_types(llm::WeightTypes{});
  const std::set<GgmlType> table(rows.begin(), rows.end());
  REQUIRE(table.size() == rows.size());  // no type twice
  std::string names;
  for (const auto& info : gguf::ggml_all_types()) {
    INFO("type " << info.name);
    const bool in_table = table.count(info.type) > 0;
    CHECK(llm::computes(info.type) == in_table);
    GgmlType picked{};
    bool called = false;
    auto dispatch = [&] {
      llm::with_weight_type(info.type, [&](auto t) { picked = decltype(t)::value, called = true; });
    };
    if (in_table) {
      CHECK_NOTHROW(dispatch());
      CHECK((called && picked == info.type));
      names += (names.empty() ? "" : " ") + std::string(info.name);
    } else {
      CHECK_THROWS_AS(dispatch(), std::invalid_argument);
      CHECK(!called);
    }
  }
  // The same names, in the table's order.
  std::string listed;
  for (GgmlType t : rows) listed += (listed.empty() ? "" : " ") + gguf::ggml_type_name(uint32_t(t));
  CHECK(llm::computed_type_names() == listed);
  CHECK(listed.size() == names.size());  // and every name once
}

TEST_CASE("a type without a row: the group is NaN, never stale values") {
  float y[llm::kGroup];
  for (float& v : y) v = 1.0f;
  const uint8_t row[256] = {};
  llm::dequant_group(GgmlType::Q2_K, row, 0, y);
  for (float v : y) CHECK(v != v);
}

TEST_CASE("every row: block and group dequantisation give the same bits, by run-time and compile-time type") {
  check_routes(llm::WeightTypes{});
}
