#include "vision/arch.h"

#include <torch/nn/modules/linear.h>

#include "learner/error.h"
#include "learner/sequential.h"

namespace fastcpp::vision {

Body resnet_body(const ResNet& net) { return {net->body(), net->num_features(), "conv1.weight", "fc.", {"layer3"}}; }

Body xresnet_body(const torch::nn::Sequential& net) {
  // fastai's cut: the last four layers (pool, flatten, dropout, linear) are the classifier.
  auto layers = named_layers(*net);
  const auto* classifier = layers.size() > 4 ? layers.back().module->as<torch::nn::Linear>() : nullptr;
  if (!classifier) throw Error("xresnet_body: expected an xresnet (layers ending in a Linear)");
  Body body{torch::nn::Sequential(), classifier->options.in_features(), "0.0.weight", layers.back().name + ".", {"3"}};
  for (size_t i = 0; i + 4 < layers.size(); ++i) body.layers->push_back(layers[i].name, layers[i].any);
  return body;
}

void check_xresnet_stem(const BodyOptions& options) {
  if (options.stem != Stem::imagenet)
    throw Error("vision_learner: an xresnet has fastai's stem of three convs; Stem::cifar is for the ResNets");
}

}  // namespace fastcpp::vision
