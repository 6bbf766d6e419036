#pragma once
// unet_learner: a Learner for semantic segmentation, a DynamicUnet on the body of an
// architecture (a ResNet or an XResNet, optionally with pretrained weights), as fastai's.
//
//   auto learn = vision::unet_learner(dls, vision::resnet34, {vision::dice_multi()},
//                                     {.pretrained_weights = "resnet34.pth", .n_out = 5});
//   learn.fine_tune(3);
//
// Parameter groups, as fastai's splits applied to a U-Net: the encoder up to its second
// group's layer (layer3 for a ResNet, the stages for an XResNet), the rest of the
// encoder, the decoder; with pretrained weights the encoder starts frozen (its norm
// layers stay trainable); a splitter given in the LearnerOptions replaces these. The
// loss is CrossEntropyLossFlat over the class axis, ignoring the data's void index.
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "learner/learner.h"
#include "vision/arch.h"
#include "vision/models/unet.h"
#include "vision/segmentation.h"

namespace fastcpp::vision {

struct UnetLearnerOptions {
  // A state dict of `arch` (torchvision's, or save_state_dict's) for the encoder; its
  // classifier is left out. Empty: random weights.
  std::string pretrained_weights;
  int64_t n_out = 0;                // classes per pixel; default: the number of dls.vocab's codes
  std::vector<int64_t> img_size;    // default: the size of the first training item
  int64_t in_channels = 3;
  Stem stem = Stem::imagenet;       // ResNets only
  int64_t width = 64;
  bool blur = false, blur_final = true, self_attention = false, last_cross = true, bottle = false;
  std::optional<std::pair<double, double>> y_range;
  Loss loss_func;                   // default: CrossEntropyLossFlat({.ignore_index = dls.void_index})
  bool normalize = true;            // the architecture's Normalize with pretrained weights, as vision_learner's
};

// The DynamicUnet unet_learner trains, on `arch`'s body; img_size {height, width}.
DynamicUnet create_unet_model(const Arch& arch, int64_t n_out, std::vector<int64_t> img_size,
                                       const UnetLearnerOptions& options);
// Its record in an exported model ({"model": "unet", "encoder": "resnet18", ...}), and
// the model built again from one (errors name `source`).
ModelSpec unet_model_spec(const Arch& arch, int64_t n_out, const std::vector<int64_t>& img_size,
                          const UnetLearnerOptions& options);
bool is_unet_spec(const ModelSpec& spec);
DynamicUnet create_unet_model(const ModelSpec& spec, const std::string& source);

// `learner_options`: optimizer, callbacks, device, ... (its splitter and frozen are set here).
Learner unet_learner(DataLoaders dls, const Arch& arch, std::vector<MetricPtr> metrics = {},
                     UnetLearnerOptions options = {}, LearnerOptions learner_options = {});

}  // namespace fastcpp::vision
