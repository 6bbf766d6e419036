#pragma once
// The samples of a one-channel PNG as they are stored: greyscale of 1, 2, 4, 8 or 16
// bits, or a palette's indices. An image decoder makes pictures of them: it scales low
// bit depths up to 0..255, keeps the high byte of 16 bits and turns a palette into its
// colours, which for a class mask (a value per pixel) loses the classes.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace fastcpp {

struct PngSamples {
  int width = 0;
  int height = 0;
  int bit_depth = 0;     // 1, 2, 4, 8 or 16
  bool palette = false;  // the samples are indices into the palette
  std::vector<uint16_t> samples;  // row-major, width * height
};

// nullopt for a PNG of colour or with alpha (and for bytes that are no PNG): the image
// decoders read those. Interlaced (Adam7) PNGs are read too. Damaged data is an Error naming `source`.
std::optional<PngSamples> decode_png_samples(const std::vector<uint8_t>& bytes, const std::string& source);

}  // namespace fastcpp
