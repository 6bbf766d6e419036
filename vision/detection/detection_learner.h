#pragma once
// Learners for object detection: detection_learner, a RetinaNet on a ResNet (optionally
// with ImageNet weights for its body) trained with its focal and box losses; ssd_learner,
// torchvision's SSD300 on VGG-16 (optionally with its ImageNet features) with its losses.
//
//   auto dls = vision::DetectionDataLoaders::from_coco("instances.json", "images/", {.bs = 8, ...});
//   auto learn = vision::detection_learner(dls, vision::resnet50, {}, {.pretrained_weights = "resnet50.pth"});
//   learn.fine_tune(5);
//   auto found = vision::detect(learn, image);   // found.boxes, found.scores, found.labels
//
// Parameter groups, as fastai's ResNet split: the body up to layer3, layer3 and layer4, the
// pyramid and the head; with pretrained weights the body starts frozen (its norm layers
// stay trainable), so fine_tune trains the pyramid and head first. SSD's: VGG-16 up to
// conv4_3, conv5 (VGG's too), and what is new (fc6, fc7, the extra blocks, conv4_3's scale,
// the head), which trains from the start as in torchvision. A splitter
// given in the LearnerOptions replaces these.
#include <string>
#include <vector>

#include "learner/learner.h"
#include "vision/detection/postprocess.h"
#include "vision/detection/retinanet.h"
#include "vision/detection/ssd.h"

namespace fastcpp::vision {

struct DetectionLearnerOptions {
  // A state dict of `arch` (torchvision's ImageNet ResNet, or save_state_dict's) for the
  // body; its classifier is left out. Empty: random weights.
  std::string pretrained_weights;
  int64_t num_classes = 0;  // default: the number of dls.vocab's classes
  int64_t width = 64;       // the ResNet's first-stage channels
  int64_t in_channels = 3;  // the images' (the data's `channels`); pretrained weights adapted as vision_learner's
  int64_t fpn_channels = 256;
  bool head_group_norm = false;  // GroupNorm in the head (torchvision's v2): steadier from random weights
  RetinaNetLossOptions loss{};
  bool normalize = true;  // ImageNet's Normalize with pretrained weights, as vision_learner's
};

// The three parameter groups of a RetinaNet (see above).
std::vector<std::vector<torch::Tensor>> retinanet_split(torch::nn::Module& model);

// `learner_options`: optimizer, callbacks, device, ... (its splitter and frozen are set here).
Learner detection_learner(DataLoaders dls, ResNetArch arch, std::vector<MetricPtr> metrics = {},
                          DetectionLearnerOptions options = {}, LearnerOptions learner_options = {});

struct SsdLearnerOptions {
  // A state dict of torchvision's vgg16 (ImageNet features) for the backbone
  // (load_vgg16_features); its Normalize is SSD's (ssd.h). Empty: random weights.
  std::string pretrained_weights;
  int64_t num_classes = 0;  // default: the number of dls.vocab's classes
  SsdLossOptions loss{};
  bool normalize = true;
};

// The three parameter groups of an SSD (see above).
std::vector<std::vector<torch::Tensor>> ssd_split(torch::nn::Module& model);

Learner ssd_learner(DataLoaders dls, std::vector<MetricPtr> metrics = {}, SsdLearnerOptions options = {},
                    LearnerOptions learner_options = {});

// What export_learner records of these learners' models ({"model": "retinanet",
// "backbone": "resnet50", ...} or {"model": "ssd300_vgg16", ...}), and the model built
// again from it (load_learner).
bool is_detection_spec(const ModelSpec& spec);
Model create_detection_model(const ModelSpec& spec, const std::string& source);

// The detections on one image as the data give it (uint8 or float CHW, the validation
// loader's batch transforms applied), by the model's own post-processing: boxes in the
// image's pixels (a batch resize undone), scores, labels (dls.vocab's).
Detections detect(Learner& learn, const torch::Tensor& image, const PostprocessOptions& options = {});

}  // namespace fastcpp::vision
