#include "formats/png.h"

#include <zlib.h>

#include <string>

#include "core/error.h"

namespace fastcpp {
namespace {

void append_chunk(std::vector<uint8_t>& out, const char* type, const std::vector<uint8_t>& data) {
  auto put32 = [&](uint32_t v) {
    for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<uint8_t>(v >> shift));
  };
  put32(static_cast<uint32_t>(data.size()));
  const size_t type_at = out.size();
  out.insert(out.end(), type, type + 4);
  out.insert(out.end(), data.begin(), data.end());
  put32(static_cast<uint32_t>(crc32(0, out.data() + type_at, static_cast<uInt>(out.size() - type_at))));
}

}  // namespace

std::vector<uint8_t> encode_png(const std::vector<uint8_t>& pixels, int width, int height, int channels) {
  if (channels != 1 && channels != 3) throw Error("encode_png: channels must be 1 or 3, got " + std::to_string(channels));
  const size_t row_bytes = size_t(width) * size_t(channels);
  if (pixels.size() != row_bytes * size_t(height))
    throw Error("encode_png: " + std::to_string(pixels.size()) + " bytes for " + std::to_string(width) + "x" +
                std::to_string(height) + "x" + std::to_string(channels));
  std::vector<uint8_t> raw;  // each row: filter byte 0, then the pixels
  raw.reserve(pixels.size() + size_t(height));
  for (int y = 0; y < height; ++y) {
    raw.push_back(0);
    const auto* row = &pixels[size_t(y) * row_bytes];
    raw.insert(raw.end(), row, row + row_bytes);
  }
  uLongf compressed_size = compressBound(static_cast<uLong>(raw.size()));
  std::vector<uint8_t> compressed(compressed_size);
  if (compress(compressed.data(), &compressed_size, raw.data(), static_cast<uLong>(raw.size())) != Z_OK)
    throw Error("encode_png: zlib compression failed");
  compressed.resize(compressed_size);

  std::vector<uint8_t> png{0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  std::vector<uint8_t> header;
  for (uint32_t v : {uint32_t(width), uint32_t(height)})
    for (int shift = 24; shift >= 0; shift -= 8) header.push_back(static_cast<uint8_t>(v >> shift));
  // 8-bit, RGB (colour type 2) or grey (0); deflate, no filter method, no interlace
  header.insert(header.end(), {8, uint8_t(channels == 3 ? 2 : 0), 0, 0, 0});
  append_chunk(png, "IHDR", header);
  append_chunk(png, "IDAT", compressed);
  append_chunk(png, "IEND", {});
  return png;
}

}  // namespace fastcpp
