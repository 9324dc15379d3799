// llm_make_model: a full-size model with random but valid weights, generated and written straight
// onto a namespace (through `gpunvme deploy`'s writer, record included: `llm` finds it there) or into a
// GGUF file. No temporary file: blocks are made in parallel threads while the previous piece is written.
//
//   llm_make_model --shape llama3-70b --type q6_k --device emu:/dev/shm/m.img,size=60G
//   llm_make_model --shape tiny --type q4_k --out /tmp/tiny.gguf
//   llm_make_model --shape gemma3-270m --type q8_0 --out /tmp/gemma3.gguf
//   llm_make_model --vocab-only-from gemma-3-270m-it-Q4_K_M.gguf --out /tmp/gemma3-vocab.gguf
//   llm_make_model --shape gemma3-270m --type q4_k --vocab-from /tmp/gemma3-vocab.gguf --out /dev/shm/g.gguf
//   llm_make_model --shape gpt-oss-120b --type mxfp4 --device emu:/dev/shm/g.img,size=64G
//   llm_make_model --shape llama3-70b --type q6_k --device emu:/dev/shm/s0.img,size=30G --device emu:/dev/shm/s1.img,size=30G
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>
#include <stdexcept>
#include <thread>
#include <vector>

#include "examples/llm/tools/emu_gen.h"
#include "examples/llm/tools/generated_model.h"
#include "examples/llm/tools/vocab_copy.h"
#include "host/open_device.h"
#include "host/text/human_bytes.h"
#include "runtime/cli/args.h"
#include "runtime/deploy/deploy.h"
#include "runtime/deploy/progress.h"
#include "runtime/deploy/safety.h"
#include "runtime/deploy/stop_signal.h"
#include "runtime/gguf/ggml_types.h"
#include "runtime/gguf/gguf_file.h"
#include "runtime/guard/output_file.h"
#include "runtime/guard/write_guard.h"
#include "runtime/model/stripe.h"

using namespace gpunvme;

namespace {

const cli::Help kHelp = {
    "usage: llm_make_model --shape NAME --type T (--device DEV [--device DEV ...] | --out FILE | --rate) [--seed S]\n"
    "                      [--threads N] [--stripe-unit SIZE] [--vocab-from FILE] [--allow-write] [--force] [--progress]\n"
    "       llm_make_model --vocab-only-from FILE --out FILE [--force]\n"
    "\n"
    "Writes a full-size model of random, valid weights, each byte range the same every time (so verify holds):\n"
    "  --shape NAME   llama: llama3-70b (Q6_K: 57 GB), llama3-8b (Q4_K: 4.5 GB), mixtral-8x7b (Q4_K: 26 GB),\n"
    "                 qwen3-30b-a3b-llama (Q4_K: 17.0 GB; earlier benchmarks' stand-in); qwen3moe: qwen3-30b-a3b\n"
    "                 (Q4_K: 17.2 GB), qwen3-235b-a22b (Q4_K: 132 GB); gpt-oss: gpt-oss-20b (MXFP4: 12.1 GB),\n"
    "                 gpt-oss-120b (MXFP4: 63.4 GB); gemma3: gemma3-270m (Q8_0: 285 MB); a few MB, for tests:\n"
    "                 tiny, tiny-moe, tiny-qwen3moe, tiny-gpt-oss, tiny-gemma3\n"
    "  --type T       q4_k, q6_k, q8_0: every matrix (rows not whole 256-blocks: Q5_0, Q8_0, as llama.cpp does);\n"
    "                 mxfp4: MXFP4 experts, Q8_0 elsewhere, as gpt-oss is published (gpt-oss takes only it). Norms: F32\n"
    "  --device DEV   write onto a namespace with a deploy record (as `gpunvme deploy`): `llm --device DEV`\n"
    "                 finds it (an emu: image needs size=60G for llama3-70b Q6_K); repeated: a striped set\n"
    "  --out FILE     write a GGUF file instead (a file holding a deployed model, a filesystem or other data\n"
    "                 that is not a GGUF is refused unless --force)\n"
    "  --seed S       the weights' seed (default 1)\n"
    "  --vocab-from FILE  every tokenizer.* key of another GGUF (its token count the shape's): text in and out\n"
    "  --vocab-only-from FILE  a GGUF (--out) of FILE's tokenizer.* keys alone, for --vocab-from elsewhere\n"
    "  --threads N    generator threads (default: every core)\n"
    "  --progress     a progress line even when stderr is not a terminal\n",
    "\n  --device ...   repeated: a striped set (RAID-0) over those namespaces, in that order: each gets a stripe\n"
    "                 record at LBA 0 naming the set and its place, the model is laid unit by unit over their\n"
    "                 data (1 MiB in); `llm --device M1 --device M2 ...` streams from all at once. Each member\n"
    "                 needs 1/N of the model plus 1 MiB (size=30G each for llama3-70b Q6_K over 2)\n"
    "  --stripe-unit SIZE  bytes per member before the next one (a multiple of the LBA size). Default: a set\n"
    "                 laid in this order keeps its unit; a new one gets the model's: a quarter of its smallest\n"
    "                 expert slice, 128K-1M (1M dense; model::default_stripe_unit)\n"
    "  --vocab-from FILE  the vocabulary of another GGUF: every tokenizer.* key (tokens, scores, merges, special\n"
    "                 ids, chat template) copied, so text goes in and out as with that model (default: none,\n"
    "                 prompts are token ids). Its token count must equal the shape's vocabulary\n"
    "  --vocab-only-from FILE  write (--out) a GGUF of FILE's tokenizer.* keys alone, for --vocab-from: a few\n"
    "                 MB where the model is hundreds (Gemma 3 270M's: 6.2 MiB)\n"
    "  --rate         write nothing: measure the generator on this machine (GB/s and CPU s per GB on 1 and\n"
    "                 on --threads threads; with the CRC-32C, the rate of emu:gen's checksum pass at open)\n" +
        std::string("\n") + guard::kWriteFlagsHelp + "\n" + host::device_string_help()};

uint32_t parse_type(const std::string& t) {
  try {
    return llm::gen::type_named(t);
  } catch (const std::invalid_argument& e) {
    throw cli::UsageError(std::string("--") + e.what());
  }
}

// The whole source into a file, in 64 MiB pieces, under the output rule (runtime/guard/output_file.h):
// never a block device, and in place only once complete.
void write_file(gguf::ByteSource& src, const std::string& path, const deploy::ProgressFn& progress) {
  guard::OutputFile out = guard::OutputFile::open(path, {}, "--out");
  std::vector<uint8_t> buf(64u << 20);
  for (uint64_t off = 0; off < src.size();) {
    const size_t n = src.read(off, buf.data(), buf.size());
    if (n == 0) throw std::runtime_error("the generator returned no bytes at offset " + std::to_string(off));
    out.write(buf.data(), n);
    off += n;
    if (progress) progress(off, src.size());
  }
  out.commit();
}

// --out replaces the whole file: one that holds a deployed model (an emu: image), a set member, a
// filesystem or other data is refused as deploy refuses such a device (deploy/safety.h), unless --force.
void check_out_target(const std::string& path, bool force) {
  const std::vector<deploy::Signature> found = deploy::scan_file(path);
  if (found.empty() || force) return;
  throw deploy::RefusedError("refusing to write over " + path + ": it holds " + deploy::signature_list(found, 512) +
                                 ", and --out replaces the whole file with the generated GGUF. Give another path, or "
                                 "add --force to overwrite it",
                             found);
}

// --rate: the generator's rate here, the number that says whether emu:gen or the emulator limits a cell.
int measure(const llm::gen::GeneratedModel& model, const std::string& name, uint32_t threads) {
  const llm::gen::GenerationRate one = llm::gen::measure_generation(model, 1, 2.0);
  const llm::gen::GenerationRate all = llm::gen::measure_generation(model, threads, 2.0);
  const llm::gen::GenerationRate crc = llm::gen::measure_generation(model, threads, 2.0, true);
  auto line = [](const char* what, const llm::gen::GenerationRate& r) {
    std::printf("  %-26s %7.2f GB/s on %2u thread%s (%.2f GB/s each), %.3f CPU s per GB\n", what, r.bytes_per_second() / 1e9,
                r.threads, r.threads == 1 ? " " : "s", r.bytes_per_second() / 1e9 / r.threads, r.cpu_seconds_per_gb());
  };
  std::printf("%s, generated on read (emu:gen):\n", name.c_str());
  line("generation", one);
  line("generation", all);
  line("generation + CRC-32C", crc);
  std::printf("  emu:gen's checksum pass at open: about %.1f s for these %s on this machine\n",
              double(model.size()) / crc.bytes_per_second(), text::human_bytes(double(model.size())).c_str());
  return 0;
}

// --vocab-only-from: the vocabulary alone, under the same output rule as a model.
int write_vocab_only(const cli::Args& args) {
  if (!args.has("out") || args.has("device") || args.has("shape") || args.has("type") || args.has("vocab-from") || args.has("rate"))
    throw cli::UsageError("--vocab-only-from writes a vocabulary: give --out FILE and no --shape, --type, --device, --vocab-from or --rate");
  try {
    const gguf::builder::Built vocab = llm::gen::vocab_only(args.get("vocab-only-from"));
    check_out_target(args.get("out"), args.has("force"));
    guard::OutputFile out = guard::OutputFile::open(args.get("out"), {}, "--out");
    out.write(vocab.bytes.data(), vocab.bytes.size());
    out.commit();
    std::printf("wrote the vocabulary of %s to %s (%s)\n", args.get("vocab-only-from").c_str(), args.get("out").c_str(),
                text::human_bytes(double(vocab.bytes.size())).c_str());
  } catch (const std::invalid_argument& e) {
    throw cli::UsageError(e.what());
  }
  return 0;
}

int run(const cli::Args& args) {
  if (args.has("vocab-only-from")) return write_vocab_only(args);
  if (!args.has("shape") || !args.has("type")) throw cli::UsageError("give --shape and --type");
  if (args.has("rate") && (args.has("device") || args.has("out"))) throw cli::UsageError("--rate writes nothing: give no --device or --out");
  if (!args.has("rate") && args.has("device") == args.has("out")) throw cli::UsageError("give one of --device DEV and --out FILE");
  if (args.has("out")) check_out_target(args.get("out"), args.has("force"));
  const std::vector<std::string> devices = args.all("device");
  if (args.has("stripe-unit") && devices.size() < 2)
    throw cli::UsageError("--stripe-unit needs a striped set: give --device once per member (2 or more)");
  llm::gen::Shape shape;
  try {
    shape = llm::gen::shape_named(args.get("shape"));
  } catch (const std::invalid_argument& e) {
    throw cli::UsageError(std::string("--shape: ") + e.what());
  }
  const std::string type_text = args.get("type");
  const uint32_t type = parse_type(type_text);
  const std::string name = llm::gen::model_name(shape, type);
  std::vector<llm::gen::KvWriter> vocab;
  if (args.has("vocab-from")) {
    try {
      vocab = llm::gen::vocab_from(args.get("vocab-from"), shape.vocab, shape.name);
    } catch (const std::invalid_argument& e) {
      throw cli::UsageError(e.what());
    }
  }
  llm::gen::ModelLayout layout;
  try {
    layout = llm::gen::model_layout(shape, type, name, vocab);
  } catch (const std::invalid_argument& e) {  // a shape and type that do not go together
    throw cli::UsageError(std::string("--type ") + type_text + ": " + e.what());
  }
  llm::gen::GeneratedModel model(layout, args.get_u64("seed", 1), args.get_u32("threads", 0));
  if (args.has("rate")) {
    const uint32_t threads = args.get_u32("threads", 0);
    return measure(model, name, threads ? threads : std::max(1u, std::thread::hardware_concurrency()));
  }
  std::printf("%s: %u layers, %zu tensors, %s (%llu bytes)\n", name.c_str(), shape.layers, layout.tensors.size(),
              text::human_bytes(double(model.size())).c_str(), (unsigned long long)model.size());
  std::fflush(stdout);
  deploy::ProgressLine bar("make-model", args.has("progress") || isatty(2));
  const auto t0 = std::chrono::steady_clock::now();
  if (args.has("out")) {
    write_file(model, args.get("out"), bar.fn());
  } else {
    deploy::report_stop_signals("llm_make_model");  // before the devices are opened, as gpunvme deploy does
    for (const std::string& device : devices)
      guard::check_write_allowed(device, {args.has("allow-write"), args.has("force")},
                                 devices.size() > 1 ? "llm_make_model writes a stripe record at LBA 0 and model stripes"
                                                    : "llm_make_model writes a model and a deploy record at LBA 0");
    std::unique_ptr<deploy::Device> dev;
    if (devices.size() > 1) {
      deploy::StripeUnit unit{std::nullopt, model::default_stripe_unit(gguf::GgufFile::read(model))};
      if (args.has("stripe-unit")) unit.given = args.get_size("stripe-unit", 0);
      dev = deploy::Device::create_stripe(devices, unit, args.has("force"));
      std::printf("striped set of %zu members, stripe unit %s, %s of logical volume\n", devices.size(),
                  dev->stripe_unit_text().c_str(), text::human_bytes(double(dev->capacity_bytes())).c_str());
    } else {
      dev = std::make_unique<deploy::Device>(devices[0]);
    }
    deploy::DeployOptions opt;
    opt.force = args.has("force");
    opt.piece_bytes = 64u << 20;
    opt.progress = bar.fn();
    deploy::deploy_source(*dev, model, name, opt);
  }
  bar.finish();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("wrote %s to %s in %.1f s (%.2f GB/s)\n", text::human_bytes(double(model.size())).c_str(),
              (args.has("out") ? args.get("out") : devices.size() > 1 ? std::to_string(devices.size()) + " striped members" : devices[0]).c_str(), s, s > 0 ? model.size() / s / 1e9 : 0);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const cli::Args args(argc, argv, 1, {"shape", "type", "device", "out", "seed", "threads", "stripe-unit", "vocab-from", "vocab-only-from"},
                         {"allow-write", "force", "progress", "rate"}, {"device"});
    if (args.help_asked()) return args.print_help("llm_make_model", kHelp);
    if (!args.positional().empty()) throw cli::UsageError("unexpected argument '" + args.positional().front() + "'");
    return run(args);
  } catch (const cli::UsageError& e) {
    cli::print_usage_error("llm_make_model", e, kHelp);
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "llm_make_model: %s\n", e.what());
    return 1;
  }
}
