#include "vision/detection/feature_pyramid.h"

#include <ATen/autocast_mode.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/nn/functional/activation.h>
#include <torch/nn/functional/upsampling.h>
#include <torch/nn/init.h>
#include <torch/nn/modules/container/sequential.h>

#include "core/error.h"
#include "core/sequential.h"
#include "vision/models/small_map_conv.h"

namespace fastcpp::vision {
namespace {

namespace F = torch::nn::functional;

// torchvision's FPN convs: He-uniform with a = 1, zero bias.
torch::nn::Conv2d fpn_conv(int64_t in, int64_t out, int64_t kernel, int64_t stride = 1) {
  torch::nn::Conv2d conv(torch::nn::Conv2dOptions(in, out, kernel).stride(stride).padding(kernel / 2));
  torch::NoGradGuard no_grad;
  torch::nn::init::kaiming_uniform_(conv->weight, 1);
  conv->bias.zero_();
  return conv;
}

// torchvision's Conv2dNormActivation without norm or activation: the conv under "0".
torch::nn::Sequential block(torch::nn::Conv2d conv) {
  torch::nn::Sequential seq;
  seq->push_back("0", std::move(conv));
  return seq;
}

const std::vector<std::string> kReturned{"layer2", "layer3", "layer4"};

// PyTorch 2.11's bf16 convolutions on the CPU (oneDNN) give non-finite weight gradients now
// and then for a 3x3 stride-2 conv of a 1x1 map (in Python too: 10 calls in 200, in about
// half of the processes), which P6 and P7 meet on images of 64 pixels or less. There the
// conv runs in float: it is one pixel. Otherwise it is vision::conv2d (P7 over a 2x2 P6:
// one matrix product on the CPU).
torch::Tensor conv_of_map(torch::nn::Conv2d& conv, const torch::Tensor& x) {
  const bool cpu_bf16 = x.is_cpu() && at::autocast::is_autocast_enabled(at::kCPU) &&
                        at::autocast::get_autocast_dtype(at::kCPU) == at::kBFloat16;
  if (!cpu_bf16 || x.size(-1) != 1 || x.size(-2) != 1) return conv2d(*conv, x);
  c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::DispatchKey::AutocastCPU);
  return conv(x.to(torch::kFloat));
}

}  // namespace

ResNetBodyImpl::ResNetBodyImpl(ResNetArch arch_, ResNetOptions options_) : arch(arch_), options(options_) {
  if (options.stem != Stem::imagenet) throw Error("ResNetBody: RetinaNet's strides need the ImageNet stem");
  reset();
}

void ResNetBodyImpl::reset() {
  auto o = options;
  o.num_classes = 1;  // the classifier is not kept
  const auto net = arch(o);
  layers_.clear();
  for (const auto& layer : named_layers(*net->body())) {
    register_module(layer.name, layer.module);
    layers_.emplace_back(layer.name, layer.any);
  }
  const int64_t expansion = net->num_features() / (o.width * 8);
  out_channels_ = {o.width * 2 * expansion, o.width * 4 * expansion, o.width * 8 * expansion};
}

std::vector<torch::Tensor> ResNetBodyImpl::forward(const torch::Tensor& x) {
  std::vector<torch::Tensor> outputs;
  auto h = x;
  for (auto& [name, layer] : layers_) {
    h = layer.forward(h);
    if (std::find(kReturned.begin(), kReturned.end(), name) != kReturned.end()) outputs.push_back(h);
  }
  return outputs;
}

LastLevelP6P7Impl::LastLevelP6P7Impl(int64_t in, int64_t out, bool p5)
    : in_channels(in), out_channels(out), from_p5(p5) {
  reset();
}

void LastLevelP6P7Impl::reset() {
  p6 = register_module("p6", fpn_conv(in_channels, out_channels, 3, 2));
  p7 = register_module("p7", fpn_conv(out_channels, out_channels, 3, 2));
}

std::vector<torch::Tensor> LastLevelP6P7Impl::forward(const torch::Tensor& x) {
  auto top = conv_of_map(p6, x);
  auto more = conv_of_map(p7, F::relu(top));
  return {std::move(top), std::move(more)};
}

FeaturePyramidImpl::FeaturePyramidImpl(std::vector<int64_t> in, int64_t out, bool from_c5)
    : in_channels(std::move(in)), out_channels(out), p6_from_c5(from_c5) {
  if (in_channels.empty()) throw Error("FeaturePyramid: no input maps");
  reset();
}

void FeaturePyramidImpl::reset() {
  inner_blocks = register_module("inner_blocks", torch::nn::ModuleList());
  layer_blocks = register_module("layer_blocks", torch::nn::ModuleList());
  for (const auto channels : in_channels) {
    inner_blocks->push_back(block(fpn_conv(channels, out_channels, 1)));
    layer_blocks->push_back(block(fpn_conv(out_channels, out_channels, 3)));
  }
  extra_blocks = register_module(
      "extra_blocks", LastLevelP6P7(p6_from_c5 ? in_channels.back() : out_channels, out_channels, !p6_from_c5));
}

std::vector<torch::Tensor> FeaturePyramidImpl::forward(const std::vector<torch::Tensor>& c) {
  if (c.size() != in_channels.size())
    throw Error("FeaturePyramid: expected " + std::to_string(in_channels.size()) + " maps, got " +
                std::to_string(c.size()));
  const auto n = static_cast<int64_t>(c.size());
  std::vector<torch::Tensor> p(c.size());
  auto top_down = inner_blocks->at<torch::nn::SequentialImpl>(n - 1).forward(c.back());
  p.back() = layer_blocks->at<torch::nn::SequentialImpl>(n - 1).forward(top_down);
  for (int64_t i = n - 2; i >= 0; --i) {
    auto lateral = inner_blocks->at<torch::nn::SequentialImpl>(i).forward(c[i]);
    const std::vector<int64_t> size{lateral.size(-2), lateral.size(-1)};
    top_down = lateral + F::interpolate(top_down, F::InterpolateFuncOptions().size(size).mode(torch::kNearest));
    p[i] = layer_blocks->at<torch::nn::SequentialImpl>(i).forward(top_down);
  }
  for (auto& extra : extra_blocks->forward(extra_blocks->uses_p5() ? p.back() : c.back())) p.push_back(std::move(extra));
  return p;
}

ResNetFPNImpl::ResNetFPNImpl(ResNetArch arch_, ResNetOptions options_, int64_t out, bool from_c5)
    : arch(arch_), options(options_), out_channels(out), p6_from_c5(from_c5) {
  reset();
}

void ResNetFPNImpl::reset() {
  body = register_module("body", ResNetBody(arch, options));
  const auto channels = body->out_channels();
  fpn = register_module("fpn", FeaturePyramid(channels, out_channels, p6_from_c5));
}

std::vector<torch::Tensor> ResNetFPNImpl::forward(const torch::Tensor& x) { return fpn(body(x)); }

}  // namespace fastcpp::vision
