// What the striped-set engine tests share (tests/llm/test_striped.cpp on the CPU executor,
// tests/gpu/test_llm_striped.cpp on the GPU): member images in one temporary directory, and a
// generated model written onto them by llm_make_model's writer (deploy_source): one namespace, or a
// striped set laid by Device::create_stripe.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "examples/llm/tools/generated_model.h"
#include "runtime/deploy/deploy.h"
#include "runtime/deploy/device.h"
#include "runtime/gguf/ggml_types.h"
#include "tests/test_files.h"

namespace striped_test {

// Emulated namespaces on image files under one temporary directory, removed at the end of the scope.
struct Images {
  test_files::TempDir dir{"gpunvme-stripe"};

  std::string path(const std::string& name) const { return dir / name; }
  // "emu:DIR/NAME" followed by `keys` (",size=16M,lba=4096").
  std::string image(const std::string& name, const std::string& keys = "") const { return "emu:" + path(name) + keys; }
  // PREFIX0.img ... PREFIX{n-1}.img, each with `keys`.
  std::vector<std::string> devices(const std::string& prefix, uint32_t n, const std::string& keys = "") const {
    std::vector<std::string> v;
    for (uint32_t i = 0; i < n; ++i) v.push_back(image(prefix + std::to_string(i) + ".img", keys));
    return v;
  }
};

// `shape` with Q4_K matrices and weights from `seed`, written onto `devices`: one namespace, or (two
// or more) a striped set with stripe units of `unit` bytes, as llm_make_model writes them.
inline void write_model(const std::vector<std::string>& devices, uint64_t unit, const gpunvme::llm::gen::Shape& shape,
                        uint64_t seed) {
  using namespace gpunvme;
  const auto layout = llm::gen::model_layout(shape, uint32_t(gguf::GgmlType::Q4_K), shape.name);
  llm::gen::GeneratedModel model(layout, seed, 2);
  auto dev = devices.size() > 1 ? deploy::Device::create_stripe(devices, {unit}, false)
                                : std::make_unique<deploy::Device>(devices[0]);
  deploy::deploy_source(*dev, model, shape.name, {});
}

}  // namespace striped_test
