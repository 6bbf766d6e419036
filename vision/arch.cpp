#include "vision/arch.h"

#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>

#include <algorithm>
#include <regex>

#include "core/error.h"
#include "core/sequential.h"
#include "formats/state_dict.h"

namespace fastcpp::vision {
namespace {

// The groups of a body + head model: the body, split again at the layer named `second`
// where one is named, then the head_* layers.
std::vector<std::vector<torch::Tensor>> split_body_and_head(torch::nn::Module& model, const std::string& second,
                                                            const std::string& split_name) {
  std::vector<std::vector<torch::Tensor>> groups(second.empty() ? 2 : 3);
  size_t group = 0;
  for (const auto& child : model.named_children()) {
    if (!second.empty() && child.key() == second) group = std::max<size_t>(group, 1);
    if (child.key().rfind("head_", 0) == 0) group = groups.size() - 1;
    for (const auto& p : child.value()->parameters()) groups[group].push_back(p);
  }
  const std::string missing = second.empty() ? "no body" : "no layer named '" + second + "'";
  for (const auto& g : groups)
    if (g.empty())
      throw Error(split_name + ": the model has " + missing + " or no head_ layers; is it from create_vision_model?");
  return groups;
}

// fastai's num_features_model: the channels out of `body` for zeros of 32 px (on its
// parameters' device and dtype), doubled up to 2048 px where the body needs a larger image.
int64_t features_out(torch::nn::SequentialImpl& body, int64_t in_channels) {
  torch::NoGradGuard no_grad;
  const auto modules = body.modules();
  std::vector<bool> training;
  for (const auto& module : modules) training.push_back(module->is_training());
  body.eval();  // BatchNorm's running statistics stay as they are
  const auto params = body.parameters();
  const auto options = params.empty() ? torch::TensorOptions() : params.front().options();
  torch::Tensor out;
  std::string failure;
  for (int64_t size = 32; size <= 2048 && !out.defined(); size *= 2) {
    try {
      out = body.forward(torch::zeros({1, in_channels, size, size}, options));
    } catch (const std::exception& e) {
      failure = e.what();
    }
  }
  for (size_t i = 0; i < modules.size(); ++i) modules[i]->train(training[i]);
  if (!out.defined())
    throw Error("vision_learner: the model's body fails on zeros of shape [1, " + std::to_string(in_channels) +
                ", 2048, 2048] (" + failure.substr(0, failure.find('\n')) +
                "); does its model function build it for in_channels?");
  if (out.dim() < 2)
    throw Error("vision_learner: the model's body gives " + c10::str(out.sizes()) + ", not [1, features, ...]");
  return out.size(1);
}

// fastai's _get_first_layer: the first module that holds parameters of its own, whose
// weight pretrained RGB filters adapt to other input channels where it is a Conv2d.
std::string first_conv_weight(const torch::nn::Module& body) {
  for (const auto& named : body.named_modules("", /*include_self=*/false))
    if (!named.value()->named_parameters(/*recurse=*/false).is_empty())
      return named.value()->as<torch::nn::Conv2d>() ? named.key() + ".weight" : "";
  return "";
}

using ResNetPtr = ResNet (*)(ResNetOptions);
using XResNetPtr = torch::nn::Sequential (*)(XResNetOptions);

const std::vector<std::pair<std::string, ResNetPtr>> resnets{
    {"resnet18", resnet18}, {"resnet34", resnet34}, {"resnet50", resnet50}, {"resnet101", resnet101}};
const std::vector<std::pair<std::string, XResNetPtr>> xresnets{
    {"xresnet18", xresnet18}, {"xresnet34", xresnet34}, {"xresnet50", xresnet50}, {"xresnet101", xresnet101}};

// The name of the function `make` holds, if it is one of `known`.
template <class Fn, class Ptr>
std::string name_of(const Fn& make, const std::vector<std::pair<std::string, Ptr>>& known) {
  if (const auto* ptr = make.template target<Ptr>())
    for (const auto& [name, fn] : known)
      if (*ptr == fn) return name;
  return "";
}

}  // namespace

torch::Tensor adapt_input_channels(const torch::Tensor& rgb, int64_t n_in) {
  if (rgb.dim() != 4 || rgb.size(1) != 3 || n_in == 3) return rgb;
  if (n_in == 1) return rgb.sum(1, /*keepdim=*/true);
  if (n_in == 2) return rgb.narrow(1, 0, 2) * 1.5;
  auto weight = torch::zeros({rgb.size(0), n_in, rgb.size(2), rgb.size(3)}, rgb.options());
  weight.narrow(1, 0, 3).copy_(rgb);
  return weight;
}

constexpr const char* kResNetSecondGroup = "layer3";
constexpr const char* kXResNetSecondGroup = "3";

std::vector<std::vector<torch::Tensor>> resnet_split(torch::nn::Module& model) {
  return split_body_and_head(model, kResNetSecondGroup, "resnet_split");
}

std::vector<std::vector<torch::Tensor>> xresnet_split(torch::nn::Module& model) {
  return split_body_and_head(model, kXResNetSecondGroup, "xresnet_split");
}

std::vector<std::vector<torch::Tensor>> body_head_split(torch::nn::Module& model) {
  return split_body_and_head(model, "", "body_head_split");
}

bool has_pool_type(const torch::nn::Module& module) {
  static const std::regex pool("Pool[123]d(Impl)?$");
  for (const auto& inner : module.modules())
    if (std::regex_search(inner->name(), pool)) return true;
  return false;
}

Arch Arch::from_resnet(ResNetFn make) {
  Arch arch;
  arch.name_ = name_of(make, resnets);
  arch.body_ = [make = std::move(make)](const BodyOptions& o) {
    auto net = make({.in_channels = o.in_channels, .stem = o.stem, .width = o.width});
    return Body{net->body(), net->num_features(), "conv1.weight", {"fc."}};
  };
  arch.split_ = resnet_split;
  arch.second_group_ = kResNetSecondGroup;
  arch.stats_ = Normalize::imagenet();
  return arch;
}

Arch Arch::from_xresnet(XResNetFn make) {
  Arch arch;
  arch.name_ = name_of(make, xresnets);
  arch.body_ = [make = std::move(make)](const BodyOptions& o) {
    if (o.stem != Stem::imagenet)
      throw Error("vision_learner: an xresnet has fastai's stem of three convs; Stem::cifar is for the ResNets");
    auto net = make({.c_in = o.in_channels, .widen = static_cast<double>(o.width) / 64});
    // fastai's cut: the last four layers (pool, flatten, dropout, linear) are the classifier.
    auto layers = named_layers(*net);
    const auto* classifier = layers.size() > 4 ? layers.back().module->as<torch::nn::Linear>() : nullptr;
    if (!classifier) throw Error("vision_learner: expected an xresnet (layers ending in a Linear)");
    Body body{torch::nn::Sequential(), classifier->options.in_features(), "0.0.weight", {layers.back().name + "."}};
    for (size_t i = 0; i + 4 < layers.size(); ++i) body.layers->push_back(layers[i].name, layers[i].any);
    return body;
  };
  arch.split_ = xresnet_split;
  arch.second_group_ = kXResNetSecondGroup;
  arch.stats_ = Normalize::imagenet();
  return arch;
}

Arch Arch::from_model(ModelFn make, std::optional<int64_t> cut, std::optional<Normalize> stats) {
  if (!make) throw Error("Arch::from_model: no model function given");
  Arch arch;
  arch.stats_ = std::move(stats);
  arch.body_ = [make = std::move(make), cut](const BodyOptions& o) {
    const auto net = make(o);
    const auto layers = named_layers(*net);
    const auto n = static_cast<int64_t>(layers.size());
    int64_t end = n;
    if (cut) {
      end = *cut < 0 ? n + *cut : *cut;
    } else {
      while (end > 0 && !has_pool_type(*layers[end - 1].module)) --end;
      if (end <= 1)
        throw Error(std::string("vision_learner: ") +
                    (end == 0 ? "the model has no pooling layer to cut its body before"
                              : "the model's last pooling layer is its first, which leaves no body") +
                    "; give Arch::from_model a cut (the number of layers in the body)");
      --end;  // the pooling layer starts the part left out
    }
    if (end <= 0 || end > n)
      throw Error("vision_learner: a cut of " + std::to_string(cut ? *cut : end) + " layers, but the model has " +
                  std::to_string(n) + " (the body needs at least one)");
    Body body;
    for (size_t i = 0; i < layers.size(); ++i)
      if (static_cast<int64_t>(i) < end)
        body.layers->push_back(layers[i].name, layers[i].any);
      else
        body.left_out.push_back(layers[i].name + ".");
    body.first_conv = first_conv_weight(*body.layers);
    body.num_features = features_out(*body.layers, o.in_channels);
    return body;
  };
  arch.split_ = body_head_split;
  return arch;
}

std::vector<std::string> Arch::names() {
  std::vector<std::string> out;
  for (const auto& entry : resnets) out.push_back(entry.first);
  for (const auto& entry : xresnets) out.push_back(entry.first);
  return out;
}

Arch Arch::named(const std::string& name) {
  for (const auto& [known, fn] : resnets)
    if (name == known) return from_resnet(fn);
  for (const auto& [known, fn] : xresnets)
    if (name == known) return from_xresnet(fn);
  std::string list;
  for (const auto& known : names()) list += (list.empty() ? "" : ", ") + known;
  throw Error("unknown architecture '" + name + "' (known: " + list + ")");
}

void add_pretrained_normalize(DataLoaders& dls, const std::string& weights, int64_t in_channels, const Normalize& stats) {
  if (weights.empty() || in_channels != 3) return;
  for (DataLoader* loader : {&dls.train, &dls.valid}) {
    const auto& tfms = loader->options().batch_tfms;
    const bool normalized =
        std::any_of(tfms.begin(), tfms.end(), [](const BatchTransform& t) { return t.target<Normalize>() != nullptr; });
    if (!normalized) loader->add_batch_tfms({stats});
  }
}

Body pretrained_body(const Arch& arch, const BodyOptions& options, const std::string& weights) {
  auto body = arch.body(options);
  if (weights.empty()) return body;
  auto state = read_state_dict(weights);
  const c10::IValue first_conv(body.first_conv);
  if (auto it = state.find(first_conv); it != state.end() && it->value().isTensor())
    state.insert_or_assign(first_conv, adapt_input_channels(it->value().toTensor(), options.in_channels));
  load_state_dict(*body.layers, state, "weights '" + weights + "'", {.skip = body.left_out});
  return body;
}

}  // namespace fastcpp::vision
