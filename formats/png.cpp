#include "formats/png.h"

#include <zlib.h>

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

std::vector<uint8_t> encode_png(const std::vector<uint8_t>& rgb, int width, int height) {
  std::vector<uint8_t> raw;  // each row: filter byte 0, then the pixels
  raw.reserve(rgb.size() + height);
  for (int y = 0; y < height; ++y) {
    raw.push_back(0);
    const auto* row = &rgb[size_t(y) * width * 3];
    raw.insert(raw.end(), row, row + size_t(width) * 3);
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
  header.insert(header.end(), {8, 2, 0, 0, 0});  // 8-bit RGB, deflate, no filter method, no interlace
  append_chunk(png, "IHDR", header);
  append_chunk(png, "IDAT", compressed);
  append_chunk(png, "IEND", {});
  return png;
}

}  // namespace fastcpp
