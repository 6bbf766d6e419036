#include "formats/png_samples.h"

#include <zlib.h>

#include <algorithm>
#include <cstdlib>
#include <span>

#include "core/error.h"

namespace fastcpp {
namespace {

uint32_t be32(const uint8_t* p) {
  return uint32_t(p[0]) << 24 | uint32_t(p[1]) << 16 | uint32_t(p[2]) << 8 | uint32_t(p[3]);
}

uint8_t paeth(int left, int up, int corner) {
  const int p = left + up - corner, to_left = std::abs(p - left), to_up = std::abs(p - up),
            to_corner = std::abs(p - corner);
  return static_cast<uint8_t>(to_left <= to_up && to_left <= to_corner ? left : to_up <= to_corner ? up : corner);
}

// Undoes each row's filter in place: rows of a filter byte and row_bytes bytes; `step`
// is the bytes of one pixel (at least 1), which the filters look back by.
void unfilter(uint8_t* rows, size_t height, size_t row_bytes, size_t step, const Error& damaged) {
  const std::vector<uint8_t> zeros(row_bytes, 0);
  const uint8_t* previous = zeros.data();
  for (size_t y = 0; y < height; ++y) {
    uint8_t* row = rows + y * (row_bytes + 1) + 1;
    const uint8_t filter = row[-1];
    if (filter > 4) throw damaged;
    for (size_t i = 0; i < row_bytes; ++i) {
      const int left = i >= step ? row[i - step] : 0, up = previous[i], corner = i >= step ? previous[i - step] : 0;
      const int predicted = filter == 1 ? left : filter == 2 ? up : filter == 3 ? (left + up) / 2
                            : filter == 4 ? paeth(left, up, corner) : 0;
      row[i] = static_cast<uint8_t>(row[i] + predicted);
    }
    previous = row;
  }
}

// The stream of the IDAT chunks inflated into exactly `size` bytes.
std::vector<uint8_t> inflate_exactly(const std::vector<uint8_t>& compressed, size_t size, const Error& damaged) {
  std::vector<uint8_t> out(size);
  z_stream stream{};
  if (inflateInit(&stream) != Z_OK) throw Error("zlib could not start");
  stream.next_in = const_cast<Bytef*>(compressed.data());
  stream.avail_in = static_cast<uInt>(compressed.size());
  stream.next_out = out.data();
  stream.avail_out = static_cast<uInt>(out.size());
  const int status = inflate(&stream, Z_FINISH);
  const auto inflated = stream.total_out;
  inflateEnd(&stream);
  if ((status != Z_STREAM_END && status != Z_BUF_ERROR) || inflated != size) throw damaged;
  return out;
}

// The pixels a pass of the image data holds: from (x0, y0), every dx-th of every dy-th row.
struct Pass {
  size_t x0, y0, dx, dy;
  size_t width(size_t full) const { return full > x0 ? (full - x0 + dx - 1) / dx : 0; }
  size_t height(size_t full) const { return full > y0 ? (full - y0 + dy - 1) / dy : 0; }
};
constexpr Pass kWhole[] = {{0, 0, 1, 1}};
// Adam7 interlacing: seven passes, each a small image of its own rows (none when empty).
constexpr Pass kAdam7[] = {{0, 0, 8, 8}, {4, 0, 8, 8}, {0, 4, 4, 8}, {2, 0, 4, 4},
                           {0, 2, 2, 4}, {1, 0, 2, 2}, {0, 1, 1, 2}};

size_t row_bytes(size_t width, int depth) { return (width * size_t(depth) + 7) / 8; }

}  // namespace

std::optional<PngSamples> decode_png_samples(const std::vector<uint8_t>& bytes, const std::string& source) {
  static constexpr uint8_t kSignature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  if (bytes.size() < 8 || !std::equal(std::begin(kSignature), std::end(kSignature), bytes.begin())) return std::nullopt;
  const auto damaged = [&](const std::string& why) { return Error("cannot read PNG '" + source + "': " + why); };
  PngSamples png;
  int colour_type = -1, interlace = 0;
  std::vector<uint8_t> compressed;
  for (size_t at = 8;;) {
    if (bytes.size() - at < 12 || be32(&bytes[at]) > bytes.size() - at - 12)
      throw damaged("the file ends inside a chunk (truncated)");
    const uint32_t length = be32(&bytes[at]);
    const uint8_t* type = &bytes[at + 4];
    const uint8_t* data = type + 4;
    if (crc32(0, type, length + 4) != be32(data + length)) throw damaged("a chunk's checksum does not match (corrupt)");
    const std::string name(type, type + 4);
    at += 12 + length;
    if (name == "IEND") break;
    if (name == "IDAT") compressed.insert(compressed.end(), data, data + length);
    if (name != "IHDR") continue;
    if (length != 13) throw damaged("its header chunk has " + std::to_string(length) + " bytes, not 13");
    const uint32_t width = be32(data), height = be32(data + 4);
    // The image decoders' limits: each side at most 2^20, at most 2^30 pixels.
    if (width == 0 || height == 0 || width > (1u << 20) || height > (1u << 20) || uint64_t(width) * height > (1u << 30))
      throw damaged("a size of " + std::to_string(width) + "x" + std::to_string(height));
    png.width = static_cast<int>(width);
    png.height = static_cast<int>(height);
    png.bit_depth = data[8];
    colour_type = data[9];
    interlace = data[12];
  }
  if (colour_type < 0) throw damaged("no header chunk");
  if ((colour_type != 0 && colour_type != 3) || interlace > 1) return std::nullopt;
  png.palette = colour_type == 3;
  const int depth = png.bit_depth;
  if (depth != 1 && depth != 2 && depth != 4 && depth != 8 && !(depth == 16 && !png.palette))
    throw damaged("a bit depth of " + std::to_string(depth) + (png.palette ? " for a palette" : " for grey"));
  const size_t width = size_t(png.width), height = size_t(png.height);
  const auto passes = interlace ? std::span<const Pass>(kAdam7) : std::span<const Pass>(kWhole);
  size_t size = 0;  // of the rows of all passes, each row after its filter byte
  for (const auto& pass : passes)
    if (const size_t w = pass.width(width); w > 0) size += pass.height(height) * (row_bytes(w, depth) + 1);
  const auto corrupt = damaged("its image data are corrupt or shorter than its size");
  // Deflate shrinks at most about 1032 times: a few bytes cannot hold gigabytes of rows.
  if (compressed.size() * 1032 + 1024 < size) throw corrupt;
  auto rows = inflate_exactly(compressed, size, corrupt);
  png.samples.resize(width * height);
  uint8_t* pass_rows = rows.data();
  for (const auto& pass : passes) {
    const size_t w = pass.width(width), h = pass.height(height), bytes_per_row = row_bytes(w, depth);
    if (w == 0 || h == 0) continue;
    unfilter(pass_rows, h, bytes_per_row, depth == 16 ? 2 : 1, corrupt);
    for (size_t y = 0; y < h; ++y) {
      const uint8_t* row = pass_rows + y * (bytes_per_row + 1) + 1;
      uint16_t* out = png.samples.data() + (pass.y0 + y * pass.dy) * width + pass.x0;
      for (size_t x = 0; x < w; ++x) {
        uint16_t& sample = out[x * pass.dx];
        if (depth == 16) {
          sample = static_cast<uint16_t>(row[2 * x] << 8 | row[2 * x + 1]);
        } else {  // the leftmost pixel in the highest bits
          const size_t bit = x * size_t(depth);
          sample = static_cast<uint16_t>((row[bit / 8] >> (8 - depth - bit % 8)) & ((1 << depth) - 1));
        }
      }
    }
    pass_rows += h * (bytes_per_row + 1);
  }
  return png;
}

}  // namespace fastcpp
