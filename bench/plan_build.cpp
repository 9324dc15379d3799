// Plan build time and PRP memory for a 70B-class layout: 80 layers of ~669 MB (a synthetic LBA
// map: per layer the tensors of a Llama-2-70B Q4_K_M-sized block, with unaligned starts), two
// streaming slots, templates for every (layer, slot), at a few per-command limits.
// Targets (issue 6): build < 50 ms, PRP memory < 0.5% of the model.
//   plan_build [--layers 80] [--layer-mb 669] [--lba 512] [--json]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "runtime/cli/args.h"
#include "runtime/cli/tool_main.h"
#include "runtime/plan/command_plan.h"
#include "runtime/plan/prp_table.h"

using namespace gpunvme;

namespace {

const cli::Help kHelp = {
    "usage: plan_build [--layers N] [--layer-mb MB] [--lba 512|4096] [--json]\n"
    "\n"
    "Times building the command plan (runtime/plan) of a 70B-class layout and reports its PRP memory, at a\n"
    "few per-command limits. Targets: build < 50 ms, PRP memory < 0.5 % of the model.\n"
    "\n"
    "  --layers N       layers (default 80)\n"
    "  --layer-mb MB    bytes per layer in 10^6 (default 669: a Llama-2-70B Q4_K_M block)\n"
    "  --lba 512|4096   block size (default 512)\n"
    "  --json           one JSON object instead of the table\n",
    ""};

int run(int argc, char** argv) {
  const cli::Args args(argc, argv, 1, {"layers", "layer-mb", "lba"}, {"json"});
  if (args.help_asked()) return args.print_help("plan_build", kHelp);
  if (!args.positional().empty()) throw cli::UsageError("unexpected argument '" + args.positional()[0] + "'");
  const uint32_t layers = args.get_u32("layers", 80);
  const double layer_mb = args.get_double("layer-mb", 669);
  const uint32_t lba = args.get_u32("lba", 512);
  const bool json = args.has("json");
  if (layers == 0 || (lba != 512 && lba != 4096)) throw cli::UsageError("--layers must be at least 1, --lba 512 or 4096");
  const uint64_t page = 4096;
  // Relative tensor sizes of one Llama-2-70B block (attn_norm, q, k, v, o, ffn_norm, gate, up, down).
  const double share[] = {0.00001, 0.1210, 0.0151, 0.0151, 0.1210, 0.00001, 0.2426, 0.2426, 0.2426};
  const uint64_t layer_bytes = uint64_t(layer_mb * 1e6);
  std::vector<std::vector<model::Extent>> map(layers);
  uint64_t dev = 1ull << 20;  // model at 1 MiB
  uint64_t model_bytes = 0;
  for (uint32_t l = 0; l < layers; ++l) {
    for (double s : share) {
      const uint64_t n = uint64_t(layer_bytes * s) / 32 * 32 + 32;  // GGUF 32-byte alignment
      model::Extent e;
      e.first_lba = dev / lba;
      e.byte_in_first = uint32_t(dev % lba);
      e.byte_length = n;
      e.lba_count = (dev + n + lba - 1) / lba - e.first_lba;
      map[l].push_back(e);
      dev += n;
      model_bytes += n;
    }
  }
  uint64_t slot_bytes = 0;
  for (const auto& L : map) slot_bytes = std::max(slot_bytes, plan::packed_bytes(L, lba, page));
  if (!json)
    std::printf("layout: %u layers x %.1f MB = %.2f GB, LBA %u, slot %.1f MB, 2 slots\n", layers,
                model_bytes / 1e6 / layers, model_bytes / 1e9, lba, slot_bytes / 1e6);
  if (json) std::printf("{\"layers\":%u,\"model_bytes\":%llu,\"runs\":[", layers, (unsigned long long)model_bytes);
  bool all_ok = true;
  const uint32_t caps_kib[] = {128, 512, 1024, 2048};
  for (size_t ci = 0; ci < 4; ++ci) {
    const uint32_t max_blocks = uint32_t(uint64_t(caps_kib[ci]) * 1024 / lba);
    double best_ms = 1e30;
    uint64_t commands = 0, prp = 0, templ = 0;
    for (int rep = 0; rep < 5; ++rep) {
      const auto t0 = std::chrono::steady_clock::now();
      std::vector<plan::PrpTable> tables;
      for (int s = 0; s < 2; ++s)
        tables.push_back(plan::PrpTable::in_host_memory(host::DmaTranslation::contiguous(0x100000000ull * (s + 1)),
                                                        slot_bytes, page, 0x4000000000ull * (s + 1)));
      std::vector<plan::CommandPlan> plans;
      plans.reserve(size_t(layers) * 2);
      const plan::PlanGeometry g{1, lba, max_blocks};
      for (uint32_t l = 0; l < layers; ++l)
        for (int s = 0; s < 2; ++s) plans.push_back(plan::build_plan(map[l], g, tables[s], page));
      const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      if (ms < best_ms) best_ms = ms;
      commands = 0;
      templ = 0;
      for (const auto& p : plans) {
        commands += p.commands.size();
        templ += p.commands.size() * sizeof(nvme::SubmissionEntry);
      }
      prp = tables[0].list_bytes() + tables[1].list_bytes();
    }
    const double prp_pct = 100.0 * prp / model_bytes, templ_pct = 100.0 * templ / model_bytes;
    const bool ok = best_ms < 50 && prp_pct < 0.5;
    all_ok = all_ok && ok;
    if (json)
      std::printf("%s{\"max_command_kib\":%u,\"build_ms\":%.2f,\"commands\":%llu,\"prp_bytes\":%llu,\"prp_pct\":%.5f,"
                  "\"template_bytes\":%llu,\"template_pct\":%.4f,\"ok\":%s}",
                  ci ? "," : "", caps_kib[ci], best_ms, (unsigned long long)commands, (unsigned long long)prp, prp_pct,
                  (unsigned long long)templ, templ_pct, ok ? "true" : "false");
    else
      std::printf("max %4u KiB/command: build %7.2f ms (best of 5), %7llu commands, PRP lists %.2f MB = %.4f%% of "
                  "the model, templates %.1f MB = %.3f%%  %s\n",
                  caps_kib[ci], best_ms, (unsigned long long)commands, prp / 1e6, prp_pct, templ / 1e6, templ_pct,
                  ok ? "OK (< 50 ms, < 0.5%)" : "MISSES the target");
  }
  if (json) std::printf("],\"ok\":%s}\n", all_ok ? "true" : "false");
  return all_ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) { return cli::run_tool("plan_build", kHelp, [&] { return run(argc, argv); }); }
