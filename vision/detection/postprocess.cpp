#include "vision/detection/postprocess.h"

#include <torch/torch.h>

#include <string>

#include "core/error.h"
#include "vision/detection/detector_output.h"

namespace fastcpp::vision {
namespace {

struct Settings {
  double score_threshold, nms_threshold;
  int64_t detections_per_image, candidates;
  BoxCoder coder;
};

Settings settle(const PostprocessOptions& o, const Settings& own) {
  const Settings s{o.score_threshold.value_or(own.score_threshold), o.nms_threshold.value_or(own.nms_threshold),
                   o.detections_per_image.value_or(own.detections_per_image), o.candidates.value_or(own.candidates),
                   o.coder.value_or(own.coder)};
  // A negative count would reach narrow() and topk() as a c10 error naming neither option.
  if (s.detections_per_image < 0 || s.candidates < 0)
    throw Error("PostprocessOptions: detections_per_image and candidates must be >= 0, got " +
                std::to_string(s.detections_per_image) + " and " + std::to_string(s.candidates));
  return s;
}

Detections best_after_nms(const std::vector<torch::Tensor>& boxes, const std::vector<torch::Tensor>& scores,
                          const std::vector<torch::Tensor>& labels, const Settings& s) {
  const auto all_boxes = torch::cat(boxes), all_scores = torch::cat(scores), all_labels = torch::cat(labels);
  auto keep = batched_nms(all_boxes, all_scores, all_labels, s.nms_threshold);
  keep = keep.narrow(0, 0, std::min(s.detections_per_image, keep.size(0)));
  return {all_boxes.index({keep}), all_scores.index({keep}), all_labels.index({keep})};
}

void expect_scoring(const DetectorOutput& out, Scoring scoring, const char* who) {
  if (out.scoring() != scoring)
    throw Error(std::string(who) + ": the output is scored by " + (scoring == Scoring::softmax ? "sigmoid" : "softmax") +
                " (" + (scoring == Scoring::softmax ? "retinanet" : "ssd") + "_detections decodes it)");
}

}  // namespace

std::vector<Detections> retinanet_detections(const torch::Tensor& output, const PostprocessOptions& options) {
  const DetectorOutput out(output, "retinanet_detections");
  expect_scoring(out, Scoring::sigmoid, "retinanet_detections");
  const auto s = settle(options, {.score_threshold = 0.05, .nms_threshold = 0.5, .detections_per_image = 300,
                                  .candidates = 1000, .coder = BoxCoder{}});
  const auto num_classes = out.num_classes();
  const auto height = out.image_height(), width = out.image_width();
  // Anchors per map: runs of one level in the level column.
  const auto counts_tensor = std::get<2>(torch::unique_consecutive(out.levels()[0].cpu(), false, true));
  const std::vector<int64_t> counts(counts_tensor.data_ptr<int64_t>(), counts_tensor.data_ptr<int64_t>() + counts_tensor.numel());

  std::vector<Detections> found;
  for (int64_t i = 0; i < output.size(0); ++i) {
    const auto logits = out.logits()[i].split_with_sizes(counts), codes = out.codes()[i].split_with_sizes(counts),
               anchors = out.anchors()[i].split_with_sizes(counts);
    std::vector<torch::Tensor> boxes, scores, labels;
    for (size_t level = 0; level < counts.size(); ++level) {
      auto level_scores = torch::sigmoid(logits[level]).flatten();
      const auto passing = level_scores > s.score_threshold;
      auto candidates = torch::nonzero(passing).squeeze(1);
      const auto k = std::min(s.candidates, candidates.size(0));
      auto [best, order] = level_scores.index({passing}).topk(k);
      candidates = candidates.index({order});
      const auto anchor = torch::div(candidates, num_classes, "floor");
      boxes.push_back(
          clip_boxes_to_image(s.coder.decode(codes[level].index({anchor}), anchors[level].index({anchor})), height, width));
      scores.push_back(best);
      labels.push_back(candidates % num_classes);
    }
    found.push_back(best_after_nms(boxes, scores, labels, s));
  }
  return found;
}

std::vector<Detections> ssd_detections(const torch::Tensor& output, const PostprocessOptions& options) {
  const DetectorOutput out(output, "ssd_detections");
  expect_scoring(out, Scoring::softmax, "ssd_detections");
  const auto s = settle(options, {.score_threshold = 0.01, .nms_threshold = 0.45, .detections_per_image = 200,
                                  .candidates = 400, .coder = BoxCoder{{10, 10, 5, 5}}});
  const auto height = out.image_height(), width = out.image_width();
  const auto all_scores = torch::softmax(out.logits(), -1);
  std::vector<Detections> found;
  for (int64_t i = 0; i < output.size(0); ++i) {
    const auto decoded = clip_boxes_to_image(s.coder.decode(out.codes()[i], out.anchors()[i]), height, width);
    std::vector<torch::Tensor> boxes, scores, labels;
    for (int64_t label = 1; label < all_scores.size(2); ++label) {
      const auto score = all_scores[i].select(1, label);
      const auto passing = score > s.score_threshold;
      auto [best, order] = score.index({passing}).topk(std::min(s.candidates, passing.sum().item<int64_t>()));
      boxes.push_back(decoded.index({passing}).index({order}));
      scores.push_back(best);
      // torchvision's labels (background 0) while suppressing, so that NMS sees its class offsets
      labels.push_back(torch::full_like(best, label, torch::kLong));
    }
    auto kept = best_after_nms(boxes, scores, labels, s);
    kept.labels -= 1;
    found.push_back(std::move(kept));
  }
  return found;
}

std::vector<Detections> detections(const torch::Tensor& output, const PostprocessOptions& options) {
  return DetectorOutput(output, "detections").scoring() == Scoring::softmax ? ssd_detections(output, options)
                                                                            : retinanet_detections(output, options);
}

}  // namespace fastcpp::vision
