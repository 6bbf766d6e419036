// libFuzzer target: read_idx on arbitrary bytes (plain or gzip) must return a tensor
// or throw fastcpp::Error. Built and run by tests/fuzz/run.sh.
#include "core/error.h"
#include "memory_file.h"
#include "vision/datasets/idx.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static MemoryFile file;
  try {
    fastcpp::vision::read_idx(file.write(data, size));
  } catch (const fastcpp::Error&) {
  }
  return 0;
}
