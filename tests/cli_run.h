// Runs built programs for end-to-end tests -- the `gpunvme` binary (path in GPUNVME_BIN, set by
// meson) or another tool -- with stdout and stderr together, optionally after environment assignments.
#pragma once
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace cli_test {

struct Run {
  int rc;  // exit status, -1 when the process did not exit normally
  std::string out;
};

// A shell command line to completion, stdout and stderr together.
inline Run run_shell(const std::string& command) {
  const std::string cmd = command + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return {-1, "popen failed"};
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int st = pclose(p);
  return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, out};
}

// Runs `program args` through the shell; `env` is prepended as is, e.g. "GPUNVME_DOCTOR_ROOT=/tmp/x".
inline Run run_program(const std::string& program, const std::string& args, const std::string& env = "") {
  return run_shell(env + (env.empty() ? "" : " ") + program + " " + args);
}

inline Run run_gpunvme(const std::string& args, const std::string& env = "") {
  const char* bin = std::getenv("GPUNVME_BIN");
  return run_program(bin ? bin : "gpunvme", args, env);
}

}  // namespace cli_test
