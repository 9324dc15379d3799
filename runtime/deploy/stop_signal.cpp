#include "runtime/deploy/stop_signal.h"

#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdio>

namespace gpunvme::deploy {
namespace {

// Made before the handler is installed: the handler may only call async-signal-safe functions.
char g_line[256];
size_t g_len = 0;

void on_stop_signal(int sig) {
  if (::write(2, g_line, g_len) < 0) {
    // Nothing else is safe to do in a signal handler.
  }
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

}  // namespace

void report_stop_signals(const char* tool) {
  const int n = std::snprintf(g_line, sizeof g_line,
                              "\n%s: interrupted. If it had begun writing, the device (or striped set) holds an "
                              "unfinished deploy, which ls and verify refuse: run the deploy again\n",
                              tool);
  g_len = n < 0 ? 0 : std::min<size_t>(size_t(n), sizeof g_line - 1);
  std::signal(SIGINT, on_stop_signal);
  std::signal(SIGTERM, on_stop_signal);
}

}  // namespace gpunvme::deploy
