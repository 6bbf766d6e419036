#pragma once
// COCO's box average precision and recall, as pycocotools' COCOeval computes them (iouType
// "bbox", area "all", at most 100 detections an image and class): detections matched
// greedily by score to unmatched ground truth of their class at IoU thresholds 0.5, 0.55
// ... 0.95, precision made monotone and read at 101 recall points, averaged over
// thresholds, recall points and the classes that have ground truth. Equal to pycocotools' on the same boxes
// (the `detection` suite, to 1e-6). A crowd region of the ground truth (ImageBoxes's
// crowd_boxes: COCO's iscrowd annotations, which from_coco's loaders carry) is matched only
// by a detection that matches no object of its class, with the part of the detection inside
// it as the IoU, and such a detection counts as neither right nor wrong. Detections of equal
// score in different images count in the order the images were added (pycocotools: by
// image id). As a metric it evaluates the validation items' boxes: after their item
// transforms, and as the loaders read them (cut to the image, those without area left out).
//
//   vision::CocoEvaluator eval(num_classes);
//   eval.add(detections_of_image, truth_of_image);   // image by image
//   auto ap = eval.evaluate();                         // ap.ap, ap.ap50, ap.ap75, ap.per_class, ap.ar100
//
// As metrics the Recorder shows each epoch: metrics::coco_map(), coco_map50(), or both at
// the cost of one (metrics::coco_maps()), over the detector outputs of the validation set.
#include <torch/types.h>

#include <array>
#include <functional>
#include <vector>

#include "learner/metrics.h"
#include "vision/detection/detector_output.h"
#include "vision/detection/postprocess.h"

namespace fastcpp::vision {

struct CocoAP {
  double ap = -1, ap50 = -1, ap75 = -1;  // -1: no ground truth at all
  std::vector<double> per_class;         // AP@[.5:.95] of each class; -1 where it has no ground truth
  // Average recall over the thresholds and classes, from each image's best 1, 10 and
  // max_detections (100 by default) detections of a class: pycocotools' AR@1, AR@10, AR@100.
  double ar1 = -1, ar10 = -1, ar100 = -1;
};

class CocoEvaluator {
 public:
  explicit CocoEvaluator(int64_t num_classes, int64_t max_detections = 100);
  // One image: its detections (boxes x1 y1 x2 y2, scores, labels) and ground truth.
  void add(const Detections& found, const ImageBoxes& truth);
  CocoAP evaluate() const;
  void clear() { images_.clear(); }

 private:
  struct Image {
    std::vector<std::array<double, 4>> found, truth, crowds;  // x, y, width, height: pycocotools' boxes
    std::vector<double> scores;
    std::vector<int64_t> found_labels, truth_labels, crowd_labels;
  };
  int64_t num_classes_, max_detections_;
  std::vector<Image> images_;
};

// Turns a batch's detector output into detections (by default `detections`: the detector's own).
using DecodeDetections = std::function<std::vector<Detections>(const torch::Tensor& output)>;

namespace metrics {
// AP@[.5:.95] ("coco_map") and AP@.5 ("coco_map50") over the validation set.
MetricPtr coco_map(DecodeDetections decode = {});
MetricPtr coco_map50(DecodeDetections decode = {});
// Both, {coco_map, coco_map50}, from one decoding a batch and one evaluation a validation
// (two separate metrics would each decode and evaluate).
std::vector<MetricPtr> coco_maps(DecodeDetections decode = {});
}  // namespace metrics

// The whole evaluation behind a coco_map or coco_map50 metric's last value (per-class AP
// included); a fastcpp::Error for another metric or one that has seen no batch.
CocoAP coco_ap(const Metric& metric);

}  // namespace fastcpp::vision
