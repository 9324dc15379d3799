// The GPU suite's main: with no usable CUDA device it runs nothing and exits 77, which meson counts
// as SKIP, so a machine without a GPU reports the suite skipped instead of passed.
#include <catch2/catch_session.hpp>

#include <cstdio>
#include <cstring>
#include <string>

#include "host/cuda_device.h"

int main(int argc, char** argv) {
  bool listing = false;  // --list-tests and friends run nothing, so they work without a GPU
  for (int i = 1; i < argc; ++i) listing = listing || std::strncmp(argv[i], "--list", 6) == 0;
  std::string why;
  if (!listing && !gpunvme::host::cuda_device_available(&why)) {
    std::printf("GPU suite skipped: no CUDA GPU (%s); exit 77 (meson: SKIP)\n", why.c_str());
    return 77;
  }
  return Catch::Session().run(argc, argv);
}
