// JPEG decoding with libjpeg(-turbo) directly (vision/decoders.h).
#include <csetjmp>
#include <cstdio>
#include <stdexcept>

#include <jpeglib.h>

#include "vision/decoders.h"
#include "vision/jpeg_header.h"

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

// A header that asks for more than the decoders allocate: an error through libjpeg's own
// exit, so that its state is released on the same path as its other errors.
void check_size(jpeg_decompress_struct& info) {
  jpeg_calc_output_dimensions(&info);
  if (decodable_size({int(info.output_width), int(info.output_height)})) return;
  auto* errors = reinterpret_cast<ErrorManager*>(info.err);
  std::snprintf(errors->message, sizeof errors->message, "the image is too large (%ux%u)", info.output_width,
                info.output_height);
  std::longjmp(errors->jump, 1);
}

// Decodes `bytes` at 1/scale_denom with libjpeg: `configure` sets the output colours once
// the header is read, `decode` reads the scanlines it wants into `out`. libjpeg's errors,
// and theirs, come out as std::runtime_error with the decompressor released. Neither may
// hold objects with destructors of their own: libjpeg's errors jump over their frames.
template <class Configure, class Decode>
void decompress(const std::vector<uint8_t>& bytes, int scale_denom, cv::Mat& out, Configure configure, Decode decode) {
  jpeg_decompress_struct info;
  ErrorManager errors;
  info.err = jpeg_std_error(&errors.base);
  errors.base.error_exit = on_error;
  if (setjmp(errors.jump)) {
    jpeg_destroy_decompress(&info);
    throw std::runtime_error(errors.message);
  }
  jpeg_create_decompress(&info);
  jpeg_mem_src(&info, bytes.data(), static_cast<unsigned long>(bytes.size()));
  jpeg_read_header(&info, TRUE);
  try {
    configure(info);
    info.scale_num = 1;
    info.scale_denom = static_cast<unsigned>(scale_denom);
    check_size(info);
    jpeg_start_decompress(&info);
    decode(info, out);
  } catch (...) {
    jpeg_destroy_decompress(&info);
    throw;
  }
  jpeg_destroy_decompress(&info);
}

}  // namespace

cv::Mat libjpeg_decode(const std::vector<uint8_t>& bytes, int channels, int scale_denom) {
  bool cmyk = false;
  cv::Mat decoded;
  decompress(
      bytes, scale_denom, decoded,
      [&](jpeg_decompress_struct& info) {
        cmyk = info.num_components == 4;
        info.out_color_space = cmyk ? JCS_CMYK : channels == 3 ? JCS_RGB : JCS_GRAYSCALE;
      },
      [](jpeg_decompress_struct& info, cv::Mat& out) {
        out.create(int(info.output_height), int(info.output_width), CV_8UC(int(info.output_components)));
        while (info.output_scanline < info.output_height) {
          JSAMPROW row = out.ptr<uint8_t>(int(info.output_scanline));
          jpeg_read_scanlines(&info, &row, 1);
        }
        jpeg_finish_decompress(&info);
      });
  if (cmyk) decoded = from_cmyk(decoded, channels);
  apply_orientation(decoded, read_jpeg_header(bytes).orientation);
  return decoded;
}

cv::Mat libjpeg_decode_region(const std::vector<uint8_t>& bytes, int scale_denom, cv::Rect region) {
  cv::Rect wanted;   // the band decoded around the region
  JDIMENSION left = 0;  // where libjpeg's block-aligned band starts
  cv::Mat band;
  decompress(
      bytes, scale_denom, band,
      [](jpeg_decompress_struct& info) {
        if (info.num_components != 1 && info.num_components != 3)
          throw std::runtime_error("libjpeg_decode_region: not a grey or colour JPEG");
        info.out_color_space = JCS_EXT_BGR;
      },
      [&](jpeg_decompress_struct& info, cv::Mat& out) {
        const cv::Rect whole(0, 0, int(info.output_width), int(info.output_height));
        if ((region & whole) != region || region.empty())
          throw std::runtime_error("libjpeg_decode_region: the region is not inside the image");
        // A band a little larger than the region: chroma upsampling reads its neighbours,
        // so the band's own edges may differ from the whole decode's, the region's may not.
        // libjpeg widens its columns further, to whole blocks.
        const int margin = 16;
        wanted = cv::Rect(region.x - margin, region.y - margin, region.width + 2 * margin, region.height + 2 * margin) &
                 whole;
        left = JDIMENSION(wanted.x);
        JDIMENSION width = JDIMENSION(wanted.width);
        jpeg_crop_scanline(&info, &left, &width);
        out.create(wanted.height, int(width), CV_8UC3);
        if (wanted.y > 0) jpeg_skip_scanlines(&info, JDIMENSION(wanted.y));
        for (int y = 0; y < wanted.height; ++y) {
          JSAMPROW row = out.ptr<uint8_t>(y);
          jpeg_read_scanlines(&info, &row, 1);
        }
        jpeg_abort_decompress(&info);  // the rows below the band: never read
      });
  return band(cv::Rect(region.x - int(left), region.y - wanted.y, region.width, region.height));
}

}  // namespace fastcpp::vision
