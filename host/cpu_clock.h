#pragma once
// CPU time as Linux counts it: of the calling thread, of any thread of this process by id, of the whole
// process; and the ids of this process's threads, to tell which threads a call started (the emulator's
// controller threads, whose CPU time a benchmark reports apart from the engine's).
#include <dirent.h>
#include <sys/resource.h>
#include <sys/types.h>
#include <time.h>

#include <algorithm>
#include <cstdlib>
#include <vector>

namespace gpunvme::host {

inline double seconds_of(const timespec& t) { return double(t.tv_sec) + double(t.tv_nsec) / 1e9; }

inline double calling_thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return seconds_of(ts);
}

// Any thread of this process by its kernel id; -1 once the thread has ended. The clock id is the kernel's
// MAKE_THREAD_CPUCLOCK(tid, CPUCLOCK_SCHED), what pthread_getcpuclockid builds from a pthread_t, which a
// thread id from /proc does not give.
inline double thread_cpu_seconds(pid_t tid) {
  const clockid_t c = clockid_t((~unsigned(tid)) << 3) | 6;
  timespec ts{};
  if (clock_gettime(c, &ts) != 0) return -1;
  return seconds_of(ts);
}

// User + system time of every thread of the process, ended ones included.
inline double process_cpu_seconds() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  auto tv = [](const timeval& t) { return double(t.tv_sec) + double(t.tv_usec) / 1e6; };
  return tv(ru.ru_utime) + tv(ru.ru_stime);
}

// This process's thread ids, sorted.
inline std::vector<pid_t> thread_ids() {
  std::vector<pid_t> t;
  if (DIR* d = opendir("/proc/self/task")) {
    while (dirent* e = readdir(d))
      if (e->d_name[0] != '.') t.push_back(pid_t(std::atoi(e->d_name)));
    closedir(d);
  }
  std::sort(t.begin(), t.end());
  return t;
}

// The threads that `fn` started and left running (e.g. a controller's worker threads), sorted.
template <class Fn>
std::vector<pid_t> threads_started_by(Fn&& fn) {
  const std::vector<pid_t> before = thread_ids();
  fn();
  std::vector<pid_t> after = thread_ids(), fresh;
  std::set_difference(after.begin(), after.end(), before.begin(), before.end(), std::back_inserter(fresh));
  return fresh;
}

}  // namespace gpunvme::host
