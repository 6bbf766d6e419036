#pragma once
// Arch: what vision_learner needs of an architecture, as fastai's model_meta: the body
// under the architecture's own names (so its state dicts load into it), the channels
// out of it, the key of its first conv (adapted to other input channel counts), the
// prefix of its classifier's keys (left out when loading weights), and the body
// layers where the later parameter groups begin.
//
// The model functions are Archs as they are: vision::resnet18 ... resnet101 (body:
// everything before the pooling, split at layer3) and vision::xresnet18 ... xresnet101
// (body: fastai's cut of the last four layers, split after the stem).
#include <torch/nn/modules/container/sequential.h>

#include <functional>
#include <string>
#include <type_traits>
#include <vector>

#include "vision/models/resnet.h"
#include "vision/models/xresnet.h"

namespace fastcpp::vision {

struct BodyOptions {
  int64_t in_channels = 3;
  Stem stem = Stem::imagenet;  // the ResNets' choice; XResNets have their own stem
  int64_t width = 64;          // first-stage channels (XResNet: widen = width / 64)
};

struct Body {
  torch::nn::Sequential layers;
  int64_t num_features = 0;
  std::string first_conv;                 // e.g. "conv1.weight"
  std::string classifier;                 // e.g. "fc."
  std::vector<std::string> group_starts;  // e.g. {"layer3"}: groups [.., layer3), [layer3, ..], then the head
};

Body resnet_body(const ResNet& net);
Body xresnet_body(const torch::nn::Sequential& net);
void check_xresnet_stem(const BodyOptions& options);

class Arch {
 public:
  Arch() = default;
  template <class F, std::enable_if_t<std::is_invocable_r_v<ResNet, F, ResNetOptions>, int> = 0>
  Arch(F make)  // NOLINT: vision::resnet34 is an Arch
      : body_([make](const BodyOptions& o) {
          return resnet_body(make({.in_channels = o.in_channels, .stem = o.stem, .width = o.width}));
        }) {}
  template <class F, std::enable_if_t<std::is_invocable_r_v<torch::nn::Sequential, F, XResNetOptions>, int> = 0>
  Arch(F make)  // NOLINT: vision::xresnet50 is an Arch
      : body_([make](const BodyOptions& o) {
          check_xresnet_stem(o);
          return xresnet_body(make({.c_in = o.in_channels, .widen = static_cast<double>(o.width) / 64}));
        }) {}

  explicit operator bool() const { return static_cast<bool>(body_); }
  Body body(const BodyOptions& options) const { return body_(options); }

 private:
  std::function<Body(const BodyOptions&)> body_;
};

}  // namespace fastcpp::vision
