#pragma once
// Image files: decoding (JPEG, PNG, BMP, ...; RGB order, or grayscale) with OpenCV's
// imgcodecs, or JPEG and PNG with libjpeg and libpng where OpenCV has no imgcodecs
// (vision/decoders.h), at reduced size when the consumer needs fewer pixels; PNG
// writing; and the conversion of an 8-bit image to a CHW uint8 tensor.
#include <opencv2/core.hpp>
#include <torch/types.h>

#include <string>
#include <vector>

namespace fastcpp::vision {

struct DecodeOptions {
  int channels = 3;    // 3: RGB, 1: grayscale
  int min_side = 0;    // JPEG only: decode at 1/2, 1/4 or 1/8 size while the short side stays >= min_side
  bool rgb = true;     // false: OpenCV's BGR order, saving a pass when the caller swaps on copy
};

// The file's pixels, 8-bit, RGB (or single-channel). Throws fastcpp::Error naming the
// file if it cannot be read or is not a decodable image.
cv::Mat read_image(const std::string& path, DecodeOptions options = {});
// The file's bytes; throws fastcpp::Error naming it if it cannot be read or is empty.
std::vector<uint8_t> read_image_bytes(const std::string& path);
cv::Mat decode_image(const std::vector<uint8_t>& bytes, const std::string& path, DecodeOptions options = {});

// Writes an 8-bit image (3 channels: RGB, or BGR with bgr = true; or 1, grey) as a PNG
// file, atomically. Throws fastcpp::Error naming the file.
void write_png(const std::string& path, const cv::Mat& image, bool bgr = false);

// Width and height of a JPEG, PNG or BMP as decoded (a JPEG's EXIF quarter turn applied, as
// the decoders apply it), from its header without decoding; {0, 0} if unknown.
cv::Size image_header_size(const std::vector<uint8_t>& bytes);

// HWC 8-bit image -> CHW uint8 tensor (a copy); reverse_channels turns BGR into RGB.
torch::Tensor image_to_tensor(const cv::Mat& image, bool reverse_channels = false);
// Writes a HWC image into a preallocated CHW uint8 tensor of the same size.
void copy_image_to(const cv::Mat& image, torch::Tensor& chw, bool reverse_channels = false);

}  // namespace fastcpp::vision
