#include "vision/detection/retinanet.h"

#include <torch/nn/functional/loss.h>
#include <torch/nn/init.h>
#include <torch/nn/modules/activation.h>

#include <cmath>
#include <optional>

#include "core/clone.h"
#include "core/error.h"
#include "core/spec_text.h"
#include "vision/detection/detector_output.h"
#include "vision/models/group_norm.h"
#include "vision/models/small_map_conv.h"

namespace fastcpp::vision {
namespace {

namespace F = torch::nn::functional;

// torchvision's head convs: weights from N(0, 0.01), the bias given (none before a norm).
torch::nn::Conv2d head_conv(int64_t in, int64_t out, std::optional<double> bias) {
  torch::nn::Conv2d conv(torch::nn::Conv2dOptions(in, out, 3).padding(1).bias(bias.has_value()));
  torch::NoGradGuard no_grad;
  torch::nn::init::normal_(conv->weight, 0, 0.01);
  if (bias) conv->bias.fill_(*bias);
  return conv;
}

}  // namespace

RetinaNetBranchImpl::RetinaNetBranchImpl(int64_t channels_, int64_t anchors_, int64_t per_anchor_,
                                         std::string final_name_, double final_bias_, bool group_norm_)
    : channels(channels_), anchors(anchors_), per_anchor(per_anchor_), final_name(std::move(final_name_)),
      final_bias(final_bias_), group_norm(group_norm_) {
  if (group_norm && channels % 32 != 0)
    throw Error("retinanet: a head with GroupNorm needs channels in multiples of 32, got " + std::to_string(channels));
  reset();
}

void RetinaNetBranchImpl::reset() {
  conv = register_module("conv", torch::nn::Sequential());
  for (int i = 0; i < 4; ++i) {
    Stage layer;  // torchvision's Conv2dNormActivation: conv, [norm], ReLU
    layer->push_back("0", head_conv(channels, channels, group_norm ? std::optional<double>() : 0.0));
    if (group_norm) layer->push_back("1", GroupNorm(32, channels));
    layer->push_back(group_norm ? "2" : "1", torch::nn::ReLU(torch::nn::ReLUOptions(true)));
    conv->push_back(layer);
  }
  final = register_module(final_name, head_conv(channels, anchors * per_anchor, final_bias));
}

torch::Tensor RetinaNetBranchImpl::forward(const std::vector<torch::Tensor>& maps) {
  std::vector<torch::Tensor> per_map;
  for (const auto& map : maps) {
    const auto y = conv2d(*final, conv->forward(map));
    const auto n = y.size(0), h = y.size(2), w = y.size(3);
    // [N, A * V, H, W] -> [N, H, W, A, V] -> [N, H * W * A, V]: anchors cell by cell, as the anchors are laid out
    per_map.push_back(y.view({n, anchors, per_anchor, h, w}).permute({0, 3, 4, 1, 2}).reshape({n, -1, per_anchor}));
  }
  return torch::cat(per_map, 1);
}

RetinaNetHeadImpl::RetinaNetHeadImpl(int64_t channels_, int64_t anchors_, int64_t num_classes_, double prior,
                                     bool group_norm_)
    : channels(channels_), anchors(anchors_), num_classes(num_classes_), prior_probability(prior), group_norm(group_norm_) {
  reset();
}

void RetinaNetHeadImpl::reset() {
  // The classification bias makes every score start at the prior (the paper's 0.01), so
  // that the many background anchors do not swamp the first steps' loss.
  const double prior_bias = -std::log((1 - prior_probability) / prior_probability);
  classification_head = register_module(
      "classification_head", RetinaNetBranch(channels, anchors, num_classes, "cls_logits", prior_bias, group_norm));
  regression_head =
      register_module("regression_head", RetinaNetBranch(channels, anchors, 4, "bbox_reg", 0, group_norm));
}

RetinaNetImpl::RetinaNetImpl(RetinaNetOptions options_) : options(std::move(options_)) {
  if (options.num_classes < 1) throw Error("retinanet: num_classes must be positive, got " + std::to_string(options.num_classes));
  if (!(options.prior_probability > 0 && options.prior_probability < 1))  // the classification bias is its logit
    throw Error("retinanet: prior_probability must be between 0 and 1, got " +
                spec_text::number(options.prior_probability));
  const auto& generator = options.anchor_generator;
  if (generator.sizes.size() != 5 || generator.aspect_ratios.size() != 5)
    throw Error("retinanet: the anchor generator needs sizes and aspect ratios for each of the 5 maps");
  for (size_t k = 1; k < 5; ++k)
    if (generator.anchors_per_cell(k) != generator.anchors_per_cell(0))
      throw Error("retinanet: the head needs as many anchors a cell on every map");
  reset();
}

void RetinaNetImpl::reset() {
  const auto anchors = options.anchor_generator.anchors_per_cell(0);
  backbone = register_module("backbone", ResNetFPN(options.arch, options.backbone, options.fpn_channels, options.p6_from_c5));
  head = register_module("head", RetinaNetHead(options.fpn_channels, anchors, options.num_classes,
                                               options.prior_probability, options.head_group_norm));
  anchor_columns_.clear();
}

std::shared_ptr<torch::nn::Module> RetinaNetImpl::clone(const std::optional<torch::Device>& device) const {
  return without_drawing([&] { return Cloneable::clone(device); });
}

torch::Tensor RetinaNetImpl::forward(const torch::Tensor& images) {
  if (images.dim() != 4)
    throw Error("retinanet: expected images [N, C, H, W], got " + c10::str(images.sizes()));
  // Padded with zeros to a multiple of 32 pixels, as torchvision pads a batch
  // (GeneralizedRCNNTransform's size_divisible): each map's cells are then exactly its
  // anchors' stride apart. At 300 pixels the first map's 38 cells would span 304 under
  // anchors 7 pixels apart, drifting off the objects towards the far edges.
  const int64_t height = images.size(2), width = images.size(3);
  const int64_t pad_h = (32 - height % 32) % 32, pad_w = (32 - width % 32) % 32;
  const auto input = pad_h || pad_w ? torch::constant_pad_nd(images, {0, pad_w, 0, pad_h}) : images;
  const auto maps = backbone(input);
  const auto logits = head->classification_head(maps);
  const auto codes = head->regression_head(maps);
  return DetectorOutput::pack(codes, logits,
                              anchor_columns_.of(options.anchor_generator, maps, input, {{height, width}}));
}

RetinaNet retinanet(RetinaNetOptions options) { return RetinaNet(std::move(options)); }

RetinaNetLosses retinanet_losses(const torch::Tensor& output, const torch::Tensor& targets,
                                 const RetinaNetLossOptions& options) {
  const DetectorOutput out(output, "retinanet_loss");
  const auto n = output.size(0);
  check_box_targets(targets, out, "retinanet_loss");
  const auto all_anchors = out.anchors(), all_codes = out.codes(), all_logits = out.logits();
  const auto all_targets = targets.to(output.device());
  torch::Tensor classification, box_regression;
  for (int64_t i = 0; i < n; ++i) {
    const auto truth = image_boxes(all_targets, i, /*crowds=*/false);
    const auto anchors = all_anchors[i], codes = all_codes[i], logits = all_logits[i];
    const auto matched = options.matcher.match(truth.boxes, anchors);
    const auto foreground = torch::nonzero(matched >= 0).squeeze(1);
    const auto boxes_of_foreground = matched.index({foreground});
    const auto divisor = static_cast<double>(std::max<int64_t>(1, foreground.size(0)));

    // Classification: a one-hot target for each matched anchor, none for the others;
    // the anchors between the thresholds do not count.
    auto classes = torch::zeros_like(logits);
    classes.index_put_({foreground, truth.labels.index({boxes_of_foreground})}, 1.0);
    const auto counted = matched != Matcher::between_thresholds;
    const auto cls = sigmoid_focal_loss(logits.index({counted}), classes.index({counted}), options.focal_alpha,
                                        options.focal_gamma, Reduction::sum) / divisor;

    // Box regression, on the matched anchors only.
    const auto predicted = codes.index({foreground}), anchors_fg = anchors.index({foreground});
    const auto truth_fg = truth.boxes.to(anchors.dtype()).index({boxes_of_foreground});
    torch::Tensor box;
    switch (options.box_loss) {
      case BoxLoss::l1:
        box = F::l1_loss(predicted, options.coder.encode(truth_fg, anchors_fg), F::L1LossFuncOptions(torch::kSum));
        break;
      case BoxLoss::smooth_l1:
        box = F::smooth_l1_loss(predicted, options.coder.encode(truth_fg, anchors_fg),
                                F::SmoothL1LossFuncOptions(torch::kSum), options.smooth_l1_beta);
        break;
      case BoxLoss::giou:
        box = generalized_box_iou_loss(options.coder.decode(predicted, anchors_fg), truth_fg).sum();
        break;
    }
    box = box / divisor;
    classification = i == 0 ? cls : classification + cls;
    box_regression = i == 0 ? box : box_regression + box;
  }
  return {classification / n, box_regression / n};
}

Loss retinanet_loss(RetinaNetLossOptions options) {
  return Loss([options](const torch::Tensor& output, const torch::Tensor& targets) {
    const auto losses = retinanet_losses(output, targets, options);
    return losses.classification + losses.box_regression;
  });
}

}  // namespace fastcpp::vision
