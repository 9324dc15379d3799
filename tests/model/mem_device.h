// An in-memory "namespace" behind the BlockIo callbacks, for record/detect and write-guard tests.
#pragma once
#include <cstring>
#include <stdexcept>
#include <vector>

#include "runtime/model/block_io.h"

namespace model_test {

struct MemDevice {
  std::vector<uint8_t> bytes;
  gpunvme::model::BlockIo io;
  uint64_t reads = 0;

  MemDevice(uint32_t lba_size, uint64_t n_lbas) : bytes(lba_size * n_lbas, 0) {
    io.lba_size = lba_size;
    io.n_lbas = n_lbas;
    io.name = "memdev";
    io.read = [this](uint64_t lba, uint32_t n, void* dst) {
      check(lba, n);
      ++reads;
      std::memcpy(dst, bytes.data() + lba * io.lba_size, uint64_t{n} * io.lba_size);
    };
    io.write = [this](uint64_t lba, uint32_t n, const void* src) {
      check(lba, n);
      std::memcpy(bytes.data() + lba * io.lba_size, src, uint64_t{n} * io.lba_size);
    };
  }
  void check(uint64_t lba, uint32_t n) const {
    if (lba + n > io.n_lbas) throw std::out_of_range("MemDevice: access past the end");
  }
  // Like `dd if=file of=dev bs=... seek=...`: put bytes at a block.
  void put(uint64_t lba, const std::vector<uint8_t>& data) {
    std::memcpy(bytes.data() + lba * io.lba_size, data.data(), data.size());
  }
};

}  // namespace model_test
