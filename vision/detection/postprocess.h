#pragma once
// From a detector's output to each image's detections: boxes, scores and labels, as
// torchvision's postprocess_detections of RetinaNet and SSD give them for the same output
// (the `detection` suite). `detections` picks the detector's own by the output's scoring.
//
//   auto found = vision::detections(model(x));   // one Detections an image
//   found[0].boxes;   // [n, 4] x1 y1 x2 y2 in the input's pixels; .scores [n]; .labels [n]
#include <torch/types.h>

#include <optional>
#include <vector>

#include "vision/detection/boxes.h"

namespace fastcpp::vision {

struct Detections {
  torch::Tensor boxes, scores, labels;  // [n, 4] in the input's pixels, [n], [n] int64 (object classes 0..K-1)
};

// Each field left empty takes the detector's own value (RetinaNet's | SSD's, torchvision's).
struct PostprocessOptions {
  std::optional<double> score_threshold;         // 0.05 | 0.01
  std::optional<double> nms_threshold;           // 0.5 | 0.45
  std::optional<int64_t> detections_per_image;   // 300 | 200
  std::optional<int64_t> candidates;             // best scores kept before NMS: 1000 a map | 400 a class
  std::optional<BoxCoder> coder;                 // weights 1 | 10, 10, 5, 5
};

// RetinaNet's: per map, the scores above the threshold (a sigmoid a class and anchor), the
// best `candidates` of them decoded and clipped to the image; then NMS within each class
// over all maps, the best detections_per_image kept.
std::vector<Detections> retinanet_detections(const torch::Tensor& output, const PostprocessOptions& options = {});
// SSD's: every anchor's box decoded and clipped; per class, the scores (a softmax over
// background and classes) above the threshold, the best `candidates` of them; then NMS
// within each class, the best detections_per_image kept.
std::vector<Detections> ssd_detections(const torch::Tensor& output, const PostprocessOptions& options = {});
// The output's own: retinanet_detections for sigmoid scoring, ssd_detections for softmax.
std::vector<Detections> detections(const torch::Tensor& output, const PostprocessOptions& options = {});

}  // namespace fastcpp::vision
