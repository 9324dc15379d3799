#include "examples/llm/tools/emu_gen.h"

#include <pthread.h>

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

#include "host/cpu_clock.h"
#include "host/emulator/config.h"
#include "host/text/human_bytes.h"
#include "host/text/numbers.h"
#include "runtime/gguf/gguf_file.h"
#include "runtime/model/crc32c.h"

namespace gpunvme::llm::gen {
namespace {

constexpr uint64_t kPieceBytes = 64u << 20;  // CRC work item; divides every chunk (kMinChunkShift)
constexpr size_t kGenBuffer = 1u << 20;

uint32_t thread_count(uint32_t threads) { return threads ? threads : std::max(1u, std::thread::hardware_concurrency()); }

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
  uint32_t members = 1, member = 1;  // a striped set's size and this namespace's place in it (1-based)
  uint64_t stripe_unit = 0;  // a striped set's unit: stripe_unit=, else the model's (resolved by parse_keys)
};

uint64_t parse_number(const std::string& key, const std::string& value, uint64_t lo, uint64_t hi) {
  uint64_t v = 0;
  try {
    v = text::parse_u64(key, value);
  } catch (const text::ParseError& e) {
    throw std::invalid_argument(e.what());
  }
  if (v < lo || v > hi)
    throw std::invalid_argument(key + "=" + value + " is not in " + std::to_string(lo) + ".." + std::to_string(hi));
  return v;
}

// model::default_stripe_unit of the generated model, from its header alone.
uint64_t default_unit(const Shape& shape, uint32_t type) {
  GeneratedModel m(model_layout(shape, type, model_name(shape, type)), 1, 1);
  return model::default_stripe_unit(gguf::GgufFile::read(m));
}

GenParams parse_keys(const emu::GenKeys& keys) {
  GenParams p;
  bool shape = false, type = false, member = false;
  for (const auto& [k, v] : keys) {
    if (k == "shape") {
      p.shape = shape_named(v);
      shape = true;
    } else if (k == "type") {
      p.type = type_named(v);
      type = true;
    } else if (k == "model_seed") {
      p.seed = parse_number(k, v, 0, UINT64_MAX);
    } else if (k == "members") {
      p.members = uint32_t(parse_number(k, v, 1, model::kMaxStripeMembers));
    } else if (k == "member") {
      p.member = uint32_t(parse_number(k, v, 1, model::kMaxStripeMembers));
      member = true;
    } else if (k == "stripe_unit") {
      p.stripe_unit = parse_number(k, v, 4096, 1ull << 30);  // bytes; a multiple of the LBA size (make_stripe_geometry)
    }
  }
  if (!shape || !type)
    throw std::invalid_argument("emu:gen needs shape= and type= (e.g. emu:gen,shape=tiny,type=q4_k); shapes: " + shape_names());
  if (p.members > 1 && !member)
    throw std::invalid_argument("members=" + std::to_string(p.members) + " needs member=1.." + std::to_string(p.members) +
                                ": each namespace is one member of the set, given in order");
  if (p.member > p.members)
    throw std::invalid_argument("member=" + std::to_string(p.member) + " is past members=" + std::to_string(p.members));
  // Without stripe_unit=, the unit llm_make_model and deploy give a new set of this model, resolved
  // here, before set_hash and the layout use it: the bytes stay a function of the keys.
  if (p.members > 1 && !p.stripe_unit) p.stripe_unit = default_unit(p.shape, p.type);
  return p;
}

// A striped set's keys name it: its set and deploy ids are a hash of them, so that its members agree.
uint64_t set_hash(const GenParams& p, uint32_t lba, uint64_t salt) {
  const std::string key = p.shape.name + "/" + std::to_string(p.type) + "/" + std::to_string(p.seed) + "/" +
                          std::to_string(p.members) + "/" + std::to_string(lba) +
                          (p.stripe_unit == model::kDefaultStripeUnitBytes ? "" : "/" + std::to_string(p.stripe_unit));
  uint64_t h = 0xCBF29CE484222325ull ^ salt;
  for (unsigned char c : key) h = (h ^ c) * 0x100000001B3ull;
  return h | 1;  // never 0
}

// The deploy id of a generated set's one generation: fixed by its set id.
uint64_t set_hash_id(uint64_t set_id) { return (set_id * 0x9E3779B97F4A7C15ull) | 1; }

// Where the model starts: 1 MiB in on one namespace, right after the record in a set's logical volume
// (as deploy puts it: runtime/deploy/deploy.cpp default_start_lba).
uint64_t model_start_lba(const GenParams& p, uint32_t lba) {
  return p.members > 1 ? std::max<uint64_t>(1, model::kStripedModelStartBytes / lba) : model::default_model_start_lba(lba);
}

// The set's geometry: members just large enough for the logical volume, in whole stripe units.
model::StripeGeometry set_geometry(const GenParams& p, uint32_t lba, uint64_t logical_bytes) {
  const uint64_t unit = p.stripe_unit, unit_blocks = unit / lba;
  const uint64_t logical_blocks = (logical_bytes + lba - 1) / lba;
  const uint64_t per_member = (logical_blocks + p.members - 1) / p.members;
  const uint64_t data_blocks = (per_member + unit_blocks - 1) / unit_blocks * unit_blocks;
  const uint64_t data_start = std::max<uint64_t>(1, model::kStripeDataOffsetBytes / lba);
  return model::make_stripe_geometry(p.members, lba, data_start + data_blocks, unit, set_hash(p, lba, 0));
}

// The model's bytes at its place, with the record: what one namespace, or a set's logical volume, holds.
uint64_t logical_bytes(const GenParams& p, uint32_t lba) {
  const GeneratedModel m(model_layout(p.shape, p.type, model_name(p.shape, p.type)), p.seed, 1);
  return DeployedModelImage::image_bytes(m.size(), lba, model_start_lba(p, lba));
}

// Every program's opens of the same keys share one image: its CRC pass runs once per process.
std::shared_ptr<const DeployedModelImage> shared_image(const GenParams& p, uint32_t lba) {
  static std::mutex mu;
  static std::map<std::string, std::shared_ptr<const DeployedModelImage>> opened;
  const uint64_t start = model_start_lba(p, lba);
  const std::string key = p.shape.name + "/" + std::to_string(p.type) + "/" + std::to_string(p.seed) + "/" +
                          std::to_string(lba) + "/" + std::to_string(start);
  std::lock_guard<std::mutex> lock(mu);
  auto& slot = opened[key];
  if (!slot) slot = std::make_shared<const DeployedModelImage>(p.shape, p.type, p.seed, lba, start);
  return slot;
}

// What one emu:gen namespace serves: the deployed model, or one member of a striped set of it.
std::shared_ptr<const emu::GeneratedBytes> open_namespace(const GenParams& p, uint32_t lba) {
  auto image = shared_image(p, lba);
  if (p.members == 1) return image;
  return std::make_shared<const StripeMemberImage>(image, set_geometry(p, lba, image->bytes()), p.member - 1);
}

[[maybe_unused]] const bool registered = emu::register_generator(emu::Generator{
    {"shape", "type", "model_seed", "members", "member", "stripe_unit"},
    "shape=NAME (" + shape_names() + "), type=q4_k|q6_k|q8_0|mxfp4, model_seed=S (default 1): the model llm_make_model "
    "--shape NAME --type T --seed S writes, with its deploy record; members=N,member=I: member I of a striped set "
    "of it over N namespaces (stripe_unit=BYTES, default the model's: 128 KiB-1 MiB, llm_make_model's)",
    [](const emu::GenKeys& keys, uint32_t lba) {
      const GenParams p = parse_keys(keys);
      const uint64_t bytes = logical_bytes(p, lba);
      if (p.members == 1) return bytes;
      const model::StripeGeometry g = set_geometry(p, lba, bytes);
      return (g.data_start_lba + g.member_data_blocks) * lba;
    },
    [](const emu::GenKeys& keys, uint32_t lba) { return open_namespace(parse_keys(keys), lba); }});

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

uint64_t DeployedModelImage::image_bytes(uint64_t model_bytes, uint32_t lba_bytes, uint64_t start_lba) {
  return start_lba * lba_bytes + (model_bytes + lba_bytes - 1) / lba_bytes * lba_bytes;
}

DeployedModelImage::DeployedModelImage(const Shape& shape, uint32_t type, uint64_t seed, uint32_t lba_bytes,
                                       uint64_t model_start_lba, uint32_t threads)
    : model_(model_layout(shape, type, model_name(shape, type)), seed, 1) {
  // The record deploy_source writes for this model (runtime/deploy/deploy.cpp).
  record_.model_start_lba = model_start_lba ? model_start_lba : model::default_model_start_lba(lba_bytes);
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
  bytes_ = image_bytes(record_.model_bytes, lba_bytes, record_.model_start_lba);
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

StripeMemberImage::StripeMemberImage(std::shared_ptr<const DeployedModelImage> logical, const model::StripeGeometry& g,
                                     uint32_t index)
    : logical_(std::move(logical)), g_(g), index_(index) {
  if (g_.logical_blocks() * g_.lba_size < logical_->bytes())
    throw std::logic_error("emu:gen: the striped set is smaller than its logical volume");
  model::StripeRecord r;
  r.geometry = g_;
  r.member_index = index_;
  r.generation = {1, set_hash_id(g_.set_id)};
  record_block_ = model::serialize_stripe_record(r);
}

void StripeMemberImage::read(uint64_t offset, void* dst, size_t len) const {
  auto* out = static_cast<uint8_t*>(dst);
  const uint64_t data = g_.data_start_lba * g_.lba_size, unit = g_.unit_bytes(), end = offset + len;
  for (uint64_t pos = offset; pos < end;) {
    uint8_t* p = out + (pos - offset);
    if (pos < data) {  // the stripe record, then zeros up to the data region
      const uint64_t n = std::min(end, data) - pos;
      std::memset(p, 0, n);
      if (pos < record_block_.size())
        std::memcpy(p, record_block_.data() + pos, std::min<uint64_t>(n, record_block_.size() - pos));
      pos += n;
      continue;
    }
    // Member data unit `row` is stripe row * members + index of the logical volume (stripe.h).
    const uint64_t k = pos - data, row = k / unit, within = k % unit;
    const uint64_t n = std::min(end - pos, unit - within);
    logical_->read((row * g_.members + index_) * unit + within, p, n);
    pos += n;
  }
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
    const double c0 = host::calling_thread_cpu_seconds();
    uint64_t off = size / r.threads * t, mine = 0;  // each thread walks its own part of the model
    uint32_t sink = 0;
    while (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < seconds) {
      const size_t n = size_t(std::min<uint64_t>(buf.size(), size - off));
      model.generate(off, buf.data(), n);
      if (checksum) sink ^= model::crc32c(buf.data(), n);
      mine += n;
      off = off + n < size ? off + n : 0;
    }
    cpu[t] = host::calling_thread_cpu_seconds() - c0;
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
