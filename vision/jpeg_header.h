#pragma once
// What a JPEG's headers say without decoding it: its size and colour components (the
// frame header), its EXIF orientation, whether its data end with the end-of-image
// marker; and the reduced size decode_image decodes it at (libjpeg's 1/2, 1/4, 1/8).
#include <opencv2/core.hpp>

#include <cstdint>
#include <vector>

namespace fastcpp::vision {

struct JpegHeader {
  cv::Size size;        // {0, 0}: not a JPEG, or no frame header found
  int components = 0;   // 1: grey, 3: YCbCr (or RGB), 4: CMYK or YCCK
  int orientation = 1;  // EXIF orientation, 1..8 (1: as stored)
  size_t first_scan = 0;  // where the image data start (0: not found)
};

bool is_jpeg(const std::vector<uint8_t>& bytes);
JpegHeader read_jpeg_header(const std::vector<uint8_t>& bytes);
// Turns `image` as an EXIF `orientation` says (what cv::imdecode does with a JPEG's): the
// stored pixels to the picture as it is shown.
void apply_orientation(cv::Mat& image, int orientation);
// The end-of-image marker FF D9 after the image data (bytes may follow it): without it
// libjpeg only warns and greys out the rest. `header` is read_jpeg_header(bytes).
bool has_jpeg_end(const std::vector<uint8_t>& bytes, const JpegHeader& header);
// The largest of 1, 2, 4, 8 that keeps the short side of `size` at least min_side (1 for min_side 0).
int jpeg_reduction(cv::Size size, int min_side);
// The size libjpeg decodes an image of `size` at 1/factor: each side rounded up.
cv::Size reduced_size(cv::Size size, int factor);
// Whether an image of `size` is within what the decoders allocate (OpenCV's limits: each
// side at most 2^20, at most 2^30 pixels), so that a damaged header cannot ask for more.
bool decodable_size(cv::Size size);

}  // namespace fastcpp::vision
