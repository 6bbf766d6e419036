#include "core/host_memory.h"

#include <climits>
#include <cstdlib>
#include <cstring>
#include <mutex>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace fastcpp {

bool keep_freed_host_memory() {
  static std::once_flag once;
  static bool in_force = false;
  std::call_once(once, [] {
#if defined(__GLIBC__)
    const char* choice = std::getenv("FASTCPP_MALLOC");
    if (choice && std::strcmp(choice, "system") == 0) return;
    // Large blocks from the heap, not from mmap (whose munmap returns them at once), and
    // a heap that is never trimmed: a freed block serves the next step's request.
    in_force = mallopt(M_MMAP_MAX, 0) == 1 && mallopt(M_TRIM_THRESHOLD, INT_MAX) == 1;
#endif
  });
  return in_force;
}

}  // namespace fastcpp
