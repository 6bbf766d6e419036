#pragma once
// Anchors and their matching to ground truth, as torchvision's detection models have
// them: AnchorGenerator (boxes of each size and aspect ratio at every cell of every
// feature map) and Matcher (each anchor's ground-truth box by IoU, or below / between
// the thresholds). Equal to torchvision's on the same inputs (the `detection` suite).
#include <torch/types.h>

#include <utility>
#include <vector>

namespace fastcpp::vision {

struct AnchorGenerator {
  std::vector<std::vector<double>> sizes;          // per feature map: the anchors' sides (square roots of their areas)
  std::vector<std::vector<double>> aspect_ratios;  // per feature map: height / width

  // Anchors on each cell of map k: its sizes times its aspect ratios.
  int64_t anchors_per_cell(size_t k) const { return static_cast<int64_t>(sizes.at(k).size() * aspect_ratios.at(k).size()); }
  // The anchors of map k centred on 0, [ratios x sizes, 4], rounded to whole pixels.
  torch::Tensor cell_anchors(size_t k) const;
  // One image's anchors [sum of H * W * A over the maps, 4]: map k's cell anchors moved
  // to each of its cells (strides: image size / map size, whole pixels), map by map,
  // row by row. `feature_sizes`: {H, W} of each map; `image_size`: {H, W} of the
  // (padded) batch.
  torch::Tensor grid_anchors(const std::vector<std::pair<int64_t, int64_t>>& feature_sizes,
                             std::pair<int64_t, int64_t> image_size) const;
};

// RetinaNet's: sides 32 * 2^(k + j/3) (j = 0, 1, 2, whole pixels) on its 5 maps, aspect
// ratios 0.5, 1 and 2 everywhere.
AnchorGenerator retinanet_anchor_generator();

// Each anchor's ground-truth box: the index of the box it overlaps most, or
// below_low_threshold (-1) where that IoU is under `low`, between_thresholds (-2) where it
// is in [low, high). With allow_low_quality_matches, every box keeps the anchors it
// overlaps most even under the thresholds (RetinaNet's and Faster R-CNN's RPN).
struct Matcher {
  static constexpr int64_t below_low_threshold = -1, between_thresholds = -2;
  double high = 0.5, low = 0.4;
  bool allow_low_quality_matches = true;

  // quality: [boxes, anchors] (box_iou of the boxes and the anchors); returns [anchors].
  torch::Tensor operator()(const torch::Tensor& quality) const;
};

}  // namespace fastcpp::vision
