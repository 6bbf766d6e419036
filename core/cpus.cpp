#include "core/cpus.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <thread>

namespace fastcpp {

namespace {

int online_cores() { return std::max(1, static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN))); }

}  // namespace

int usable_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

int cores_per_process(int local_processes) {
  const int usable = usable_cores();
  // How many processes share this process's cores: all of them when each may use the whole
  // machine, one when each has a slice (4 processes of 8 cores on a 32-core machine).
  const int processes = std::max(1, local_processes);
  const int sharing = std::clamp(processes * usable / online_cores(), 1, processes);
  return std::max(1, usable / sharing);
}

}  // namespace fastcpp
