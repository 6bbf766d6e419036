#pragma once
// RetinaNet (Lin et al., "Focal Loss for Dense Object Detection") as torchvision builds
// it: a ResNet + FPN backbone, a classification and a box-regression branch shared by
// the five maps, 9 anchors a cell, the focal loss, and the post-processing of its
// detections. Parameter names are torchvision's, so its state dicts load by name; on the
// same weights and inputs the outputs, losses and detections equal torchvision's (the
// `detection` suite).
//
//   auto model = vision::retinanet({.num_classes = 3, .arch = vision::resnet18});
//   Learner learn(dls, model, vision::retinanet_loss());
//   auto found = vision::detections(model(x));   // boxes, scores, labels an image (postprocess.h)
//
// Differences from torchvision's module, by design: images come in as the data pipeline
// made them (one size, normalized: torchvision's resizing and normalization are data
// transforms here) and detections are in those images' pixels; norm layers are
// SyncBatchNorm (trainable BatchNorm in one process) where torchvision's pretrained
// backbones freeze theirs; classes count objects only (torchvision's COCO models keep an
// unused background class 0: give them num_classes = 91).
#include <torch/nn/cloneable.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/conv.h>

#include <string>
#include <vector>

#include "learner/loss.h"
#include "vision/detection/anchors.h"
#include "vision/detection/boxes.h"
#include "vision/detection/detector_output.h"
#include "vision/detection/feature_pyramid.h"

namespace fastcpp::vision {

// One branch of the head: four 3x3 conv + ReLU (with group_norm: conv without bias +
// GroupNorm of 32 groups + ReLU, torchvision's v2), then a 3x3 conv to `per_anchor` values
// for each of `anchors` anchors, named `final_name` (torchvision's "cls_logits" or "bbox_reg").
struct RetinaNetBranchImpl : torch::nn::Cloneable<RetinaNetBranchImpl> {
  RetinaNetBranchImpl(int64_t channels, int64_t anchors, int64_t per_anchor, std::string final_name, double final_bias,
                      bool group_norm = false);
  void reset() override;
  // Each map [N, C, H, W] -> [N, H * W * anchors, per_anchor], the maps concatenated.
  torch::Tensor forward(const std::vector<torch::Tensor>& maps);

  int64_t channels, anchors, per_anchor;
  std::string final_name;
  double final_bias;
  bool group_norm;
  torch::nn::Sequential conv{nullptr};
  torch::nn::Conv2d final{nullptr};
};
TORCH_MODULE(RetinaNetBranch);

struct RetinaNetHeadImpl : torch::nn::Cloneable<RetinaNetHeadImpl> {
  RetinaNetHeadImpl(int64_t channels, int64_t anchors, int64_t num_classes, double prior_probability = 0.01,
                    bool group_norm = false);
  void reset() override;

  int64_t channels, anchors, num_classes;
  double prior_probability;
  bool group_norm;
  RetinaNetBranch classification_head{nullptr}, regression_head{nullptr};
};
TORCH_MODULE(RetinaNetHead);

struct RetinaNetOptions {
  int64_t num_classes = 0;  // object classes (required)
  ResNetArch arch = resnet50;
  ResNetOptions backbone{};  // in_channels, width (num_classes and the stem are the detector's)
  int64_t fpn_channels = 256;
  bool p6_from_c5 = false;  // torchvision's retinanet_resnet50_fpn_v2; false: its v1
  bool head_group_norm = false;  // GroupNorm in the head's convs, as v2 (fpn_channels a multiple of 32)
  AnchorGenerator anchor_generator = retinanet_anchor_generator();
  double prior_probability = 0.01;  // the classification bias starts at this score
};

struct RetinaNetImpl : torch::nn::Cloneable<RetinaNetImpl> {
  explicit RetinaNetImpl(RetinaNetOptions options);
  void reset() override;
  // Images [N, C, H, W] -> the DetectorOutput [N, anchors, 12 + classes], sigmoid scoring.
  torch::Tensor forward(const torch::Tensor& images);
  // A copy that leaves the global CPU generator as it was (core/clone.h).
  std::shared_ptr<torch::nn::Module> clone(const std::optional<torch::Device>& device = std::nullopt) const override;

  RetinaNetOptions options;
  ResNetFPN backbone{nullptr};
  RetinaNetHead head{nullptr};

 private:
  AnchorColumns anchor_columns_{Scoring::sigmoid};
};
TORCH_MODULE(RetinaNet);

RetinaNet retinanet(RetinaNetOptions options);

enum class BoxLoss { l1, smooth_l1, giou };

struct RetinaNetLossOptions {
  Matcher matcher{};  // fg 0.5, bg 0.4, low-quality matches kept
  BoxLoss box_loss = BoxLoss::l1;  // torchvision's v1; its v2 uses giou
  double smooth_l1_beta = 1.0;
  BoxCoder coder{};  // weights 1
  double focal_alpha = 0.25, focal_gamma = 2;
};

// torchvision's two terms, each the mean over the images of a sum over anchors divided
// by the image's matched anchors (at least 1).
struct RetinaNetLosses {
  torch::Tensor classification, box_regression;
};
// output: the DetectorOutput; targets [N, M, 5] (detector_output.h).
RetinaNetLosses retinanet_losses(const torch::Tensor& output, const torch::Tensor& targets,
                                 const RetinaNetLossOptions& options = {});
// Their sum, as a Learner's Loss.
Loss retinanet_loss(RetinaNetLossOptions options = {});

}  // namespace fastcpp::vision
