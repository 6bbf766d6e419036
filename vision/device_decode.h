#pragma once
// Images decoded and cropped on the loader's device (ImageFolderOptions::decode =
// Decode::Device). A loader worker reads a batch's files and draws each item's crop plan
// from its JPEG header, exactly as the CPU path draws it from the decoded image (at the
// reduced size the CPU path would decode it at, then scaled to the full size); files the
// device cannot take (not a JPEG, CMYK, an EXIF rotation, transforms that are not one crop)
// are decoded and transformed on the worker as usual. On the device, the JPEGs are decoded
// in one batch into a canvas of the largest size (nvJPEG on a GPU, its hardware decoder
// where there is one; libjpeg on the CPU), and one grid_sample crops, resizes and flips
// every item at once: bilinear, the crop's edge pixels repeated, and, where a crop
// shrinks more than twice both ways, the average of several samples a pixel, as
// OpenCV's resize averages areas there (a second grid_sample for those).
#include <torch/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "data/device_stage.h"
#include "vision/transforms.h"

namespace fastcpp::vision {

struct EncodedImage {
  std::string path;
  std::vector<uint8_t> jpeg;  // the file, to decode on the device; empty where `ready` holds the item
  cv::Size size;              // the JPEG's full size
  CropPlan plan;              // in the full-size image's pixels; out is the batch's item size
  torch::Tensor ready;        // [C, H, W] uint8: decoded and transformed on the worker
};

class DeviceDecode : public DeviceStage {
 public:
  DeviceDecode(std::vector<EncodedImage> items, cv::Size out);
  torch::Tensor run(torch::Device device) const override;
  const std::vector<EncodedImage>& items() const { return items_; }

 private:
  std::vector<EncodedImage> items_;
  cv::Size out_;
};

// The decoder that run() uses for JPEGs on `device`, in words ("nvJPEG, hardware
// backend", "libjpeg on the CPU"); an explanation where the device has none.
std::string device_decoder_name(torch::Device device);

}  // namespace fastcpp::vision
