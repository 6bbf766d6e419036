#pragma once
// Box arithmetic for detection, as torchvision.ops has it: formats, areas, IoU and
// generalized IoU, clipping, the box coder of Faster R-CNN / RetinaNet / SSD, NMS per
// image and per class, and the sigmoid focal loss. Each equals torchvision's on the same
// inputs (the `detection` test suite, fixtures from tests/fixtures/torchvision_models.py):
// values to float rounding, NMS's kept indices exactly.
//
// Boxes are [N, 4] floating tensors, (x1, y1, x2, y2) unless a format says otherwise.
// NMS is ours rather than torchvision's C++ operator: the wheel ships that inside its
// Python extension (_C.so, linked to libtorch_python and so to a Python interpreter), not
// as a library a C++ program can link. Ours is the same greedy algorithm with the same
// stable descending sort and float arithmetic, so it keeps the same indices.
#include <torch/types.h>

#include <array>
#include <cmath>

namespace fastcpp::vision {

enum class BoxFormat {
  xyxy,    // corners: x1, y1, x2, y2
  xywh,    // COCO's: x1, y1, width, height
  cxcywh,  // centre x, centre y, width, height
};

torch::Tensor box_convert(const torch::Tensor& boxes, BoxFormat from, BoxFormat to);
torch::Tensor box_area(const torch::Tensor& boxes);
// [N, M]: the IoU of each box of `a` with each of `b`.
torch::Tensor box_iou(const torch::Tensor& a, const torch::Tensor& b);
// [N, M]: IoU minus the share of the smallest enclosing box that the union leaves empty.
torch::Tensor generalized_box_iou(const torch::Tensor& a, const torch::Tensor& b);
// Each corner clamped into an image of this size.
torch::Tensor clip_boxes_to_image(const torch::Tensor& boxes, int64_t height, int64_t width);
// Indices of the boxes at least min_size wide and high.
torch::Tensor remove_small_boxes(const torch::Tensor& boxes, double min_size);

// torchvision's BoxCoder: boxes as offsets from reference boxes (anchors), the centre's
// shift in widths and heights and the log of the size ratio, each times its weight.
struct BoxCoder {
  std::array<double, 4> weights{1, 1, 1, 1};  // RetinaNet's; Faster R-CNN's heads use {10, 10, 5, 5}
  double bbox_xform_clip = std::log(1000.0 / 16);  // the largest log-ratio decode applies

  // [N, 4] codes of `boxes` (targets) from `anchors`, both [N, 4].
  torch::Tensor encode(const torch::Tensor& boxes, const torch::Tensor& anchors) const;
  // [N, 4 * K] boxes from codes [N, 4 * K] (K boxes per anchor) and anchors [N, 4].
  torch::Tensor decode(const torch::Tensor& codes, const torch::Tensor& anchors) const;
};

// 1 - generalized IoU of each box of `a` with the box of `b` in the same row ([N, 4] each),
// [N]: torchvision.ops.generalized_box_iou_loss unreduced (eps keeps empty boxes finite).
torch::Tensor generalized_box_iou_loss(const torch::Tensor& a, const torch::Tensor& b, double eps = 1e-7);

// Greedy non-maximum suppression: the indices of the boxes kept, by decreasing score;
// a box goes when its IoU with a kept one is above iou_threshold. Runs on the host
// (boxes on a GPU are copied there and the indices back).
torch::Tensor nms(const torch::Tensor& boxes, const torch::Tensor& scores, double iou_threshold);
// NMS within each class (idxs [N]: a box's class): boxes of other classes never suppress
// each other. As torchvision: one NMS over boxes moved apart by class, or, past 4000
// coordinates on the CPU, one NMS per class; the indices by decreasing score.
torch::Tensor batched_nms(const torch::Tensor& boxes, const torch::Tensor& scores, const torch::Tensor& idxs,
                          double iou_threshold);

enum class Reduction { none, mean, sum };
// RetinaNet's focal loss on logits and {0, 1} targets of the same shape: binary
// cross-entropy times (1 - p_t)^gamma, times alpha for positives and 1 - alpha for
// negatives (alpha < 0: no weighting).
torch::Tensor sigmoid_focal_loss(const torch::Tensor& logits, const torch::Tensor& targets, double alpha = 0.25,
                                 double gamma = 2, Reduction reduction = Reduction::none);

}  // namespace fastcpp::vision
