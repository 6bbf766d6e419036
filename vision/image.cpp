#include "vision/image.h"

#include <torch/torch.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <opencv2/imgproc.hpp>
#include <stdexcept>

#include "core/error.h"
#include "formats/file_io.h"
#include "formats/png.h"
#include "vision/jpeg_header.h"
#if FASTCPP_HAS_IMGCODECS
#include <opencv2/imgcodecs.hpp>
#else
#include "vision/decoders.h"
#endif

namespace fastcpp::vision {
namespace {

bool starts_with(const std::vector<uint8_t>& b, std::initializer_list<uint8_t> prefix, size_t at = 0) {
  return b.size() >= at + prefix.size() && std::equal(prefix.begin(), prefix.end(), b.begin() + static_cast<std::ptrdiff_t>(at));
}

// The formats the loader decodes, by their signatures. OpenCV would otherwise hand any
// file to whichever of its decoders claims it (DICOM, JPEG 2000, OpenEXR, ...), and
// some of those abort the process on a damaged file rather than fail. Where the decoder a
// signature names turns a file down (OpenCV's WebP check parses the first chunk), OpenCV
// goes on to the decoders that look past the start: DICOM's "DICM" at byte 128 and GDAL's
// "DTED" at 140. A file carrying those is refused whatever it starts with.
bool is_decodable_format(const std::vector<uint8_t>& b) {
  if (starts_with(b, {'D', 'I', 'C', 'M'}, 128) || starts_with(b, {'D', 'T', 'E', 'D'}, 140)) return false;
  return is_jpeg(b) || starts_with(b, {0x89, 'P', 'N', 'G', 0x0D, 0x0A, 0x1A, 0x0A}) || starts_with(b, {'B', 'M'}) ||
         starts_with(b, {'I', 'I', 0x2A, 0x00}) || starts_with(b, {'M', 'M', 0x00, 0x2A}) ||  // TIFF
         (starts_with(b, {'R', 'I', 'F', 'F'}) && starts_with(b, {'W', 'E', 'B', 'P'}, 8)) ||
         // PBM, PGM, PPM: as strict as OpenCV's own check, so that no other decoder is tried
         (b.size() > 2 && b[0] == 'P' && b[1] >= '1' && b[1] <= '6' && std::isspace(b[2]));
}

#if FASTCPP_HAS_IMGCODECS
int reduction_flag(int factor, bool gray) {
  switch (factor) {
    case 2: return gray ? cv::IMREAD_REDUCED_GRAYSCALE_2 : cv::IMREAD_REDUCED_COLOR_2;
    case 4: return gray ? cv::IMREAD_REDUCED_GRAYSCALE_4 : cv::IMREAD_REDUCED_COLOR_4;
    case 8: return gray ? cv::IMREAD_REDUCED_GRAYSCALE_8 : cv::IMREAD_REDUCED_COLOR_8;
    default: return gray ? cv::IMREAD_GRAYSCALE : cv::IMREAD_COLOR;
  }
}

// OpenCV's decoders, in BGR order. Only a JPEG's EXIF orientation turns it, as the direct
// decoders do (OpenCV would turn a PNG or TIFF by theirs too).
cv::Mat decode_bgr(const std::vector<uint8_t>& bytes, const std::string& path, int factor, bool gray) {
  const int orientation = is_jpeg(bytes) ? 0 : cv::IMREAD_IGNORE_ORIENTATION;
  try {
    return cv::imdecode(cv::Mat(1, static_cast<int>(bytes.size()), CV_8U, const_cast<uint8_t*>(bytes.data())),
                        reduction_flag(factor, gray) | orientation);
  } catch (const cv::Exception& e) {
    throw Error("cannot decode image '" + path + "': " + e.what());
  }
}
#else
bool is_png(const std::vector<uint8_t>& b) { return starts_with(b, {0x89, 'P', 'N', 'G'}); }

// libjpeg's and libpng's decoders, in RGB order.
cv::Mat decode_rgb(const std::vector<uint8_t>& bytes, const std::string& path, int factor, bool gray) {
  if (!is_jpeg(bytes) && !is_png(bytes))
    throw Error("cannot decode image '" + path + "': this build decodes JPEG and PNG only (OpenCV without imgcodecs)");
  try {
    return is_jpeg(bytes) ? libjpeg_decode(bytes, gray ? 1 : 3, factor) : libpng_decode(bytes, gray ? 1 : 3);
  } catch (const std::runtime_error& e) {
    throw Error("cannot decode image '" + path + "': " + e.what());
  }
}
#endif

}  // namespace

cv::Size image_header_size(const std::vector<uint8_t>& b) {
  auto be16 = [&](size_t i) { return int(b[i]) << 8 | int(b[i + 1]); };
  if (b.size() >= 24 && b[0] == 0x89 && b[1] == 'P' && b[2] == 'N' && b[3] == 'G')
    return {be16(16) << 16 | be16(18), be16(20) << 16 | be16(22)};
  if (b.size() >= 26 && b[0] == 'B' && b[1] == 'M') {
    auto le32 = [&](size_t i) { return int32_t(b[i] | b[i + 1] << 8 | b[i + 2] << 16 | uint32_t(b[i + 3]) << 24); };
    return {std::abs(le32(18)), std::abs(le32(22))};
  }
  const auto jpeg = read_jpeg_header(b);
  return jpeg.orientation >= 5 ? cv::Size(jpeg.size.height, jpeg.size.width) : jpeg.size;  // a quarter turn
}

cv::Mat decode_image(const std::vector<uint8_t>& bytes, const std::string& path, DecodeOptions options) {
  if (options.channels != 1 && options.channels != 3)
    throw Error("decode_image: channels must be 1 or 3, got " + std::to_string(options.channels));
  const bool gray = options.channels == 1;
  if (!is_decodable_format(bytes))
    throw Error("cannot decode image '" + path + "': not a JPEG, PNG, BMP, TIFF, WebP or PNM image");
  int factor = 1;
  if (is_jpeg(bytes)) {
    const auto header = read_jpeg_header(bytes);
    if (!has_jpeg_end(bytes, header))  // libjpeg would only warn and grey out the rest
      throw Error("cannot decode image '" + path + "': truncated JPEG (no end-of-image marker)");
    factor = jpeg_reduction(header.size, options.min_side);
  }
#if FASTCPP_HAS_IMGCODECS
  cv::Mat image = decode_bgr(bytes, path, factor, gray);
  const bool swap = !gray && options.rgb;
#else
  cv::Mat image = decode_rgb(bytes, path, factor, gray);
  const bool swap = !gray && !options.rgb;
#endif
  if (image.empty()) throw Error("cannot decode image '" + path + "': not an image, or corrupt or truncated");
  if (swap) cv::cvtColor(image, image, cv::COLOR_BGR2RGB);  // the same swap both ways
  return image;
}

std::vector<uint8_t> read_image_bytes(const std::string& path) {
  std::error_code error;
  if (std::filesystem::is_directory(path, error)) throw Error("cannot read image '" + path + "': it is a directory");
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) throw Error("cannot open image '" + path + "'");
  const auto size = in.tellg();
  if (size < 0) throw Error("cannot read image '" + path + "'");
  std::vector<uint8_t> bytes(static_cast<size_t>(size));
  in.seekg(0);
  if (!in.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(bytes.size())))
    throw Error("cannot read image '" + path + "'");
  if (bytes.empty()) throw Error("cannot decode image '" + path + "': the file is empty");
  return bytes;
}

cv::Mat read_image(const std::string& path, DecodeOptions options) {
  return decode_image(read_image_bytes(path), path, options);
}

void write_png(const std::string& path, const cv::Mat& image, bool bgr) {
  if (image.depth() != CV_8U || (image.channels() != 1 && image.channels() != 3))
    throw Error("write_png: '" + path + "' must be an 8-bit image of 1 or 3 channels");
  cv::Mat pixels = image;
  if (bgr && image.channels() == 3) cv::cvtColor(image, pixels, cv::COLOR_BGR2RGB);
  if (!pixels.isContinuous()) pixels = pixels.clone();
  const std::vector<uint8_t> bytes(pixels.datastart, pixels.dataend);
  const auto png = encode_png(bytes, pixels.cols, pixels.rows, pixels.channels());
  write_atomically(path, std::vector<char>(png.begin(), png.end()), "image");
}

void copy_image_to(const cv::Mat& image, torch::Tensor& chw, bool reverse_channels) {
  const int h = image.rows, w = image.cols, channels = image.channels();
  // cv::split would reallocate planes of another size or depth and leave the tensor as it was
  if (image.depth() != CV_8U || chw.scalar_type() != torch::kByte || !chw.is_contiguous() ||
      chw.sizes() != torch::IntArrayRef{channels, h, w})
    throw Error("copy_image_to: a " + cv::typeToString(image.type()) + " image of " + std::to_string(w) + "x" +
                std::to_string(h) + " into a " + std::string(c10::toString(chw.scalar_type())) + " tensor " +
                c10::str(chw.sizes()) + " (it takes 8-bit images into uint8 [channels, height, width])");
  auto* out = chw.data_ptr<uint8_t>();
  std::vector<cv::Mat> planes;  // views of the tensor's channel planes: split writes straight into them
  for (int c = 0; c < channels; ++c) {
    const int plane = reverse_channels ? channels - 1 - c : c;
    planes.emplace_back(h, w, CV_8UC1, out + static_cast<size_t>(plane) * h * w);
  }
  cv::split(image, planes);
}

torch::Tensor image_to_tensor(const cv::Mat& image, bool reverse_channels) {
  auto chw = torch::empty({image.channels(), image.rows, image.cols}, torch::kUInt8);
  copy_image_to(image, chw, reverse_channels);
  return chw;
}

}  // namespace fastcpp::vision
