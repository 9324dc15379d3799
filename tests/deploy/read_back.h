// For the tests that stop deploys: when to stop one (wait_for_progress, wait_for_lock), and what
// `gpunvme ls` and `gpunvme verify` say about a device (or a striped set) afterwards: read_back()
// for deploys stopped by a signal or a failed write, reads_honestly() for any state a stopped
// deploy can leave.
#pragma once
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>
#include <chrono>
#include <fstream>
#include <string>
#include <thread>

#include "tests/deploy/cli_run.h"
#include "tests/deploy/deploy_fixture.h"

namespace deploy_test {

// Until a deploy started with --progress prints its first progress line (its first 8 MiB piece is
// written), or exits; at most a minute.
inline void wait_for_progress(Background& deploy, const std::string& log) {
  const auto limit = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (read_file(log).empty() && deploy.running() && std::chrono::steady_clock::now() < limit)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
}

// Until `child` holds a flock (it has begun opening its devices: host/device_lock.h), from
// /proc/locks without taking one (a probe lock could make the child's own attempt fail); at most a minute.
inline bool wait_for_lock(Background& child) {
  const std::string pid = " " + std::to_string(child.pid()) + " ";
  const auto limit = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (child.running() && std::chrono::steady_clock::now() < limit) {
    std::ifstream locks("/proc/locks");
    for (std::string line; std::getline(locks, line);)
      if (line.find("FLOCK") != std::string::npos && line.find(pid) != std::string::npos) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return false;
}

struct Outcome {
  bool refused_unfinished = false;  // ls and verify both said "did not finish"
  std::string listed;               // model ls listed (and verify checked every byte of): "new", "old" or "?"
};

// What a reader of `devices` (the --device arguments: "emu:/a.img", or "emu:/a.img --device
// emu:/b.img" for a set) sees: either a refusal naming the unfinished deploy (or nothing there
// yet), or a model whose every byte verifies against its record. Anything else (a listing that does
// not verify, exit 0 on half a model) fails the test.
inline Outcome read_back(const std::string& devices) {
  using Catch::Matchers::ContainsSubstring;
  const auto ls = run("ls --device " + devices);
  const auto verify = run("verify --device " + devices);
  INFO("ls:\n" << ls.out << "verify:\n" << verify.out);
  Outcome o;
  if (ls.rc == 0) {
    CHECK(verify.rc == 0);
    CHECK_THAT(verify.out, ContainsSubstring("OK: "));
    CHECK_THAT(ls.out, ContainsSubstring("found by   deploy record"));
    o.listed = ls.out.find("'new model'") != std::string::npos ? "new" : ls.out.find("'old model'") != std::string::npos ? "old" : "?";
    return o;
  }
  CHECK(ls.rc == 1);
  CHECK(verify.rc == 1);
  // Killed before anything was written: no image yet, an image not yet sized (killed between its
  // creation and ftruncate), nothing on it, or (a striped set) no stripe record on a member yet: a slow
  // build (ASan) can be killed before its first write, and the honest answer is then "nothing of ours".
  for (const char* nothing : {"no model on", "does not exist", "holds less than one", "nothing of ours"})
    if (ls.out.find(nothing) != std::string::npos) return o;
  CHECK_THAT(ls.out, ContainsSubstring("did not finish") && ContainsSubstring("Re-run `gpunvme deploy"));
  CHECK_THAT(verify.out, ContainsSubstring("did not finish"));
  o.refused_unfinished = true;
  return o;
}

// Whether ls and verify agree on `devices` the honest way: ls lists a model only when verify checks
// every byte of it against its record (exit 0), and otherwise both refuse (exit 1). Never a listing
// that verify cannot check (a GGUF found without its record: exit 3) or fails.
inline bool reads_honestly(const std::string& devices) {
  const auto ls = run("ls --device " + devices);
  const auto verify = run("verify --device " + devices);
  UNSCOPED_INFO("ls --device " << devices << ":\n" << ls.out << "verify:\n" << verify.out);
  return ls.rc == 0 ? verify.rc == 0 && ls.out.find("found by   deploy record") != std::string::npos
                    : ls.rc == 1 && verify.rc == 1;
}

}  // namespace deploy_test
