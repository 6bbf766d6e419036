#pragma once
// vision_learner: a Learner for image classification from the body of an architecture
// (a ResNet, an XResNet or a model of the program's own through Arch::from_model,
// optionally with pretrained weights) and a new head, as fastai's.
//
//   auto learn = vision::vision_learner(dls, vision::resnet34, {metrics::accuracy()},
//                                       {.pretrained_weights = "resnet34.pth"}, {.opt_func = adam()});
//   learn.fine_tune(3);
//
// The model is one Sequential: the body's layers under the architecture's names
// (conv1, bn1, relu, maxpool, layer1 ... layer4 for a ResNet; 0 ... 7 for an XResNet),
// then create_head's layers (head_*). Parameter groups, as fastai's splits: three,
// for a ResNet the body up to layer2, layer3 and layer4, the head (for an XResNet the
// stem, the stages, the head); a slice of lrs spreads over them. With pretrained
// weights the body starts frozen (its norm layers stay trainable), so a first fit
// trains the head.
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "learner/learner.h"
#include "vision/arch.h"
#include "vision/models/head.h"

namespace fastcpp::vision {

struct VisionLearnerOptions {
  // A state dict of `arch` saved by torchvision (torch.save(model.state_dict(), path))
  // or by save_state_dict; its classifier (fc.*) is left out, and its first conv is
  // adapted to in_channels as fastai does (summed for 1). Empty: random weights.
  std::string pretrained_weights;
  int64_t n_out = 0;  // outputs; default: the number of classes in dls.vocab
  int64_t in_channels = 3;
  Stem stem = Stem::imagenet;  // ResNets only
  int64_t width = 64;
  // The head (create_head's options).
  std::vector<int64_t> lin_ftrs{512};
  double ps = 0.5;
  bool concat_pool = true;
  bool bn_final = false;
  bool pool = true;
  bool first_bn = true;
  bool lin_first = false;
  // Outputs squashed into (low, high) by a last SigmoidRange: a regression's known range
  // (fastai's y_range, e.g. (-1, 1) for coordinates scaled to the image).
  std::optional<std::pair<double, double>> y_range;
  // A head of the program's own in place of create_head's (fastai's custom_head): its
  // layers join the model as head_<name>, initialized as fastai does (He-normal weights,
  // zero biases, norm layers as they are). The options above for the head and n_out are
  // then unused, and an export records no architecture: load_learner is given the model.
  std::optional<torch::nn::Sequential> custom_head;
  Loss loss_func;  // default: CrossEntropyLoss, or BCEWithLogitsLoss for multi-label loaders
  // With pretrained weights and 3 channels, the architecture's statistics (Arch::stats:
  // ImageNet's for ours) are added to loaders without a Normalize (fastai's
  // normalize=True); false: the batches as the loaders make them.
  bool normalize = true;

  HeadOptions head() const {
    return {.lin_ftrs = lin_ftrs, .ps = ps, .concat_pool = concat_pool, .bn_final = bn_final, .y_range = y_range,
            .pool = pool, .first_bn = first_bn, .lin_first = lin_first};
  }
};

// The body of `arch` followed by a new head, with the pretrained weights loaded.
torch::nn::Sequential create_vision_model(const Arch& arch, int64_t n_out, const VisionLearnerOptions& options = {});

// How vision_learner built its model, which an exported model records
// (LearnerOptions::model_spec): {"arch": "resnet34", "n_out", "in_channels", "stem",
// "width", "lin_ftrs", "ps", "concat_pool", "bn_final", "y_range" (empty or low, high),
// "pool", "first_bn", "lin_first"}.
// Empty for an architecture without a name, or with a custom head.
ModelSpec vision_model_spec(const Arch& arch, int64_t n_out, const VisionLearnerOptions& options);
// The model such a record describes, with fresh weights; errors name `source`.
torch::nn::Sequential create_vision_model(const ModelSpec& spec, const std::string& source);


// `learner_options`: optimizer, callbacks, device, ... (its frozen is set here, and its splitter
// where it has none: the architecture's, as fastai's).
Learner vision_learner(DataLoaders dls, const Arch& arch, std::vector<MetricPtr> metrics = {},
                       VisionLearnerOptions options = {}, LearnerOptions learner_options = {});

}  // namespace fastcpp::vision
