#pragma once
// Anchors and their matching to ground truth, as torchvision's detection models have
// them: AnchorGenerator (RetinaNet's: boxes of each size and aspect ratio at every cell of
// every feature map, in pixels), DefaultBoxGenerator (SSD's: the same, in fractions of the
// image) and Matcher (each anchor's ground-truth box by IoU, or below / between the
// thresholds). Equal to torchvision's on the same inputs (the `detection` suite).
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

// SSD's default boxes (Liu et al., section 2.2): map k has boxes of scale s_k and
// sqrt(s_k * s_k+1) (fractions of the image's side) and, for each aspect ratio r, of
// s_k * sqrt(r) by s_k / sqrt(r) and the transposed box; centred on each cell at
// (i + 0.5) * steps[k] pixels where the steps fit the image (each map has as many cells as
// the image divided by its step, rounded up: SSD300's at 300 pixels), else at the map's own
// cells, (i + 0.5) * image / cells.
struct DefaultBoxGenerator {
  std::vector<std::vector<double>> aspect_ratios;  // per map, besides 1 (each gives two boxes)
  std::vector<double> scales;                      // one a map, and one more (the last map's s_k+1)
  std::vector<double> steps;                       // per map, in pixels; empty: image size / map size
  bool clip = true;                                // widths and heights (as fractions) at most 1

  int64_t anchors_per_cell(size_t k) const { return 2 + 2 * static_cast<int64_t>(aspect_ratios.at(k).size()); }
  // One image's boxes [sum of H * W * A over the maps, 4], x1 y1 x2 y2 in pixels, map by
  // map, cell by cell, the cell's boxes in the order above.
  torch::Tensor grid_anchors(const std::vector<std::pair<int64_t, int64_t>>& feature_sizes,
                             std::pair<int64_t, int64_t> image_size) const;
};

// torchvision's ssd300_vgg16's: six maps, scales 0.07 to 1.05, steps 8 to 300 pixels.
DefaultBoxGenerator ssd300_default_boxes();

// Each anchor's ground-truth box: the index of the box it overlaps most, or
// below_low_threshold (-1) where that IoU is under `low`, between_thresholds (-2) where it
// is in [low, high). With allow_low_quality_matches, every box keeps the anchors it
// overlaps most even under the thresholds (RetinaNet's and Faster R-CNN's RPN). With
// each_box_takes_its_best_anchor, every box takes the one anchor that overlaps it most,
// whatever its IoU and match (SSD's; a later box wins an anchor two boxes share).
struct Matcher {
  static constexpr int64_t below_low_threshold = -1, between_thresholds = -2;
  double high = 0.5, low = 0.4;
  bool allow_low_quality_matches = true;
  bool each_box_takes_its_best_anchor = false;

  // quality: [boxes, anchors] (box_iou of the boxes and the anchors); returns [anchors].
  torch::Tensor operator()(const torch::Tensor& quality) const;
  // The same from one image's ground-truth boxes [n, 4] and anchors [A, 4]; with no boxes,
  // every anchor below_low_threshold.
  torch::Tensor match(const torch::Tensor& boxes, const torch::Tensor& anchors) const;
};

}  // namespace fastcpp::vision
