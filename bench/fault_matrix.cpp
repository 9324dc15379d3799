// fault_matrix: the CPU half of issue #15's fault matrix as a report. Every fault kind, armed through
// the emu: device string's fault grammar, against every workload; each cell says whether the
// workload recovered with every byte verified, or failed with the expected clear error, and how
// long it took. Exit status 0 only when every cell came out as expected.
#include <cstdio>
#include <string>

#include "bench/fault_matrix_cells.h"
#include "host/emulator/fault_spec.h"
#include "runtime/cli/args.h"
#include "runtime/cli/tool_main.h"

using namespace gpunvme;

namespace {

const cli::Help kHelp = {
    "usage: fault_matrix [--json] [--fault SUBSTRING] [--workload SUBSTRING] [--reads N] [--layers N]\n"
    "                    [--timeout-ms N]\n"
    "\n"
    "Runs each fault kind against each CPU workload on the emulator (emu:ram,size=32M,to=1,mdts=1)\n"
    "and prints one row per cell: recovered (every byte verified against the written pattern) or the\n"
    "error, whether that is the expected outcome, the wall time, and what recovery cost (retries,\n"
    "aborts, controller resets, protocol errors, seconds lost).\n"
    "\n"
    "  --json             one JSON object: {\"cells\":[...],\"all_as_expected\":bool}\n"
    "  --fault S          only fault kinds whose name contains S (e.g. --fault CFS)\n"
    "  --workload S       only workloads whose name contains S (random, layer, expert)\n"
    "  --reads N          random reads per cell (default 3000, 4 KiB each, 16 in flight)\n"
    "  --layers N         layers streamed per cell (default 1000, 3 small extents each)\n"
    "  --timeout-ms N     per-command timeout and abort timeout (default 100)\n"
    "\n"
    "The faults are the device-string grammar (README \"Faults and recovery\"), armed after the data\n"
    "is written. The GPU columns come from the GPU path's own run (tests/gpu, on a CUDA machine).\n",
    ""};

int run(int argc, char** argv) {
  const cli::Args args(argc, argv, 1, {"fault", "workload", "reads", "layers", "timeout-ms"}, {"json"});
  if (args.help_asked()) return args.print_help("fault_matrix", kHelp);
  if (!args.positional().empty()) throw cli::UsageError("unexpected argument '" + args.positional()[0] + "'");
  const bool json = args.has("json");
  const std::string fault_filter = args.get("fault");
  const std::string workload_filter = args.get("workload");
  faultmx::CellOptions o;
  o.reads = args.get_u32("reads", o.reads);
  o.layers = args.get_u32("layers", o.layers);
  o.timeout_ms = args.get_u32("timeout-ms", o.timeout_ms);
  if (o.reads == 0 || o.layers == 0 || o.timeout_ms == 0) throw cli::UsageError("--reads, --layers and --timeout-ms must be at least 1");
  bool all_ok = true;
  std::string cells;
  size_t ran = 0;
  for (const faultmx::FaultCase& f : faultmx::fault_cases()) {
    if (std::string(f.name).find(fault_filter) == std::string::npos) continue;
    for (faultmx::Workload w : faultmx::kWorkloads) {
      if (std::string(faultmx::workload_name(w)).find(workload_filter) == std::string::npos) continue;
      if (!json && ran == 0)
        std::printf("%-26s %-13s %-9s %-8s %9s  %s\n", "fault", "workload", "outcome", "expected", "seconds",
                    "recovery / error");
      const faultmx::CellResult r = faultmx::run_cell(f, w, o);
      ++ran;
      all_ok &= r.as_expected;
      if (json) {
        cells += (cells.empty() ? "" : ",") + faultmx::cell_json(r);
      } else {
        std::printf("%-26s %-13s %-9s %-8s %9.3f  %s\n", r.fault.c_str(), r.workload.c_str(),
                    r.recovered ? "recovered" : "error", r.as_expected ? "yes" : "NO", r.seconds,
                    r.recovered ? (host::recovery_text(r.recovery) + ", " + std::to_string(r.bytes_verified) +
                                   " bytes verified, " + std::to_string(r.bad_bytes) + " bad").c_str()
                                : r.error.c_str());
      }
    }
  }
  if (ran == 0) {
    std::fprintf(stderr, "fault_matrix: no cell matches --fault '%s' --workload '%s'\n", fault_filter.c_str(),
                 workload_filter.c_str());
    return 2;
  }
  if (json) std::printf("{\"cells\":[%s],\"all_as_expected\":%s}\n", cells.c_str(), all_ok ? "true" : "false");
  else if (!all_ok) std::printf("\nSome cells did not come out as expected (expected = NO above).\n");
  return all_ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) { return cli::run_tool("fault_matrix", kHelp, [&] { return run(argc, argv); }); }
