#pragma once
// PNG files without an image library: 8-bit RGB pixels encoded with zlib (plots, and
// pictures on machines built without OpenCV).
#include <cstdint>
#include <vector>

namespace fastcpp {

// Encodes 8-bit RGB pixels (row-major, width*height*3 bytes) as a PNG file's bytes.
std::vector<uint8_t> encode_png(const std::vector<uint8_t>& rgb, int width, int height);

}  // namespace fastcpp
