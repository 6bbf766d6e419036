// PNG decoding with libpng directly (vision/decoders.h).
#include <png.h>

#include <cstring>
#include <stdexcept>
#include <string>

#include "vision/decoders.h"
#include "vision/jpeg_header.h"

namespace fastcpp::vision {
namespace {

struct Reader {
  const std::vector<uint8_t>* bytes;
  size_t at = 0;
  std::string error;
};

void read_bytes(png_structp png, png_bytep out, png_size_t n) {
  auto* reader = static_cast<Reader*>(png_get_io_ptr(png));
  if (reader->at + n > reader->bytes->size()) png_error(png, "the PNG data end early (truncated file)");
  std::memcpy(out, reader->bytes->data() + reader->at, n);
  reader->at += n;
}

// libpng reports a fatal error here and must not come back: keep the message, jump out.
void on_error(png_structp png, png_const_charp message) {
  static_cast<Reader*>(png_get_error_ptr(png))->error = message;
  png_longjmp(png, 1);
}

void on_warning(png_structp, png_const_charp) {}

}  // namespace

cv::Mat libpng_decode(const std::vector<uint8_t>& bytes, int channels) {
  Reader reader{&bytes};
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &reader, on_error, on_warning);
  if (!png) throw std::runtime_error("libpng could not start");
  png_infop info = png_create_info_struct(png);
  cv::Mat decoded;  // before the jump target: its destructor must run on every path
  std::vector<png_bytep> rows;
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_read_struct(&png, &info, nullptr);
    throw std::runtime_error(reader.error.empty() ? "not a PNG" : reader.error);
  }
  if (!info) png_error(png, "libpng could not start");
  png_set_read_fn(png, &reader, read_bytes);
  png_read_info(png, info);
  if (!decodable_size({int(png_get_image_width(png, info)), int(png_get_image_height(png, info))}))
    png_error(png, "the image is too large");
  const int color_type = png_get_color_type(png, info), bit_depth = png_get_bit_depth(png, info);
  // cv::imdecode's transformations for an 8-bit image of 1 or 3 channels.
  if (bit_depth == 16) png_set_strip_16(png);
  png_set_strip_alpha(png);
  if (color_type == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
  if ((color_type & PNG_COLOR_MASK_COLOR) == 0 && bit_depth < 8) png_set_expand_gray_1_2_4_to_8(png);
  if (channels == 3 && (color_type & PNG_COLOR_MASK_COLOR) == 0) png_set_gray_to_rgb(png);
  if (channels == 1) png_set_rgb_to_gray(png, 1, 0.299, 0.587);
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  const int height = static_cast<int>(png_get_image_height(png, info)), width = static_cast<int>(png_get_image_width(png, info));
  decoded.create(height, width, channels == 3 ? CV_8UC3 : CV_8UC1);
  rows.resize(static_cast<size_t>(height));
  for (int y = 0; y < height; ++y) rows[size_t(y)] = decoded.ptr<uint8_t>(y);
  png_read_image(png, rows.data());
  png_read_end(png, nullptr);
  png_destroy_read_struct(&png, &info, nullptr);
  return decoded;
}

}  // namespace fastcpp::vision
