#include "vision/detection/ssd.h"

#include <torch/nn/functional/loss.h>
#include <torch/nn/functional/normalization.h>
#include <torch/nn/init.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/pooling.h>

#include <limits>
#include <string>

#include "core/clone.h"
#include "core/error.h"
#include "formats/state_dict.h"
#include "vision/detection/detector_output.h"
#include "vision/models/resnet.h"

namespace fastcpp::vision {
namespace {

namespace F = torch::nn::functional;
namespace nn = torch::nn;

enum class Init { kaiming, xavier };  // VGG's own layers | the layers SSD adds

nn::Conv2d conv(int64_t in, int64_t out, int64_t kernel, Init init, int64_t padding = 0, int64_t stride = 1,
                int64_t dilation = 1) {
  nn::Conv2d c(nn::Conv2dOptions(in, out, kernel).padding(padding).stride(stride).dilation(dilation));
  torch::NoGradGuard no_grad;
  if (init == Init::kaiming)
    nn::init::kaiming_normal_(c->weight, 0, torch::kFanOut, torch::kReLU);
  else
    nn::init::xavier_uniform_(c->weight);
  nn::init::zeros_(c->bias);
  return c;
}

nn::ReLU relu() { return nn::ReLU(nn::ReLUOptions(true)); }
nn::MaxPool2d pool(bool ceil_mode = false) { return nn::MaxPool2d(nn::MaxPool2dOptions(2).stride(2).ceil_mode(ceil_mode)); }

// (Stage: a Sequential that can sit in another, vision/models/resnet.h.)
// A 1x1 conv to `middle` channels, then a 3x3 conv to `out` (stride 2 and padding 1, or neither), each with ReLU.
Stage extra_block(int64_t in, int64_t middle, int64_t out, bool halve) {
  return Stage(conv(in, middle, 1, Init::xavier), relu(),
                        conv(middle, out, 3, Init::xavier, halve ? 1 : 0, halve ? 2 : 1), relu());
}

const std::vector<int64_t> kMapChannels{512, 1024, 512, 256, 256, 256};
constexpr int64_t kSmallestSide = 268;  // maps of 34, 17, 9, 5, 3 and 1 cells

}  // namespace

SsdVggBackboneImpl::SsdVggBackboneImpl() { reset(); }

void SsdVggBackboneImpl::reset() {
  // VGG-16's configuration D up to conv4_3; module indices are torchvision's
  features = nn::Sequential();
  int64_t in = 3;
  for (const int64_t out : {64, 64, -1, 128, 128, -1, 256, 256, 256, -2, 512, 512, 512}) {
    if (out < 0) {
      features->push_back(pool(out == -2));  // the third pooling rounds up: 75 -> 38 at 300 pixels
      continue;
    }
    features->push_back(conv(in, out, 3, Init::kaiming, 1));
    features->push_back(relu());
    in = out;
  }
  register_module("features", features);
  scale_weight = register_parameter("scale_weight", torch::full({512}, 20.0));

  Stage fc(nn::MaxPool2d(nn::MaxPool2dOptions(3).stride(1).padding(1)),
                    conv(512, 1024, 3, Init::xavier, 6, 1, 6), relu(),  // fc6, atrous
                    conv(1024, 1024, 1, Init::xavier), relu());          // fc7
  Stage conv5(pool());
  for (int i = 0; i < 3; ++i) {
    conv5->push_back(conv(512, 512, 3, Init::kaiming, 1));
    conv5->push_back(relu());
  }
  conv5->push_back(fc);
  extra = register_module("extra", nn::ModuleList(conv5, extra_block(1024, 256, 512, true), extra_block(512, 128, 256, true),
                                                  extra_block(256, 128, 256, false), extra_block(256, 128, 256, false)));
}

std::vector<torch::Tensor> SsdVggBackboneImpl::forward(const torch::Tensor& images) {
  auto x = features->forward(images);
  std::vector<torch::Tensor> maps{scale_weight.view({1, -1, 1, 1}) * F::normalize(x, F::NormalizeFuncOptions().dim(1))};
  for (const auto& block : *extra) {
    x = block->as<StageImpl>()->forward(x);
    maps.push_back(x);
  }
  return maps;
}

SsdScoringHeadImpl::SsdScoringHeadImpl(std::vector<int64_t> channels_, std::vector<int64_t> anchors_, int64_t per_anchor_)
    : channels(std::move(channels_)), anchors(std::move(anchors_)), per_anchor(per_anchor_) {
  reset();
}

void SsdScoringHeadImpl::reset() {
  module_list = register_module("module_list", nn::ModuleList());
  for (size_t k = 0; k < channels.size(); ++k) module_list->push_back(conv(channels[k], anchors[k] * per_anchor, 3, Init::xavier, 1));
}

torch::Tensor SsdScoringHeadImpl::forward(const std::vector<torch::Tensor>& maps) {
  if (maps.size() != module_list->size())
    throw Error("ssd: the head has " + std::to_string(module_list->size()) + " convs for " + std::to_string(maps.size()) +
                " maps");
  std::vector<torch::Tensor> per_map;
  for (size_t k = 0; k < maps.size(); ++k) {
    const auto y = module_list[k]->as<nn::Conv2d>()->forward(maps[k]);
    const auto n = y.size(0), h = y.size(2), w = y.size(3);
    // [N, A * V, H, W] -> [N, H, W, A, V] -> [N, H * W * A, V]: cell by cell, as the default boxes
    per_map.push_back(y.view({n, -1, per_anchor, h, w}).permute({0, 3, 4, 1, 2}).reshape({n, -1, per_anchor}));
  }
  return torch::cat(per_map, 1);
}

SsdHeadImpl::SsdHeadImpl(std::vector<int64_t> channels_, std::vector<int64_t> anchors_, int64_t num_classes_)
    : channels(std::move(channels_)), anchors(std::move(anchors_)), num_classes(num_classes_) {
  reset();
}

void SsdHeadImpl::reset() {
  classification_head = register_module("classification_head", SsdScoringHead(channels, anchors, num_classes + 1));
  regression_head = register_module("regression_head", SsdScoringHead(channels, anchors, 4));
}

SsdImpl::SsdImpl(SsdOptions options_) : options(std::move(options_)) {
  if (options.num_classes < 1) throw Error("ssd: num_classes must be positive, got " + std::to_string(options.num_classes));
  if (options.anchor_generator.aspect_ratios.size() != kMapChannels.size())
    throw Error("ssd: the default boxes need aspect ratios for each of the 6 maps, got " +
                std::to_string(options.anchor_generator.aspect_ratios.size()));
  reset();
}

void SsdImpl::reset() {
  std::vector<int64_t> anchors;
  for (size_t k = 0; k < kMapChannels.size(); ++k) anchors.push_back(options.anchor_generator.anchors_per_cell(k));
  backbone = register_module("backbone", SsdVggBackbone());
  head = register_module("head", SsdHead(kMapChannels, anchors, options.num_classes));
  anchor_columns_.clear();
}

std::shared_ptr<torch::nn::Module> SsdImpl::clone(const std::optional<torch::Device>& device) const {
  return without_drawing([&] { return Cloneable::clone(device); });
}

torch::Tensor SsdImpl::forward(const torch::Tensor& images) {
  if (images.dim() != 4 || images.size(1) != 3)
    throw Error("ssd: expected images [N, 3, H, W], got " + c10::str(images.sizes()));
  if (images.size(2) < kSmallestSide || images.size(3) < kSmallestSide)
    throw Error("ssd: images need " + std::to_string(kSmallestSide) + " pixels a side or more (the last extra block "
                "leaves no cell below that; torchvision's size is 300), got " + std::to_string(images.size(2)) + " x " +
                std::to_string(images.size(3)));
  const auto maps = backbone(images);
  const auto logits = head->classification_head(maps);
  const auto codes = head->regression_head(maps);
  return DetectorOutput::pack(codes, logits, anchor_columns_.of(options.anchor_generator, maps, images));
}

Ssd ssd300_vgg16(SsdOptions options) { return Ssd(std::move(options)); }

void load_vgg16_features(SsdVggBackboneImpl& backbone, const std::string& path) {
  const auto saved = read_state_dict(path);
  auto renamed = c10::impl::GenericDict(c10::StringType::get(), c10::TensorType::get());
  for (int index : {0, 2, 5, 7, 10, 12, 14, 17, 19, 21, 24, 26, 28}) {  // VGG-16's 13 convs
    const auto ours = index < 23 ? "features." + std::to_string(index) : "extra.0." + std::to_string(index - 23);
    for (const std::string what : {".weight", ".bias"}) {
      const auto key = "features." + std::to_string(index) + what;
      renamed.insert(ours + what, typed_entry(saved, key, &c10::IValue::isTensor, "vgg16 weights '" + path + "'"));
    }
  }
  load_state_dict(backbone, renamed, "vgg16 weights '" + path + "'", {.strict = false});
}

SsdLosses ssd_losses(const torch::Tensor& output, const torch::Tensor& targets, const SsdLossOptions& options) {
  const DetectorOutput out(output, "ssd_loss");
  const auto n = output.size(0);
  check_box_targets(targets, out, "ssd_loss");
  const auto all_anchors = out.anchors(), all_codes = out.codes(), logits = out.logits();
  const auto all_targets = targets.to(output.device());
  std::vector<torch::Tensor> classes;  // each anchor's class, 0 for the background
  torch::Tensor box_regression;
  int64_t matched_anchors = 0;
  for (int64_t i = 0; i < n; ++i) {
    const auto truth = image_boxes(all_targets, i, /*crowds=*/false);
    const auto anchors = all_anchors[i];
    const auto matched = options.matcher.match(truth.boxes, anchors);
    const auto foreground = torch::nonzero(matched >= 0).squeeze(1);
    const auto boxes_of_foreground = matched.index({foreground});
    matched_anchors += foreground.size(0);
    const auto anchors_fg = anchors.index({foreground});
    const auto truth_fg = truth.boxes.to(anchors.dtype()).index({boxes_of_foreground});
    const auto box = F::smooth_l1_loss(all_codes[i].index({foreground}), options.coder.encode(truth_fg, anchors_fg),
                                       F::SmoothL1LossFuncOptions(torch::kSum));
    box_regression = i == 0 ? box : box_regression + box;
    auto image_classes = torch::zeros({anchors.size(0)}, torch::dtype(torch::kLong).device(output.device()));
    image_classes.index_put_({foreground}, truth.labels.index({boxes_of_foreground}) + 1);
    classes.push_back(image_classes);
  }
  const auto target = torch::stack(classes);
  const auto loss = F::cross_entropy(logits.reshape({-1, logits.size(2)}), target.view(-1),
                                     F::CrossEntropyFuncOptions().reduction(torch::kNone))
                        .view(target.sizes());
  // Hard negatives: in each image, the background anchors of highest loss, 3 for each match.
  const auto foreground = target > 0;
  const auto negatives = options.negatives_per_positive * foreground.sum(1, true);
  const auto ranked = loss.detach().masked_fill(foreground, -std::numeric_limits<double>::infinity());
  const auto order = std::get<1>(ranked.sort(1, true));
  const auto background = std::get<1>(order.sort(1)) < negatives;
  const auto divisor = static_cast<double>(std::max<int64_t>(1, matched_anchors));
  return {(loss.index({foreground}).sum() + loss.index({background}).sum()) / divisor, box_regression / divisor};
}

Loss ssd_loss(SsdLossOptions options) {
  return Loss([options](const torch::Tensor& output, const torch::Tensor& targets) {
    const auto losses = ssd_losses(output, targets, options);
    return losses.classification + losses.box_regression;
  });
}

}  // namespace fastcpp::vision
