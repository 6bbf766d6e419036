#pragma once
// Arch: what vision_learner needs of an architecture, as fastai's model_meta: the body
// under the architecture's own names (so its state dicts load into it), the channels
// out of it, the key of its first conv (adapted to other input channel counts), the key
// prefixes of the layers past it (left out when loading weights), and its split of
// body + head into parameter groups.
//
// The model functions are Archs as they are: vision::resnet18 ... resnet101 (body:
// everything before the pooling; resnet_split) and vision::xresnet18 ... xresnet101
// (body: fastai's cut of the last four layers; xresnet_split). They also go by name
// (Arch::named("resnet34")), which an exported model records. A model of the program's
// own becomes one with Arch::from_model, cut and split as fastai does an architecture it
// has no metadata for.
#include <torch/nn/modules/container/sequential.h>

#include <functional>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "data/batch_transforms.h"
#include "learner/learner.h"
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
  std::string first_conv;  // e.g. "conv1.weight"
  std::vector<std::string> left_out;  // key prefixes of the model's layers past the body, e.g. "fc."
};

class Arch {
 public:
  using ResNetFn = std::function<ResNet(ResNetOptions)>;
  using XResNetFn = std::function<torch::nn::Sequential(XResNetOptions)>;

  Arch() = default;
  template <class F, std::enable_if_t<std::is_invocable_r_v<ResNet, F, ResNetOptions>, int> = 0>
  Arch(F make) : Arch(from_resnet(make)) {}  // NOLINT: vision::resnet34 is an Arch
  template <class F, std::enable_if_t<std::is_invocable_r_v<torch::nn::Sequential, F, XResNetOptions>, int> = 0>
  Arch(F make) : Arch(from_xresnet(make)) {}  // NOLINT: vision::xresnet50 is an Arch

  static Arch from_resnet(ResNetFn make);
  static Arch from_xresnet(XResNetFn make);
  // A Sequential of the program's own, made for the options' in_channels (the others are
  // its own business). The body is its top-level layers before `cut`; by default, as
  // fastai's create_body, before the last one that is or holds a pooling layer (a type
  // named *Pool1d/2d/3d). Its first Conv2d takes pretrained weights' RGB filters adapted
  // to in_channels; the features out of it are found by running it on a small image, as
  // fastai's num_features_model. The split is fastai's default_split: the body, the head.
  // `cut` counts layers from the start, or from the end when negative (fastai's cut=-2).
  // `stats`: those its pretrained weights were trained on (none: its inputs as the
  // loaders make them, as fastai's for an architecture it has no metadata for).
  using ModelFn = std::function<torch::nn::Sequential(const BodyOptions&)>;
  static Arch from_model(ModelFn make, std::optional<int64_t> cut = std::nullopt,
                         std::optional<Normalize> stats = std::nullopt);
  // resnet18 ... resnet101, xresnet18 ... xresnet101; a fastcpp::Error lists them for
  // another name.
  static Arch named(const std::string& name);
  static std::vector<std::string> names();

  explicit operator bool() const { return static_cast<bool>(body_); }
  Body body(const BodyOptions& options) const { return body_(options); }
  // Parameter groups of the body's layers followed by head_* layers.
  const Splitter& split() const { return split_; }
  // The model function's name when it is one of ours; empty for others (a lambda).
  const std::string& name() const { return name_; }
  // The name of the body's layer where its second parameter group starts (fastai's
  // split: "layer3" for a ResNet, "3" for an XResNet; none for a model's own).
  const std::string& second_group() const { return second_group_; }
  // The statistics its pretrained weights were trained on (fastai's meta['stats']), which
  // vision_learner and unet_learner add to loaders without a Normalize: ImageNet's for the
  // ResNets and XResNets.
  const std::optional<Normalize>& stats() const { return stats_; }

 private:
  std::function<Body(const BodyOptions&)> body_;
  Splitter split_;
  std::string name_;
  std::string second_group_;
  std::optional<Normalize> stats_;
};

// fastai's way of starting a first conv with other than 3 input channels from RGB
// weights [out, 3, kh, kw]: the sum of the three for 1 channel, the first two times 1.5
// for 2, the three and zeros for more.
torch::Tensor adapt_input_channels(const torch::Tensor& rgb, int64_t n_in);

// The body of `arch` with the weights of a state dict of `arch` (torchvision's, or
// save_state_dict's; empty: random weights): its classifier is left out, and its first
// conv adapted to other input channels as fastai does (summed for 1).
Body pretrained_body(const Arch& arch, const BodyOptions& options, const std::string& weights);

// With pretrained weights and 3 input channels, adds the Normalize they were trained with
// (ImageNet's statistics unless `stats` says otherwise) to loaders that have no Normalize,
// as fastai's vision_learner and unet_learner do. Does nothing otherwise.
void add_pretrained_normalize(DataLoaders& dls, const std::string& weights, int64_t in_channels,
                              const Normalize& stats = Normalize::imagenet());

// fastai's splits of a create_vision_model model into three parameter groups:
// resnet: [stem, layer1, layer2], [layer3, layer4], [head]; xresnet: [the stem's three
// convs], [max pool, stages], [head].
std::vector<std::vector<torch::Tensor>> resnet_split(torch::nn::Module& model);
std::vector<std::vector<torch::Tensor>> xresnet_split(torch::nn::Module& model);
// fastai's default_split: two groups, the layers before the head_ ones and the head.
std::vector<std::vector<torch::Tensor>> body_head_split(torch::nn::Module& model);

// fastai's has_pool_type: `module` or one of the modules inside it is a pooling layer.
bool has_pool_type(const torch::nn::Module& module);

}  // namespace fastcpp::vision
