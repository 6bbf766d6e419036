#pragma once
// JPEG and PNG decoded by libjpeg(-turbo) and libpng themselves, with cv::imdecode's
// conventions, so that the pixels are OpenCV's for the same bytes: 8-bit RGB or grey,
// 16-bit samples cut to 8 bits, alpha dropped, palettes and low bit depths expanded, a
// JPEG's EXIF orientation applied, and JPEGs optionally decoded at 1/2, 1/4 or 1/8 of
// their size. decode_image (vision/image.h) uses them where OpenCV was built without
// its imgcodecs module (the GPU machines carry only OpenCV's core and imgproc).
#include <opencv2/core.hpp>

#include <cstdint>
#include <vector>

namespace fastcpp::vision {

// channels: 3 (RGB) or 1. Throw std::runtime_error with the library's complaint.
cv::Mat libjpeg_decode(const std::vector<uint8_t>& bytes, int channels, int scale_denom = 1);
// Only `region` of the image decoded at 1/scale_denom (in that size's pixels), in BGR
// order: the rows above it skipped, the columns beside it (but for a block's alignment)
// never transformed, the rows below never read; the pixels of the whole image's decode.
// For a JPEG without an EXIF rotation and of 1 or 3 components.
cv::Mat libjpeg_decode_region(const std::vector<uint8_t>& bytes, int scale_denom, cv::Rect region);
cv::Mat libpng_decode(const std::vector<uint8_t>& bytes, int channels);

}  // namespace fastcpp::vision
