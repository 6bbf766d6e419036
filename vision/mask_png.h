#pragma once
// Class masks as pictures: one colour per class (0, the background, black; a void index
// white), as RGB pixels or a PNG file (the project's own PNG writer: with or without
// OpenCV).
#include <torch/types.h>

#include <array>
#include <optional>
#include <string>

namespace fastcpp::vision {

// The colour of class `index` in masks (0: black); detection boxes of object class k take
// index k + 1's.
std::array<uint8_t, 3> class_colour(int64_t index);
// [H, W] class indices -> [H, W, 3] uint8 RGB.
torch::Tensor colour_mask(const torch::Tensor& mask, std::optional<int64_t> void_index = std::nullopt);
// Written atomically.
void write_mask_png(const std::string& path, const torch::Tensor& mask, std::optional<int64_t> void_index = std::nullopt);

}  // namespace fastcpp::vision
