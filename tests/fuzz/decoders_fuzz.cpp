// libFuzzer target: libjpeg_decode and libpng_decode (vision/decoders.h), the decoders
// the loader uses where OpenCV has no imgcodecs, must give an image or throw
// std::runtime_error on any bytes. libjpeg and libpng are Debian's, not instrumented:
// ASan sees crashes in them, and memory errors in the code around them.
// Built and run by tests/fuzz/run.sh.
#include <stdexcept>

#include "vision/decoders.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::vector<uint8_t> bytes(data, data + size);
  for (const int channels : {3, 1}) {
    try {
      const auto jpeg = fastcpp::vision::libjpeg_decode(bytes, channels, channels == 3 ? 1 : 4);
      if (jpeg.channels() != channels) __builtin_trap();
    } catch (const std::runtime_error&) {
    }
    try {
      const auto png = fastcpp::vision::libpng_decode(bytes, channels);
      if (png.channels() != channels) __builtin_trap();
    } catch (const std::runtime_error&) {
    }
  }
  return 0;
}
