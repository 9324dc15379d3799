// Where GGUF header bytes come from: a host file (pread), a memory buffer, or any "read bytes at
// offset" callback — e.g. blocks read back from the NVMe namespace through our driver.
// The parser only ever asks for the bytes it needs next, so a source never has to hold the file.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>

namespace gpunvme::gguf {

class ByteSource {
 public:
  virtual ~ByteSource() = default;
  // Copies up to `len` bytes at `offset` into `dst`; returns the count copied (short only at the end).
  // Errors (I/O failures) are thrown as GgufError.
  virtual size_t read(uint64_t offset, void* dst, size_t len) = 0;
  // Total bytes available: the file size, or the model's byte length on a device.
  virtual uint64_t size() const = 0;
  // Human-readable origin for error messages ("model.gguf", "memory buffer", "nvme0n1 LBA 2048").
  virtual std::string describe() const = 0;
};

// A byte span owned by the caller. Used by the fuzzer and tests.
class MemorySource final : public ByteSource {
 public:
  explicit MemorySource(std::span<const uint8_t> bytes, std::string name = "memory buffer")
      : bytes_(bytes), name_(std::move(name)) {}
  size_t read(uint64_t offset, void* dst, size_t len) override;
  uint64_t size() const override { return bytes_.size(); }
  std::string describe() const override { return name_; }

 private:
  std::span<const uint8_t> bytes_;
  std::string name_;
};

// A host file read with pread; owns its descriptor (closed in the destructor).
class FileSource final : public ByteSource {
 public:
  explicit FileSource(const std::string& path);
  ~FileSource() override;
  FileSource(const FileSource&) = delete;
  FileSource& operator=(const FileSource&) = delete;
  size_t read(uint64_t offset, void* dst, size_t len) override;
  uint64_t size() const override { return size_; }
  std::string describe() const override { return path_; }

 private:
  std::string path_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

// Adapts a callback. `size` bounds every read (the parser checks counts against it).
class CallbackSource final : public ByteSource {
 public:
  using ReadFn = std::function<size_t(uint64_t offset, void* dst, size_t len)>;
  CallbackSource(ReadFn fn, uint64_t size, std::string name = "callback source")
      : fn_(std::move(fn)), size_(size), name_(std::move(name)) {}
  size_t read(uint64_t offset, void* dst, size_t len) override { return fn_(offset, dst, len); }
  uint64_t size() const override { return size_; }
  std::string describe() const override { return name_; }

 private:
  ReadFn fn_;
  uint64_t size_;
  std::string name_;
};

}  // namespace gpunvme::gguf
