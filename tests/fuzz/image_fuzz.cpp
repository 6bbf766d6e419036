// libFuzzer target: an image file as the loader reads it (the header's size for the
// batch's shape, then the decode, RGB or grayscale, full or reduced size, and the copy
// into a tensor) must give an image or throw fastcpp::Error. OpenCV's codecs are
// Debian's, not instrumented: ASan sees crashes in them, not quieter memory errors.
// Built and run by tests/fuzz/run.sh.
#include "core/error.h"
#include "vision/image.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::vector<uint8_t> bytes(data, data + size);
  fastcpp::vision::image_header_size(bytes);
  for (const fastcpp::vision::DecodeOptions options : {fastcpp::vision::DecodeOptions{.channels = 3},
                                                       fastcpp::vision::DecodeOptions{.channels = 1, .min_side = 8}}) {
    try {
      const auto image = fastcpp::vision::decode_image(bytes, "fuzz input", options);
      if (image.channels() != options.channels) __builtin_trap();
      fastcpp::vision::image_to_tensor(image);
    } catch (const fastcpp::Error&) {
    }
  }
  return 0;
}
