#pragma once
// Losses and metrics of per-pixel classification (semantic segmentation): model outputs
// [N, C, H, W], masks [N, H, W] of class indices. Each equals fastai's on the same
// predictions (the `fastai` test suite). Beyond fastai, the metrics skip the pixels of
// the data's void index (DataLoaders::void_index; fastai counts them in the union), and
// keep one confusion matrix, O(pixels) memory, however many classes.
//
//   auto dls = vision::SegmentationDataLoaders::from_folders(images, masks, codes, {.void_index = 255});
//   auto learn = vision::unet_learner(dls, vision::resnet34, {vision::dice_multi(), vision::jaccard_coeff_multi()});
#include <optional>
#include <vector>

#include "learner/loss.h"
#include "learner/metrics.h"

namespace fastcpp::vision {

struct FlatLossOptions {
  int64_t ignore_index = -100;  // pixels of this value add nothing (torch's default: none)
};

// fastai's CrossEntropyLossFlat(axis=1): the mean over the pixels not ignored (0 for a
// batch wholly ignored, where torch's mean is NaN). Per item
// (interpretation), each image's mean over all its pixels, as fastai's.
Loss CrossEntropyLossFlat(FlatLossOptions options = {});

// fastai's FocalLossFlat(axis=1, gamma): cross-entropy scaled by (1 - p_t)^gamma, the
// mean over the pixels not ignored, as CrossEntropyLossFlat's (fastai's has no ignore_index:
// every pixel).
Loss FocalLossFlat(double gamma = 2.0, FlatLossOptions options = {});

struct DiceLossOptions {
  double smooth = 1e-6;
  bool mean = false;             // fastai's reduction: "sum" (default) or "mean" over items and classes
  bool square_in_union = false;  // the union sums squared probabilities
};

// fastai's DiceLoss: 1 - soft Dice of the softmax against the one-hot masks, per item and class.
Loss DiceLoss(DiceLossOptions options = {});

struct SegmentationMetricOptions {
  // Pixels whose mask holds it are left out; default: the data's. Where it is a class's
  // code (CamVid's 'Void'), that class is no class: NaN in the per-class scores.
  std::optional<int64_t> void_index;
};

// fastai's Dice and JaccardCoeff for 2 classes: over the epoch, inter = sum(pred * mask),
// union = sum(pred + mask) of the argmax predictions; 2 inter / union and inter / (union - inter).
MetricPtr dice(SegmentationMetricOptions options = {});
MetricPtr jaccard_coeff(SegmentationMetricOptions options = {});

// fastai's DiceMulti and JaccardCoeffMulti (mean IoU): the same per class, averaged over
// the classes present in a prediction or a mask (a class absent from both is skipped).
MetricPtr dice_multi(SegmentationMetricOptions options = {});
MetricPtr jaccard_coeff_multi(SegmentationMetricOptions options = {});

// Each class's IoU over outputs [N, C, H, W] and masks [N, H, W]: NaN for a class absent
// from both the argmax predictions and the masks. (No learner here: give the void index.)
std::vector<double> per_class_iou(const torch::Tensor& output, const torch::Tensor& masks,
                                  SegmentationMetricOptions options = {});

// Each class's score that a dice_multi or jaccard_coeff_multi metric accumulated over its
// last pass (after a fit, the last validation): Dice or IoU, NaN for a class absent from
// both predictions and masks; the metric's value is their mean over the others. No
// second pass over the data, as per_class_iou of get_preds' outputs would need.
std::vector<double> per_class_scores(const Metric& metric);

// fastai's foreground_acc: the accuracy over the pixels whose mask is not the background
// (nor void), a mean per batch weighted by its size; a batch without such pixels counts
// for nothing (in fastai it makes the epoch's value NaN).
MetricPtr foreground_acc(int64_t background = 0, SegmentationMetricOptions options = {});

}  // namespace fastcpp::vision
