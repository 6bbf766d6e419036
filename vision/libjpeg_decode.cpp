// JPEG decoding with libjpeg(-turbo) directly (vision/decoders.h).
#include <csetjmp>
#include <cstdio>
#include <stdexcept>
#include <string>

#include <jpeglib.h>

#include "vision/decoders.h"

namespace fastcpp::vision {
namespace {

// libjpeg reports a fatal error through error_exit, which must not return: jump back
// out of the library with its message.
struct ErrorManager {
  jpeg_error_mgr base;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

void on_error(j_common_ptr info) {
  auto* errors = reinterpret_cast<ErrorManager*>(info->err);
  info->err->format_message(info, errors->message);
  std::longjmp(errors->jump, 1);
}

// The EXIF orientation (1..8) of a JPEG's APP1 segment; 1 where there is none.
int exif_orientation(const std::vector<uint8_t>& b) {
  auto be16 = [&](size_t i) { return int(b[i]) << 8 | int(b[i + 1]); };
  size_t i = 2;
  while (i + 4 <= b.size() && b[i] == 0xFF) {
    const int marker = b[i + 1];
    if (marker == 0xDA || marker == 0xD9) break;  // image data: no more headers
    const size_t length = static_cast<size_t>(be16(i + 2));
    const size_t data = i + 4, end = i + 2 + length;
    if (end > b.size()) break;
    if (marker == 0xE1 && length >= 16 && std::string(b.begin() + long(data), b.begin() + long(data) + 4) == "Exif") {
      const size_t tiff = data + 6;
      const bool little = b[tiff] == 'I';
      auto u16 = [&](size_t at) { return little ? int(b[at]) | int(b[at + 1]) << 8 : be16(at); };
      auto u32 = [&](size_t at) {
        return little ? uint32_t(b[at]) | uint32_t(b[at + 1]) << 8 | uint32_t(b[at + 2]) << 16 | uint32_t(b[at + 3]) << 24
                      : uint32_t(b[at]) << 24 | uint32_t(b[at + 1]) << 16 | uint32_t(b[at + 2]) << 8 | uint32_t(b[at + 3]);
      };
      if (tiff + 8 > end) return 1;
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
    i = end;
  }
  return 1;
}

// What cv::imdecode does with an EXIF orientation.
void apply_orientation(cv::Mat& image, int orientation) {
  if (orientation >= 5) cv::transpose(image, image);
  switch (orientation) {
    case 2: case 6: cv::flip(image, image, 1); break;
    case 3: case 7: cv::flip(image, image, -1); break;
    case 4: case 8: cv::flip(image, image, 0); break;
    default: break;
  }
}

// Adobe's inverted CMYK to RGB or grey, as OpenCV converts it.
cv::Mat from_cmyk(const cv::Mat& cmyk, int channels) {
  cv::Mat out(cmyk.rows, cmyk.cols, channels == 3 ? CV_8UC3 : CV_8UC1);
  for (int y = 0; y < cmyk.rows; ++y) {
    const uint8_t* in = cmyk.ptr<uint8_t>(y);
    uint8_t* o = out.ptr<uint8_t>(y);
    for (int x = 0; x < cmyk.cols; ++x, in += 4) {
      const int k = in[3];
      const int r = k - ((255 - in[0]) * k >> 8), g = k - ((255 - in[1]) * k >> 8), b = k - ((255 - in[2]) * k >> 8);
      if (channels == 3) {
        *o++ = uint8_t(r);
        *o++ = uint8_t(g);
        *o++ = uint8_t(b);
      } else {
        *o++ = uint8_t((b * 1868 + g * 9617 + r * 4899 + (1 << 13)) >> 14);
      }
    }
  }
  return out;
}

}  // namespace

cv::Mat libjpeg_decode(const std::vector<uint8_t>& bytes, int channels, int scale_denom) {
  jpeg_decompress_struct info;
  ErrorManager errors;
  info.err = jpeg_std_error(&errors.base);
  errors.base.error_exit = on_error;
  cv::Mat decoded;  // before any jump target: its destructor must run on every path
  if (setjmp(errors.jump)) {
    jpeg_destroy_decompress(&info);
    throw std::runtime_error(errors.message);
  }
  jpeg_create_decompress(&info);
  jpeg_mem_src(&info, bytes.data(), static_cast<unsigned long>(bytes.size()));
  jpeg_read_header(&info, TRUE);
  const bool cmyk = info.num_components == 4;
  info.out_color_space = cmyk ? JCS_CMYK : channels == 3 ? JCS_RGB : JCS_GRAYSCALE;
  info.scale_num = 1;
  info.scale_denom = static_cast<unsigned>(scale_denom);
  jpeg_start_decompress(&info);
  decoded.create(static_cast<int>(info.output_height), static_cast<int>(info.output_width),
                 CV_8UC(static_cast<int>(info.output_components)));
  while (info.output_scanline < info.output_height) {
    JSAMPROW row = decoded.ptr<uint8_t>(static_cast<int>(info.output_scanline));
    jpeg_read_scanlines(&info, &row, 1);
  }
  jpeg_finish_decompress(&info);
  jpeg_destroy_decompress(&info);
  if (cmyk) decoded = from_cmyk(decoded, channels);
  apply_orientation(decoded, exif_orientation(bytes));
  return decoded;
}

}  // namespace fastcpp::vision
