#include "vision/detection/boxes.h"

#include <torch/torch.h>

#include <algorithm>
#include <string>
#include <vector>

#include "core/error.h"

namespace fastcpp::vision {
namespace {

namespace F = torch::nn::functional;
using torch::indexing::None;
using torch::indexing::Slice;

void check_boxes(const std::string& who, const torch::Tensor& boxes) {
  if (boxes.dim() != 2 || boxes.size(1) != 4 || !boxes.is_floating_point())
    throw Error(who + ": expected floating boxes [N, 4], got " + std::string(c10::toString(boxes.scalar_type())) + " " +
                c10::str(boxes.sizes()));
}

// The intersections [N, M] and unions [N, M] of two sets of boxes.
std::pair<torch::Tensor, torch::Tensor> inter_union(const torch::Tensor& a, const torch::Tensor& b) {
  const auto top_left = torch::max(a.index({Slice(), None, Slice(0, 2)}), b.index({Slice(), Slice(0, 2)}));
  const auto bottom_right = torch::min(a.index({Slice(), None, Slice(2, 4)}), b.index({Slice(), Slice(2, 4)}));
  const auto wh = (bottom_right - top_left).clamp_min(0);
  const auto inter = wh.select(2, 0) * wh.select(2, 1);
  return {inter, box_area(a).unsqueeze(1) + box_area(b) - inter};
}

// torchvision's CPU kernel: a stable sort by descending score, then each box in turn
// suppresses the later ones it overlaps by more than the threshold.
template <class T>
torch::Tensor greedy_nms(const torch::Tensor& boxes, const torch::Tensor& scores, double iou_threshold) {
  const auto b = boxes.contiguous();
  const auto* d = b.data_ptr<T>();
  const int64_t n = b.size(0);
  const auto order = std::get<1>(scores.sort(/*stable=*/true, /*dim=*/0, /*descending=*/true)).contiguous();
  const auto* o = order.data_ptr<int64_t>();
  std::vector<T> areas(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) areas[i] = (d[4 * i + 2] - d[4 * i]) * (d[4 * i + 3] - d[4 * i + 1]);
  std::vector<char> suppressed(static_cast<size_t>(n), 0);
  std::vector<int64_t> keep;
  for (int64_t oi = 0; oi < n; ++oi) {
    const int64_t i = o[oi];
    if (suppressed[i]) continue;
    keep.push_back(i);
    for (int64_t oj = oi + 1; oj < n; ++oj) {
      const int64_t j = o[oj];
      if (suppressed[j]) continue;
      const T w = std::max(T(0), std::min(d[4 * i + 2], d[4 * j + 2]) - std::max(d[4 * i], d[4 * j]));
      const T h = std::max(T(0), std::min(d[4 * i + 3], d[4 * j + 3]) - std::max(d[4 * i + 1], d[4 * j + 1]));
      const T inter = w * h;
      if (inter / (areas[i] + areas[j] - inter) > iou_threshold) suppressed[j] = 1;
    }
  }
  return torch::tensor(keep, torch::kLong);
}

}  // namespace

torch::Tensor box_convert(const torch::Tensor& boxes, BoxFormat from, BoxFormat to) {
  check_boxes("box_convert", boxes);
  if (from == to) return boxes.clone();
  auto c = boxes.unbind(1);
  torch::Tensor x1 = c[0], y1 = c[1], x2 = c[2], y2 = c[3];  // to corners first
  if (from == BoxFormat::xywh) {
    x2 = c[0] + c[2];
    y2 = c[1] + c[3];
  } else if (from == BoxFormat::cxcywh) {
    x1 = c[0] - 0.5 * c[2];
    y1 = c[1] - 0.5 * c[3];
    x2 = c[0] + 0.5 * c[2];
    y2 = c[1] + 0.5 * c[3];
  }
  if (to == BoxFormat::xyxy) return torch::stack({x1, y1, x2, y2}, 1);
  if (to == BoxFormat::xywh) return torch::stack({x1, y1, x2 - x1, y2 - y1}, 1);
  return torch::stack({(x1 + x2) / 2, (y1 + y2) / 2, x2 - x1, y2 - y1}, 1);
}

torch::Tensor box_area(const torch::Tensor& boxes) {
  check_boxes("box_area", boxes);
  return (boxes.select(1, 2) - boxes.select(1, 0)) * (boxes.select(1, 3) - boxes.select(1, 1));
}

torch::Tensor box_iou(const torch::Tensor& a, const torch::Tensor& b) {
  check_boxes("box_iou", a);
  check_boxes("box_iou", b);
  const auto [inter, uni] = inter_union(a, b);
  return inter / uni;
}

torch::Tensor generalized_box_iou(const torch::Tensor& a, const torch::Tensor& b) {
  check_boxes("generalized_box_iou", a);
  check_boxes("generalized_box_iou", b);
  const auto [inter, uni] = inter_union(a, b);
  const auto top_left = torch::min(a.index({Slice(), None, Slice(0, 2)}), b.index({Slice(), Slice(0, 2)}));
  const auto bottom_right = torch::max(a.index({Slice(), None, Slice(2, 4)}), b.index({Slice(), Slice(2, 4)}));
  const auto wh = (bottom_right - top_left).clamp_min(0);
  const auto enclosing = wh.select(2, 0) * wh.select(2, 1);
  return inter / uni - (enclosing - uni) / enclosing;
}

torch::Tensor generalized_box_iou_loss(const torch::Tensor& a, const torch::Tensor& b, double eps) {
  if (a.sizes() != b.sizes() || a.dim() != 2 || a.size(1) != 4)
    throw Error("generalized_box_iou_loss: expected two [N, 4] box lists, got " + c10::str(a.sizes()) + " and " +
                c10::str(b.sizes()));
  const auto x1 = a.select(1, 0), y1 = a.select(1, 1), x2 = a.select(1, 2), y2 = a.select(1, 3);
  const auto gx1 = b.select(1, 0), gy1 = b.select(1, 1), gx2 = b.select(1, 2), gy2 = b.select(1, 3);
  const auto iw = torch::min(x2, gx2) - torch::max(x1, gx1), ih = torch::min(y2, gy2) - torch::max(y1, gy1);
  const auto inter = torch::where((iw > 0) & (ih > 0), iw * ih, torch::zeros_like(iw));
  const auto uni = (x2 - x1) * (y2 - y1) + (gx2 - gx1) * (gy2 - gy1) - inter;
  const auto enclosing = (torch::max(x2, gx2) - torch::min(x1, gx1)) * (torch::max(y2, gy2) - torch::min(y1, gy1));
  return 1 - (inter / (uni + eps) - (enclosing - uni) / (enclosing + eps));
}

torch::Tensor clip_boxes_to_image(const torch::Tensor& boxes, int64_t height, int64_t width) {
  check_boxes("clip_boxes_to_image", boxes);
  const auto x = boxes.index({Slice(), Slice(0, None, 2)}).clamp(0, width);
  const auto y = boxes.index({Slice(), Slice(1, None, 2)}).clamp(0, height);
  return torch::stack({x, y}, 2).reshape(boxes.sizes());
}

torch::Tensor remove_small_boxes(const torch::Tensor& boxes, double min_size) {
  check_boxes("remove_small_boxes", boxes);
  const auto w = boxes.select(1, 2) - boxes.select(1, 0), h = boxes.select(1, 3) - boxes.select(1, 1);
  return torch::where((w >= min_size).logical_and(h >= min_size))[0];
}

torch::Tensor BoxCoder::encode(const torch::Tensor& boxes, const torch::Tensor& anchors) const {
  check_boxes("BoxCoder::encode", boxes);
  check_boxes("BoxCoder::encode", anchors);
  const auto [wx, wy, ww, wh] = weights;
  const auto aw = anchors.select(1, 2) - anchors.select(1, 0), ah = anchors.select(1, 3) - anchors.select(1, 1);
  const auto ax = anchors.select(1, 0) + 0.5 * aw, ay = anchors.select(1, 1) + 0.5 * ah;
  const auto bw = boxes.select(1, 2) - boxes.select(1, 0), bh = boxes.select(1, 3) - boxes.select(1, 1);
  const auto bx = boxes.select(1, 0) + 0.5 * bw, by = boxes.select(1, 1) + 0.5 * bh;
  return torch::stack({wx * (bx - ax) / aw, wy * (by - ay) / ah, ww * torch::log(bw / aw), wh * torch::log(bh / ah)}, 1);
}

torch::Tensor BoxCoder::decode(const torch::Tensor& codes, const torch::Tensor& anchors) const {
  check_boxes("BoxCoder::decode", anchors);
  if (codes.dim() != 2 || codes.size(1) % 4 != 0 || codes.size(0) != anchors.size(0))
    throw Error("BoxCoder::decode: expected codes [" + std::to_string(anchors.size(0)) + ", 4 * K], got " +
                c10::str(codes.sizes()));
  const auto boxes = anchors.to(codes.scalar_type());
  const auto [wx, wy, ww, wh] = weights;
  const auto widths = (boxes.select(1, 2) - boxes.select(1, 0)).unsqueeze(1);
  const auto heights = (boxes.select(1, 3) - boxes.select(1, 1)).unsqueeze(1);
  const auto cx = boxes.select(1, 0).unsqueeze(1) + 0.5 * widths, cy = boxes.select(1, 1).unsqueeze(1) + 0.5 * heights;
  const auto dx = codes.index({Slice(), Slice(0, None, 4)}) / wx, dy = codes.index({Slice(), Slice(1, None, 4)}) / wy;
  const auto dw = (codes.index({Slice(), Slice(2, None, 4)}) / ww).clamp_max(bbox_xform_clip);
  const auto dh = (codes.index({Slice(), Slice(3, None, 4)}) / wh).clamp_max(bbox_xform_clip);
  const auto px = dx * widths + cx, py = dy * heights + cy;
  const auto half_w = 0.5 * (torch::exp(dw) * widths), half_h = 0.5 * (torch::exp(dh) * heights);
  return torch::stack({px - half_w, py - half_h, px + half_w, py + half_h}, 2).flatten(1);
}

torch::Tensor nms(const torch::Tensor& boxes, const torch::Tensor& scores, double iou_threshold) {
  check_boxes("nms", boxes);
  if (scores.dim() != 1 || scores.size(0) != boxes.size(0))
    throw Error("nms: expected a score for each of the " + std::to_string(boxes.size(0)) + " boxes, got scores " +
                c10::str(scores.sizes()));
  if (boxes.size(0) == 0) return torch::empty({0}, boxes.options().dtype(torch::kLong));
  const auto host_boxes = boxes.detach().cpu(), host_scores = scores.detach().cpu();
  const auto keep = host_boxes.scalar_type() == torch::kDouble ? greedy_nms<double>(host_boxes, host_scores, iou_threshold)
                                                               : greedy_nms<float>(host_boxes.to(torch::kFloat), host_scores,
                                                                                   iou_threshold);
  return keep.to(boxes.device());
}

torch::Tensor batched_nms(const torch::Tensor& boxes, const torch::Tensor& scores, const torch::Tensor& idxs,
                          double iou_threshold) {
  check_boxes("batched_nms", boxes);
  if (idxs.dim() != 1 || idxs.size(0) != boxes.size(0))
    throw Error("batched_nms: expected a class for each of the " + std::to_string(boxes.size(0)) + " boxes, got " +
                c10::str(idxs.sizes()));
  if (boxes.size(0) == 0) return torch::empty({0}, boxes.options().dtype(torch::kLong));
  if (boxes.numel() <= (boxes.is_cpu() ? 4000 : 20000)) {
    // Each class's boxes moved past every other class's, so that no two overlap.
    const auto offsets = idxs.to(boxes.options()) * (boxes.max() + 1);
    return nms(boxes + offsets.unsqueeze(1), scores, iou_threshold);
  }
  auto kept = torch::zeros_like(scores, torch::kBool);
  for (const auto& c : std::get<0>(torch::_unique(idxs)).unbind(0)) {
    const auto members = torch::where(idxs == c)[0];
    kept.index_put_({members.index({nms(boxes.index({members}), scores.index({members}), iou_threshold)})}, true);
  }
  const auto indices = torch::where(kept)[0];
  return indices.index({std::get<1>(scores.index({indices}).sort(/*dim=*/0, /*descending=*/true))});
}

torch::Tensor sigmoid_focal_loss(const torch::Tensor& logits, const torch::Tensor& targets, double alpha, double gamma,
                                 Reduction reduction) {
  if (logits.sizes() != targets.sizes())
    throw Error("sigmoid_focal_loss: logits " + c10::str(logits.sizes()) + " and targets " + c10::str(targets.sizes()) +
                " differ in shape");
  const auto p = torch::sigmoid(logits);
  const auto ce = F::binary_cross_entropy_with_logits(logits, targets,
                                                      F::BinaryCrossEntropyWithLogitsFuncOptions().reduction(torch::kNone));
  const auto p_t = p * targets + (1 - p) * (1 - targets);
  auto loss = ce * (1 - p_t).pow(gamma);
  if (alpha >= 0) loss = (alpha * targets + (1 - alpha) * (1 - targets)) * loss;
  if (reduction == Reduction::mean) return loss.mean();
  if (reduction == Reduction::sum) return loss.sum();
  return loss;
}

}  // namespace fastcpp::vision
