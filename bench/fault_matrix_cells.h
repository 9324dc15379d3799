// The fault matrix of issue #15, CPU path: each fault kind (armed through the emu: fault grammar)
// against each workload (random reads like nvme_perf, layer streaming of many small layers, expert
// fetch), every byte verified. Shared by the report tool (bench/fault_matrix.cpp) and the test
// suite (tests/bench/test_fault_matrix.cpp), so the table and the assertions measure one thing.
#pragma once
#include <cstdint>
#include <span>
#include <string>

#include "host/error.h"
#include "host/recovery.h"

namespace gpunvme::faultmx {

enum class Workload { kRandomReads, kLayerStream, kExpertFetch };
const char* workload_name(Workload w);
inline constexpr Workload kWorkloads[] = {Workload::kRandomReads, Workload::kLayerStream, Workload::kExpertFetch};

struct FaultCase {
  const char* name;      // the row label
  const char* faults;    // fault= specs, ';'-separated, armed after the data is written
  bool recovers;         // expected: every byte arrives (true) or a clear error (false)
  ErrorKind error_kind;  // when !recovers
  const char* error_has; // ... and a phrase the message must contain
};
// The eight fault kinds of the issue, plus a "long run" with periodic faults of several kinds.
std::span<const FaultCase> fault_cases();

struct CellOptions {
  uint32_t reads = 3000;      // random reads workload: 4 KiB reads
  uint32_t layers = 1000;     // layer streaming workload: small layers
  uint32_t expert_layers = 4; // expert fetch workload: layers x 16 experts x 3 parts
  uint32_t timeout_ms = 100;  // per-command timeout; the abort timeout is the same
};

struct CellResult {
  std::string fault, workload;
  bool recovered = false;      // the workload completed
  bool as_expected = false;    // recovered as expected, or failed with the expected kind and text
  std::string error;           // the error when it failed
  double seconds = 0;          // the workload's wall time, faults and recovery included
  uint64_t bytes_verified = 0;
  uint64_t bad_bytes = 0;      // verified bytes that differed (never expected)
  uint64_t faults_fired = 0;   // times the armed faults fired (0: the cell proved nothing about them)
  host::RecoveryStats recovery;
};

CellResult run_cell(const FaultCase& fault, Workload workload, const CellOptions& options = {});
std::string cell_json(const CellResult& r);

}  // namespace gpunvme::faultmx
