// Running the built `gpunvme` binary (GPUNVME_BIN, set by meson) from the deploy tests: to
// completion through a shell, or in the background as a child process that a test can signal.
#pragma once
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch_test_macros.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "tests/cli_run.h"

namespace deploy_test {

inline std::string gpunvme_bin() {
  const char* bin = std::getenv("GPUNVME_BIN");
  return bin ? bin : "gpunvme";
}

// The first line of every test that runs the binary: outside meson there may be none to run.
inline void skip_without_gpunvme_bin() {
  if (!std::getenv("GPUNVME_BIN")) SKIP("GPUNVME_BIN is not set (meson sets it to the built gpunvme)");
}

using cli_test::Run;
using cli_test::run_shell;

// `gpunvme ARGS` (ARGS as shell text), stdout and stderr together.
inline Run run(const std::string& args) { return run_shell(gpunvme_bin() + " " + args); }

// A shell command run in the background (stdout and stderr to `log`); the destructor kills it.
class Background {
 public:
  Background(const std::string& shell_command, const std::string& log) {
    pid_ = ::fork();
    if (pid_ == 0) {
      const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (fd >= 0) {
        ::dup2(fd, 1);
        ::dup2(fd, 2);
      }
      ::execl("/bin/bash", "bash", "-c", ("exec " + shell_command).c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
  }
  ~Background() {
    if (pid_ > 0 && !reaped_) {
      ::kill(pid_, SIGKILL);
      wait();
    }
  }
  Background(const Background&) = delete;
  Background& operator=(const Background&) = delete;

  pid_t pid() const { return pid_; }
  void signal(int sig) const { ::kill(pid_, sig); }
  // waitpid's status; bounded by `limit` (then SIGKILL).
  int wait(std::chrono::milliseconds limit = std::chrono::seconds(120)) {
    const auto end = std::chrono::steady_clock::now() + limit;
    int st = 0;
    while (::waitpid(pid_, &st, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > end) ::kill(pid_, SIGKILL);
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    reaped_ = true;
    status_ = st;
    return st;
  }
  bool running() {
    if (reaped_) return false;
    int st = 0;
    if (::waitpid(pid_, &st, WNOHANG) == pid_) {
      reaped_ = true;
      status_ = st;
      return false;
    }
    return true;
  }
  int status() const { return status_; }

 private:
  pid_t pid_ = -1;
  bool reaped_ = false;
  int status_ = 0;
};

}  // namespace deploy_test
