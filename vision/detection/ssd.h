#pragma once
// SSD (Liu et al., "SSD: Single Shot MultiBox Detector") as torchvision's ssd300_vgg16
// builds it: VGG-16 up to conv4_3 (its L2-normalized, rescaled output the first map),
// conv5 and the dilated fc6/fc7 convolutions, four extra blocks: six maps of 38 to 1
// cells at 300 x 300, 8732 default boxes, a 3x3 conv a map for the class logits
// (background first) and the box codes. Parameter names are torchvision's, so its state
// dicts load by name (COCO's ssd300_vgg16 weights: num_classes 90); on the same weights
// and inputs the outputs, losses and detections equal torchvision's (the `detection` suite).
//
//   auto model = vision::ssd300_vgg16({.num_classes = 3});
//   Learner learn(dls, model, vision::ssd_loss());
//   auto found = vision::detections(model(x));   // boxes, scores, labels an image (postprocess.h)
//
// Why torchvision's VGG-16 SSD rather than a ResNet one: its weights (ImageNet features,
// COCO detector) exist to load and its every number can be checked against torchvision's;
// a ResNet detector with a feature pyramid is the RetinaNet (retinanet.h).
//
// As RetinaNet (retinanet.h): images come in as the data pipeline made them (300 x 300,
// normalized: torchvision's SSD subtracts the mean of 0-255 pixels, Normalize{{0.48235,
// 0.45882, 0.40784}, {1 / 255., 1 / 255., 1 / 255.}}), detections are in their pixels, and
// classes count objects only (torchvision's num_classes counts the background too).
#include <torch/nn/cloneable.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/container/sequential.h>

#include <vector>

#include "learner/loss.h"
#include "vision/detection/anchors.h"
#include "vision/detection/boxes.h"
#include "vision/detection/detector_output.h"

namespace fastcpp::vision {

// torchvision's SSDFeatureExtractorVGG: "features" (VGG-16's layers up to conv4_3, the third
// pooling rounding up), "scale_weight" (conv4_3's per-channel scale after L2
// normalization, 20 at first) and "extra" (conv5 + fc6/fc7, then four blocks that halve
// the map). forward: the six maps.
struct SsdVggBackboneImpl : torch::nn::Cloneable<SsdVggBackboneImpl> {
  SsdVggBackboneImpl();
  void reset() override;
  std::vector<torch::Tensor> forward(const torch::Tensor& images);

  torch::nn::Sequential features{nullptr};
  torch::Tensor scale_weight;
  torch::nn::ModuleList extra{nullptr};
};
TORCH_MODULE(SsdVggBackbone);

// One conv a map to `per_anchor` values for each of its anchors (torchvision's
// SSDScoringHead: "module_list"); forward: [N, sum of H * W * A, per_anchor].
struct SsdScoringHeadImpl : torch::nn::Cloneable<SsdScoringHeadImpl> {
  SsdScoringHeadImpl(std::vector<int64_t> channels, std::vector<int64_t> anchors, int64_t per_anchor);
  void reset() override;
  torch::Tensor forward(const std::vector<torch::Tensor>& maps);

  std::vector<int64_t> channels, anchors;
  int64_t per_anchor;
  torch::nn::ModuleList module_list{nullptr};
};
TORCH_MODULE(SsdScoringHead);

struct SsdHeadImpl : torch::nn::Cloneable<SsdHeadImpl> {
  SsdHeadImpl(std::vector<int64_t> channels, std::vector<int64_t> anchors, int64_t num_classes);
  void reset() override;

  std::vector<int64_t> channels, anchors;
  int64_t num_classes;  // object classes; the classification head has one more (background)
  SsdScoringHead classification_head{nullptr}, regression_head{nullptr};
};
TORCH_MODULE(SsdHead);

struct SsdOptions {
  int64_t num_classes = 0;  // object classes (required)
  DefaultBoxGenerator anchor_generator = ssd300_default_boxes();
};

struct SsdImpl : torch::nn::Cloneable<SsdImpl> {
  explicit SsdImpl(SsdOptions options);
  void reset() override;
  // Images [N, 3, H, W] (300 x 300 as torchvision's; 268 a side at least) -> the DetectorOutput
  // [N, anchors, 12 + 1 + classes], softmax scoring.
  torch::Tensor forward(const torch::Tensor& images);
  // A copy that leaves the global CPU generator as it was (core/clone.h).
  std::shared_ptr<torch::nn::Module> clone(const std::optional<torch::Device>& device = std::nullopt) const override;

  SsdOptions options;
  SsdVggBackbone backbone{nullptr};
  SsdHead head{nullptr};

 private:
  AnchorColumns anchor_columns_{Scoring::softmax};
};
TORCH_MODULE(Ssd);

Ssd ssd300_vgg16(SsdOptions options);

// Loads a state dict of torchvision's vgg16 (ImageNet features) into the backbone: its
// conv1_1 to conv4_3 into "features", conv5_1 to conv5_3 into "extra.0"; the classifier
// is left out.
void load_vgg16_features(SsdVggBackboneImpl& backbone, const std::string& path);

struct SsdLossOptions {
  Matcher matcher{.high = 0.5, .low = 0.5, .allow_low_quality_matches = false, .each_box_takes_its_best_anchor = true};
  BoxCoder coder{{10, 10, 5, 5}};
  double negatives_per_positive = 3;  // hard negative mining: the background anchors of highest loss kept
};

// torchvision's two terms: smooth-L1 (beta 1) of the matched anchors' codes, and the
// cross-entropy of the matched anchors and of the hardest background anchors (3 a match
// in each image), each summed over the batch and divided by its matched anchors (at least 1).
struct SsdLosses {
  torch::Tensor classification, box_regression;
};
// output: SSD's DetectorOutput; targets [N, M, 5] (detector_output.h), labels 0..K-1.
SsdLosses ssd_losses(const torch::Tensor& output, const torch::Tensor& targets, const SsdLossOptions& options = {});
// Their sum, as a Learner's Loss.
Loss ssd_loss(SsdLossOptions options = {});

}  // namespace fastcpp::vision
