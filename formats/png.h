#pragma once
// PNG files without an image library: 8-bit RGB or grey pixels encoded with zlib (plots,
// masks, and pictures on machines built without OpenCV's imgcodecs).
#include <cstdint>
#include <vector>

namespace fastcpp {

// Encodes 8-bit pixels (row-major, width*height*channels bytes; channels 3: RGB, 1:
// grey) as a PNG file's bytes.
std::vector<uint8_t> encode_png(const std::vector<uint8_t>& pixels, int width, int height, int channels = 3);

}  // namespace fastcpp
