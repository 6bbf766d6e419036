#include "vision/detection/anchors.h"

#include <torch/torch.h>

#include <cmath>
#include <string>

#include "core/error.h"
#include "core/spec_text.h"
#include "vision/detection/boxes.h"

namespace fastcpp::vision {

torch::Tensor AnchorGenerator::cell_anchors(size_t k) const {
  if (k >= sizes.size() || k >= aspect_ratios.size())
    throw Error("AnchorGenerator: no sizes or aspect ratios for feature map " + std::to_string(k) + " (it has " +
                std::to_string(sizes.size()) + " sizes and " + std::to_string(aspect_ratios.size()) + " ratio lists)");
  const auto scales = torch::tensor(sizes[k], torch::kFloat);
  const auto h_ratios = torch::sqrt(torch::tensor(aspect_ratios[k], torch::kFloat));
  const auto w_ratios = 1 / h_ratios;
  const auto ws = (w_ratios.unsqueeze(1) * scales.unsqueeze(0)).view(-1);
  const auto hs = (h_ratios.unsqueeze(1) * scales.unsqueeze(0)).view(-1);
  return (torch::stack({-ws, -hs, ws, hs}, 1) / 2).round();
}

torch::Tensor AnchorGenerator::grid_anchors(const std::vector<std::pair<int64_t, int64_t>>& feature_sizes,
                                            std::pair<int64_t, int64_t> image_size) const {
  if (feature_sizes.size() != sizes.size())
    throw Error("AnchorGenerator: " + std::to_string(feature_sizes.size()) + " feature maps but sizes for " +
                std::to_string(sizes.size()));
  std::vector<torch::Tensor> anchors;
  for (size_t k = 0; k < feature_sizes.size(); ++k) {
    const auto [rows, cols] = feature_sizes[k];
    const int64_t stride_y = image_size.first / rows, stride_x = image_size.second / cols;
    const auto shifts_x = torch::arange(cols, torch::kInt) * static_cast<int>(stride_x);
    const auto shifts_y = torch::arange(rows, torch::kInt) * static_cast<int>(stride_y);
    const auto grid = torch::meshgrid({shifts_y, shifts_x}, "ij");
    const auto x = grid[1].reshape(-1), y = grid[0].reshape(-1);
    const auto shifts = torch::stack({x, y, x, y}, 1);
    anchors.push_back((shifts.view({-1, 1, 4}) + cell_anchors(k).view({1, -1, 4})).reshape({-1, 4}));
  }
  return torch::cat(anchors);
}

namespace {

void check_thresholds(const Matcher& m) {
  if (!(m.low <= m.high))  // torchvision's Matcher asserts it too
    throw Error("Matcher: low (" + spec_text::number(m.low) + ") must not exceed high (" + spec_text::number(m.high) +
                "), the IoU from which an anchor is matched");
}

}  // namespace

torch::Tensor Matcher::match(const torch::Tensor& boxes, const torch::Tensor& anchors) const {
  if (boxes.size(0) == 0) {
    check_thresholds(*this);  // operator() checks them otherwise
    return torch::full({anchors.size(0)}, below_low_threshold, torch::dtype(torch::kLong).device(anchors.device()));
  }
  return (*this)(box_iou(boxes.to(anchors.dtype()), anchors));
}

AnchorGenerator retinanet_anchor_generator() {
  AnchorGenerator generator;
  for (const double side : {32.0, 64.0, 128.0, 256.0, 512.0}) {
    generator.sizes.push_back({side, std::floor(side * std::pow(2.0, 1.0 / 3)), std::floor(side * std::pow(2.0, 2.0 / 3))});
    generator.aspect_ratios.push_back({0.5, 1.0, 2.0});
  }
  return generator;
}

torch::Tensor DefaultBoxGenerator::grid_anchors(const std::vector<std::pair<int64_t, int64_t>>& feature_sizes,
                                                 std::pair<int64_t, int64_t> image_size) const {
  const auto maps = feature_sizes.size();
  if (aspect_ratios.size() != maps || scales.size() != maps + 1 || (!steps.empty() && steps.size() != maps))
    throw Error("DefaultBoxGenerator: " + std::to_string(maps) + " feature maps need as many aspect ratio lists (got " +
                std::to_string(aspect_ratios.size()) + "), one scale more (got " + std::to_string(scales.size()) +
                ") and as many steps or none (got " + std::to_string(steps.size()) + ")");
  const auto [image_h, image_w] = image_size;
  // The steps were chosen for one image size (SSD300's 300: 38 cells of 8 pixels); at another,
  // where a map has more or fewer cells than its step allows, the cells would fall off the
  // image, so every map's boxes are spread over its own cells instead.
  bool steps_fit = !steps.empty();
  for (size_t k = 0; k < maps && steps_fit; ++k)
    steps_fit = std::ceil(double(image_h) / steps[k]) == double(feature_sizes[k].first) &&
                std::ceil(double(image_w) / steps[k]) == double(feature_sizes[k].second);
  std::vector<torch::Tensor> boxes;
  for (size_t k = 0; k < maps; ++k) {
    // widths and heights as fractions of the image, in double as torchvision builds them
    std::vector<double> wh{scales[k], scales[k], std::sqrt(scales[k] * scales[k + 1]), std::sqrt(scales[k] * scales[k + 1])};
    for (const double ratio : aspect_ratios[k]) {
      const double w = scales[k] * std::sqrt(ratio), h = scales[k] / std::sqrt(ratio);
      wh.insert(wh.end(), {w, h, h, w});
    }
    auto pairs = torch::tensor(wh, torch::kFloat).view({-1, 2});
    if (clip) pairs = pairs.clamp(0, 1);
    const auto [rows, cols] = feature_sizes[k];
    const double cells_x = steps_fit ? double(image_w) / steps[k] : double(cols);
    const double cells_y = steps_fit ? double(image_h) / steps[k] : double(rows);
    const auto grid = torch::meshgrid({(torch::arange(rows) + 0.5) / cells_y, (torch::arange(cols) + 0.5) / cells_x}, "ij");
    const auto centres = torch::stack({grid[1].reshape(-1), grid[0].reshape(-1)}, 1);  // [cells, 2]: x, y
    const auto per_cell = pairs.size(0);
    const auto c = centres.repeat_interleave(per_cell, 0), size = pairs.repeat({rows * cols, 1});
    const auto scale = torch::tensor({image_w, image_h});
    boxes.push_back(torch::cat({(c - 0.5 * size) * scale, (c + 0.5 * size) * scale}, 1));
  }
  return torch::cat(boxes);
}

DefaultBoxGenerator ssd300_default_boxes() {
  return {.aspect_ratios = {{2}, {2, 3}, {2, 3}, {2, 3}, {2}, {2}},
          .scales = {0.07, 0.15, 0.33, 0.51, 0.69, 0.87, 1.05},
          .steps = {8, 16, 32, 64, 100, 300}};
}

torch::Tensor Matcher::operator()(const torch::Tensor& quality) const {
  check_thresholds(*this);
  if (quality.dim() != 2) throw Error("Matcher: expected an IoU matrix [boxes, anchors], got " + c10::str(quality.sizes()));
  if (quality.size(0) == 0) throw Error("Matcher: an image has no ground-truth boxes");
  if (quality.size(1) == 0) throw Error("Matcher: there are no anchors");
  const auto [best, matches_of_best] = quality.max(0);
  auto matches = matches_of_best.clone();
  matches.masked_fill_(best < low, below_low_threshold);
  matches.masked_fill_((best >= low).logical_and(best < high), between_thresholds);
  if (allow_low_quality_matches) {
    // Each box's best anchors (ties included) get their box back.
    const auto best_of_box = std::get<0>(quality.max(1));
    const auto anchors = torch::where(quality == best_of_box.unsqueeze(1))[1];
    matches.index_put_({anchors}, matches_of_best.index({anchors}));
  }
  if (each_box_takes_its_best_anchor) {
    const auto best_anchor = std::get<1>(quality.max(1));
    matches.index_put_({best_anchor}, torch::arange(quality.size(0), matches.options()));
  }
  return matches;
}

}  // namespace fastcpp::vision
