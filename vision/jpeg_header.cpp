#include "vision/jpeg_header.h"

#include <string>

namespace fastcpp::vision {
namespace {

int be16(const std::vector<uint8_t>& b, size_t i) { return int(b[i]) << 8 | int(b[i + 1]); }

// The orientation tag of an APP1 "Exif" segment's first image directory, 1 if absent.
int exif_orientation(const std::vector<uint8_t>& b, size_t data, size_t end) {
  const size_t tiff = data + 6;
  if (tiff + 8 > end) return 1;
  const bool little = b[tiff] == 'I';
  auto u16 = [&](size_t at) { return little ? int(b[at]) | int(b[at + 1]) << 8 : be16(b, at); };
  auto u32 = [&](size_t at) {
    return little ? uint32_t(b[at]) | uint32_t(b[at + 1]) << 8 | uint32_t(b[at + 2]) << 16 | uint32_t(b[at + 3]) << 24
                  : uint32_t(b[at]) << 24 | uint32_t(b[at + 1]) << 16 | uint32_t(b[at + 2]) << 8 | uint32_t(b[at + 3]);
  };
  const size_t ifd = tiff + u32(tiff + 4);
  if (ifd + 2 > end) return 1;
  const int entries = u16(ifd);
  for (int e = 0; e < entries; ++e) {
    const size_t entry = ifd + 2 + size_t(e) * 12;
    if (entry + 12 > end) return 1;
    if (u16(entry) == 0x0112) {
      const int orientation = u16(entry + 8);
      return orientation >= 1 && orientation <= 8 ? orientation : 1;
    }
  }
  return 1;
}

}  // namespace

bool is_jpeg(const std::vector<uint8_t>& b) { return b.size() > 3 && b[0] == 0xFF && b[1] == 0xD8 && b[2] == 0xFF; }

JpegHeader read_jpeg_header(const std::vector<uint8_t>& b) {
  JpegHeader header;
  if (!is_jpeg(b)) return header;
  size_t i = 2;
  while (i + 4 <= b.size()) {
    if (b[i] != 0xFF) return header;
    const uint8_t marker = b[i + 1];
    if (marker == 0xFF) {  // fill byte
      ++i;
      continue;
    }
    if (marker == 0xDA || marker == 0xD9) {  // the image data: no more headers
      header.first_scan = i;
      break;
    }
    const size_t length = static_cast<size_t>(be16(b, i + 2)), data = i + 4, end = i + 2 + length;
    if (length < 2 || end > b.size()) break;
    const bool frame = marker >= 0xC0 && marker <= 0xCF && marker != 0xC4 && marker != 0xC8 && marker != 0xCC;
    if (frame && length >= 8) {
      header.size = {be16(b, i + 7), be16(b, i + 5)};
      header.components = b[i + 9];
    }
    if (marker == 0xE1 && length >= 16 && std::string(b.begin() + long(data), b.begin() + long(data) + 4) == "Exif")
      header.orientation = exif_orientation(b, data, end);
    i = end;
  }
  return header;
}

bool has_jpeg_end(const std::vector<uint8_t>& b, const JpegHeader& header) {
  // After the headers (an EXIF thumbnail in them ends with its own FF D9); the scans never
  // hold FF D9 (an FF in them is followed by 00 or a restart marker), so the first one
  // there ends the image, and whatever follows it (a phone's appended video) is not read.
  const size_t from = header.first_scan, n = b.size();
  if (from == 0) return false;
  if (n >= from + 2 && b[n - 2] == 0xFF && b[n - 1] == 0xD9) return true;  // most files: no scan of the data
  for (size_t i = from + 1; i < n; ++i)
    if (b[i - 1] == 0xFF && b[i] == 0xD9) return true;
  return false;
}

int jpeg_reduction(cv::Size size, int min_side) {
  int factor = 1;
  if (min_side <= 0) return factor;
  const int short_side = std::min(size.width, size.height);
  while (factor < 8 && short_side / (factor * 2) >= min_side) factor *= 2;
  return factor;
}

cv::Size reduced_size(cv::Size size, int factor) {
  return {(size.width + factor - 1) / factor, (size.height + factor - 1) / factor};
}

bool decodable_size(cv::Size size) {
  return size.width > 0 && size.height > 0 && size.width <= (1 << 20) && size.height <= (1 << 20) &&
         int64_t(size.width) * size.height <= (int64_t(1) << 30);
}

void apply_orientation(cv::Mat& image, int orientation) {
  if (orientation >= 5) cv::transpose(image, image);
  switch (orientation) {
    case 2: case 6: cv::flip(image, image, 1); break;
    case 3: case 7: cv::flip(image, image, -1); break;
    case 4: case 8: cv::flip(image, image, 0); break;
    default: break;
  }
}

}  // namespace fastcpp::vision
