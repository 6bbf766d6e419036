// libFuzzer target: read_torch_file on arbitrary bytes must return or throw
// fastcpp::Error; any other exception, a crash or undefined behaviour is a finding.
// Built and run by tests/fuzz/run.sh.
#include <cstdint>
#include <vector>

#include "core/error.h"
#include "formats/torch_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::vector<char> bytes(data, data + size);
  try {
    fastcpp::read_torch_file(bytes);
  } catch (const fastcpp::Error&) {
  }
  return 0;
}
