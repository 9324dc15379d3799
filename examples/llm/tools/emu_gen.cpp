#include "examples/llm/tools/emu_gen.h"

#include <pthread.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <exception>
#include <map>
#include <mutex>
#include <stdexcept>
#include <thread>

#include "host/emulator/config.h"
#include "host/text/human_bytes.h"
#include "host/text/numbers.h"
#include "runtime/model/crc32c.h"

namespace gpunvme::llm::gen {
namespace {

constexpr uint64_t kPieceBytes = 64u << 20;  // CRC work item; divides every chunk (kMinChunkShift)
constexpr size_t kGenBuffer = 1u << 20;

uint32_t thread_count(uint32_t threads) { return threads ? threads : std::max(1u, std::thread::hardware_concurrency()); }

double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + ts.tv_nsec * 1e-9;
}

// Runs fn(t) on `n` threads and rethrows the first exception.
template <class Fn>
void on_threads(uint32_t n, Fn fn) {
  std::vector<std::thread> pool;
  std::vector<std::exception_ptr> errors(n);
  for (uint32_t t = 0; t < n; ++t)
    pool.emplace_back([&, t] {
      try {
        fn(t);
      } catch (...) {
        errors[t] = std::current_exception();
      }
    });
  for (std::thread& th : pool) th.join();
  for (const std::exception_ptr& e : errors)
    if (e) std::rethrow_exception(e);
}

// The keys of an emu:gen device string, checked.
struct GenParams {
  Shape shape;
  uint32_t type = 0;
  uint64_t seed = 1;  // llm_make_model's --seed default
};

GenParams parse_keys(const emu::GenKeys& keys) {
  GenParams p;
  bool shape = false, type = false;
  for (const auto& [k, v] : keys) {
    if (k == "shape") {
      p.shape = shape_named(v);
      shape = true;
    } else if (k == "type") {
      p.type = type_named(v);
      type = true;
    } else if (k == "model_seed") {
      try {
        p.seed = text::parse_u64("model_seed", v);
      } catch (const text::ParseError& e) {
        throw std::invalid_argument(e.what());
      }
    }
  }
  if (!shape || !type)
    throw std::invalid_argument("emu:gen needs shape= and type= (e.g. emu:gen,shape=tiny,type=q4_k); shapes: " + shape_names());
  return p;
}

// Every program's opens of the same keys share one image: its CRC pass runs once per process.
std::shared_ptr<const DeployedModelImage> shared_image(const GenParams& p, uint32_t lba) {
  static std::mutex mu;
  static std::map<std::string, std::shared_ptr<const DeployedModelImage>> opened;
  const std::string key = p.shape.name + "/" + std::to_string(p.type) + "/" + std::to_string(p.seed) + "/" + std::to_string(lba);
  std::lock_guard<std::mutex> lock(mu);
  auto& slot = opened[key];
  if (!slot) slot = std::make_shared<const DeployedModelImage>(p.shape, p.type, p.seed, lba);
  return slot;
}

[[maybe_unused]] const bool registered = emu::register_generator(emu::Generator{
    {"shape", "type", "model_seed"},
    "shape=NAME (" + shape_names() + "), type=q4_k|q6_k, model_seed=S (default 1): the model llm_make_model "
    "--shape NAME --type T --seed S writes, with its deploy record",
    [](const emu::GenKeys& keys, uint32_t lba) {
      const GenParams p = parse_keys(keys);
      const GeneratedModel m(model_layout(p.shape, p.type, model_name(p.shape, p.type)), p.seed, 1);
      return DeployedModelImage::image_bytes(m.size(), lba);
    },
    [](const emu::GenKeys& keys, uint32_t lba) -> std::shared_ptr<const emu::GeneratedBytes> {
      return shared_image(parse_keys(keys), lba);
    }});

}  // namespace

std::vector<uint32_t> parallel_chunk_crcs(const GeneratedModel& model, uint32_t chunk_shift, uint32_t threads) {
  const uint64_t bytes = model.size(), chunk = uint64_t(1) << chunk_shift;
  if (chunk % kPieceBytes) throw std::invalid_argument("chunks must be whole 64 MiB pieces");
  const uint64_t pieces = (bytes + kPieceBytes - 1) / kPieceBytes;
  std::vector<uint32_t> piece_crc(pieces, 0);
  std::atomic<uint64_t> next{0};
  on_threads(std::min<uint64_t>(thread_count(threads), std::max<uint64_t>(pieces, 1)), [&](uint32_t) {
    std::vector<uint8_t> buf(kGenBuffer);
    for (uint64_t i; (i = next.fetch_add(1)) < pieces;) {
      const uint64_t end = std::min(bytes, (i + 1) * kPieceBytes);
      uint32_t crc = 0;
      for (uint64_t off = i * kPieceBytes; off < end;) {
        const size_t n = size_t(std::min<uint64_t>(buf.size(), end - off));
        model.generate(off, buf.data(), n);
        crc = model::crc32c(buf.data(), n, crc);
        off += n;
      }
      piece_crc[i] = crc;
    }
  });
  // Pieces in order into their chunks: crc(A || B) from crc(A), crc(B) and |B|.
  std::vector<uint32_t> crcs((bytes + chunk - 1) / chunk, 0);
  for (uint64_t i = 0; i < pieces; ++i) {
    const uint64_t len = std::min(bytes, (i + 1) * kPieceBytes) - i * kPieceBytes;
    uint32_t& c = crcs[i * kPieceBytes / chunk];
    c = (i * kPieceBytes) % chunk == 0 ? piece_crc[i] : model::crc32c_combine(c, piece_crc[i], len);
  }
  return crcs;
}

uint64_t DeployedModelImage::image_bytes(uint64_t model_bytes, uint32_t lba_bytes) {
  return model::default_model_start_lba(lba_bytes) * lba_bytes + (model_bytes + lba_bytes - 1) / lba_bytes * lba_bytes;
}

DeployedModelImage::DeployedModelImage(const Shape& shape, uint32_t type, uint64_t seed, uint32_t lba_bytes, uint32_t threads)
    : model_(model_layout(shape, type, model_name(shape, type)), seed, 1) {
  // The record deploy_source writes for this model on one namespace (runtime/deploy/deploy.cpp).
  record_.model_start_lba = model::default_model_start_lba(lba_bytes);
  record_.model_bytes = model_.size();
  record_.lba_size = lba_bytes;
  record_.chunk_shift = model::choose_chunk_shift(record_.model_bytes, lba_bytes);
  record_.name = model_name(shape, type);
  const auto t0 = std::chrono::steady_clock::now();
  const bool say = record_.model_bytes > (4ull << 30);  // seconds: say why the open waits
  const uint32_t n = thread_count(threads);
  if (say)
    std::fprintf(stderr, "emu:gen: checksumming %s (%s) for its deploy record on %u threads...\n", record_.name.c_str(),
                 text::human_bytes(double(record_.model_bytes)).c_str(), n);
  record_.chunk_crcs = parallel_chunk_crcs(model_, record_.chunk_shift, n);
  checksum_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (say) std::fprintf(stderr, "emu:gen: checksummed in %.1f s\n", checksum_seconds_);
  record_block_ = model::serialize_record(record_);
  start_ = record_.model_start_lba * lba_bytes;
  bytes_ = image_bytes(record_.model_bytes, lba_bytes);
}

void DeployedModelImage::read(uint64_t offset, void* dst, size_t len) const {
  auto* out = static_cast<uint8_t*>(dst);
  const uint64_t end = offset + len, model_end = start_ + model_.size();
  // [0, block): the record; [block, start): zeros; [start, model_end): the model; then zeros.
  auto part = [&](uint64_t lo, uint64_t hi, auto fill) {
    lo = std::max(lo, offset);
    hi = std::min(hi, end);
    if (lo < hi) fill(lo, hi, out + (lo - offset));
  };
  const uint64_t block = record_block_.size();
  part(0, block, [&](uint64_t lo, uint64_t hi, uint8_t* p) { std::memcpy(p, record_block_.data() + lo, hi - lo); });
  part(block, start_, [](uint64_t lo, uint64_t hi, uint8_t* p) { std::memset(p, 0, hi - lo); });
  part(start_, model_end, [&](uint64_t lo, uint64_t hi, uint8_t* p) { model_.generate(lo - start_, p, hi - lo); });
  part(model_end, UINT64_MAX, [](uint64_t lo, uint64_t hi, uint8_t* p) { std::memset(p, 0, hi - lo); });
}

GenerationRate measure_generation(const GeneratedModel& model, uint32_t threads, double seconds, bool checksum) {
  GenerationRate r;
  r.threads = thread_count(threads);
  std::atomic<uint64_t> bytes{0};
  std::vector<double> cpu(r.threads, 0);
  const uint64_t size = model.size();
  const auto t0 = std::chrono::steady_clock::now();
  on_threads(r.threads, [&](uint32_t t) {
    std::vector<uint8_t> buf(kGenBuffer);
    const double c0 = thread_cpu_seconds();
    uint64_t off = size / r.threads * t, mine = 0;  // each thread walks its own part of the model
    uint32_t sink = 0;
    while (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < seconds) {
      const size_t n = size_t(std::min<uint64_t>(buf.size(), size - off));
      model.generate(off, buf.data(), n);
      if (checksum) sink ^= model::crc32c(buf.data(), n);
      mine += n;
      off = off + n < size ? off + n : 0;
    }
    cpu[t] = thread_cpu_seconds() - c0;
    if (sink == 0x12345678u) std::fputc(0, stderr);  // keeps the CRC from being optimised away
    bytes += mine;
  });
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.bytes = bytes;
  for (double c : cpu) r.cpu_seconds += c;
  return r;
}

std::shared_ptr<const DeployedModelImage> generated_image(const std::string& device) {
  if (!emu::is_emu_device(device)) return nullptr;
  const emu::ControllerConfig cfg = emu::parse_emu_device(device);
  for (const emu::NamespaceConfig& ns : cfg.namespaces)
    if (ns.backing == emu::Backing::kGenerated) return shared_image(parse_keys(ns.gen), ns.lba_bytes);
  return nullptr;
}

}  // namespace gpunvme::llm::gen
