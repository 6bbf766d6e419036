#include "vision/models/unet.h"

#include <torch/nn/functional/upsampling.h>
#include <torch/nn/init.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/padding.h>
#include <torch/nn/modules/pixelshuffle.h>
#include <torch/nn/modules/pooling.h>

#include <algorithm>

#include "core/clone.h"
#include "core/error.h"
#include "core/sequential.h"
#include "vision/models/head.h"
#include "vision/models/self_attention.h"

namespace fastcpp::vision {
namespace {

// fastai's ConvLayer with norm_type None: a conv with bias and "same" padding, then a
// ReLU when `act`. Initialised as fastai's init_linear: the bias from N(0, bias_std)
// (zero for bias_std 0), the weight He-uniform before a ReLU, torch's default without.
Stage conv_layer(int64_t ni, int64_t nf, int64_t ks, bool act, double bias_std = 0.01) {
  torch::nn::Conv2d conv(torch::nn::Conv2dOptions(ni, nf, ks).padding((ks - 1) / 2).bias(true));
  {
    torch::NoGradGuard no_grad;
    if (bias_std != 0) conv->bias.normal_(0, bias_std);
    else conv->bias.zero_();
    if (act) torch::nn::init::kaiming_uniform_(conv->weight);
  }
  Stage layer(conv);
  if (act) layer->push_back(torch::nn::ReLU());
  return layer;
}

// fastai's BatchNorm: weight 1, bias 1e-3.
distributed::SyncBatchNorm batch_norm(int64_t nf) {
  distributed::SyncBatchNorm bn(nf);
  torch::NoGradGuard no_grad;
  bn->bias.fill_(1e-3);
  return bn;
}

// fastai's icnr_init for a conv weight [out, in, kh, kw] that a PixelShuffle by `scale`
// follows: He-normal sub-kernels, each repeated for the scale*scale output positions
// it feeds, so the upsampled map starts free of checkerboard artefacts. The same
// reshapes as fastai's, in the same order.
torch::Tensor icnr(const torch::Tensor& weight, int64_t scale = 2) {
  const int64_t ni = weight.size(0), nf = weight.size(1), h = weight.size(2), w = weight.size(3);
  const int64_t ni2 = ni / (scale * scale);
  auto k = torch::zeros({ni2, nf, h, w}, weight.options());
  torch::nn::init::kaiming_normal_(k);
  k = k.transpose(0, 1).contiguous().view({ni2, nf, -1}).repeat({1, 1, scale * scale});
  return k.contiguous().view({nf, ni, h, w}).transpose(0, 1);
}

// fastai's PixelShuffle_ICNR (norm_type None): a 1x1 ConvLayer to nf * 4 channels
// (zero bias, ICNR weight), PixelShuffle(2), and with blur a replication pad and a 2x2
// average pool of stride 1.
Stage pixel_shuffle_icnr(int64_t ni, int64_t nf, bool blur) {
  auto shuffle = conv_layer(ni, nf * 4, 1, /*act=*/true, /*bias_std=*/0);
  {
    auto& conv = shuffle[0]->as<torch::nn::Conv2dImpl>()->weight;
    torch::NoGradGuard no_grad;
    conv.copy_(icnr(conv));
  }
  Stage layers(shuffle, torch::nn::PixelShuffle(2));
  if (blur) {
    layers->push_back(torch::nn::ReplicationPad2d(torch::nn::ReplicationPad2dOptions({1, 0, 1, 0})));
    layers->push_back(torch::nn::AvgPool2d(torch::nn::AvgPool2dOptions(2).stride(1)));
  }
  return layers;
}

// fastai's apply_init(m, kaiming_normal_): He-normal weights and zero biases for every
// layer of `module` but the norms (a spectrally normalized conv's weight is weight_orig).
void apply_init(torch::nn::Module& module) {
  torch::NoGradGuard no_grad;
  for (const auto& m : module.modules(/*include_self=*/true)) {
    if (dynamic_cast<const NormLayer*>(m.get())) continue;
    if (auto* weight = m->named_parameters(false).find("weight")) torch::nn::init::kaiming_normal_(*weight);
    if (auto* weight = m->named_parameters(false).find("weight_orig")) torch::nn::init::kaiming_normal_(*weight);
    if (auto* bias = m->named_parameters(false).find("bias")) bias->zero_();
  }
}

// `x` resized to the height and width of `like` by nearest neighbour, where they differ.
torch::Tensor resize_like(const torch::Tensor& x, const torch::Tensor& like) {
  const auto size = like.sizes().slice(2).vec();
  if (x.sizes().slice(2).vec() == size) return x;
  namespace F = torch::nn::functional;
  return F::interpolate(x, F::InterpolateFuncOptions().size(size).mode(torch::kNearest));
}

}  // namespace

torch::nn::Sequential unet_encoder(const Arch& arch, const BodyOptions& options, const std::string& weights) {
  return unet_encoder(pretrained_body(arch, options, weights));
}

torch::nn::Sequential unet_encoder(const Body& body) {
  torch::nn::Sequential encoder;
  for (const auto& layer : named_layers(*body.layers)) encoder->push_back(layer.any);
  return encoder;
}

UnetBlockImpl::UnetBlockImpl(int64_t up_in_c_, int64_t x_in_c_, bool final_div_, bool blur_, bool self_attention_)
    : up_in_c(up_in_c_), x_in_c(x_in_c_), final_div(final_div_), blur(blur_), self_attention(self_attention_) {
  shuf = register_module("shuf", pixel_shuffle_icnr(up_in_c, up_in_c / 2, blur));
  bn = register_module("bn", batch_norm(x_in_c));
  const int64_t ni = up_in_c / 2 + x_in_c, nf = final_div ? ni : ni / 2;
  conv1 = register_module("conv1", conv_layer(ni, nf, 3, true));
  conv2 = register_module("conv2", conv_layer(nf, nf, 3, true));
  if (self_attention) conv2->push_back(SelfAttention(nf));  // fastai's ConvLayer(xtra=SelfAttention(nf))
  apply_init(*conv1);
  apply_init(*conv2);
}

void UnetBlockImpl::reset() {
  shuf = register_module("shuf", Stage());
  bn = register_module("bn", distributed::SyncBatchNorm(x_in_c));
  conv1 = register_module("conv1", Stage());
  conv2 = register_module("conv2", Stage());
}

torch::Tensor UnetBlockImpl::forward(const torch::Tensor& up_in, const torch::Tensor& skip) {
  const auto up_out = resize_like(shuf->forward(up_in), skip);
  return conv2->forward(conv1->forward(torch::relu(torch::cat({up_out, bn->forward(skip)}, 1))));
}

UnetResBlockImpl::UnetResBlockImpl(int64_t ni_, int64_t nf_) : ni(ni_), nf(nf_) {
  convpath = register_module("convpath", Stage(conv_layer(ni, nf, 3, true), conv_layer(nf, nf, 3, false)));
  idpath = register_module("idpath", Stage());
  if (ni != nf) {  // fastai's ConvLayer(ni, nf, 1, act_cls=None): its default norm, BatchNorm
    torch::nn::Conv2d conv(torch::nn::Conv2dOptions(ni, nf, 1).bias(false));
    idpath->push_back(Stage(conv, batch_norm(nf)));
  }
}

void UnetResBlockImpl::reset() {
  convpath = register_module("convpath", Stage());
  idpath = register_module("idpath", Stage());
}

torch::Tensor UnetResBlockImpl::forward(const torch::Tensor& x) {
  return torch::relu(convpath->forward(x) + (idpath->is_empty() ? x : idpath->forward(x)));
}

DynamicUnetImpl::DynamicUnetImpl(torch::nn::Sequential encoder, UnetOptions options) : options_(std::move(options)) {
  if (options_.img_size.size() != 2)
    throw Error("DynamicUnet: img_size must be {height, width}, got " + std::to_string(options_.img_size.size()) +
                " values");
  build(std::move(encoder));
}

void DynamicUnetImpl::reset() { layers = register_module("layers", torch::nn::ModuleList()); }

std::shared_ptr<torch::nn::Module> DynamicUnetImpl::clone(const std::optional<torch::Device>& device) const {
  return without_drawing([&] { return Cloneable::clone(device); });
}

torch::nn::Sequential DynamicUnetImpl::encoder() const {
  return torch::nn::Sequential(layers->ptr<torch::nn::SequentialImpl>(0));
}

void DynamicUnetImpl::build(torch::nn::Sequential encoder) {
  // The shapes out of each encoder layer, from a pass over zeros in eval mode (fastai's
  // model_sizes), and the input channels (those of its first conv).
  int64_t in_channels = 0;
  for (const auto& p : encoder->parameters())
    if (p.dim() == 4) {
      in_channels = p.size(1);
      break;
    }
  if (in_channels == 0) throw Error("DynamicUnet: the encoder has no conv layer");
  std::vector<std::vector<int64_t>> sizes;
  {
    const bool was_training = encoder->is_training();
    encoder->eval();
    torch::NoGradGuard no_grad;
    const auto first = encoder->parameters().front();
    auto x = torch::zeros({1, in_channels, options_.img_size[0], options_.img_size[1]}, first.options());
    for (auto& layer : *encoder) {
      x = layer.forward(x);
      sizes.push_back(x.sizes().vec());
    }
    encoder->train(was_training);
  }
  skip_layers_.clear();
  for (size_t i = 0; i + 1 < sizes.size(); ++i)
    if (sizes[i].back() != sizes[i + 1].back()) skip_layers_.push_back(static_cast<int64_t>(i));
  std::reverse(skip_layers_.begin(), skip_layers_.end());
  if (skip_layers_.empty()) throw Error("DynamicUnet: the encoder never changes the resolution: no skip connection to make");

  const int64_t channels = sizes.back()[1];
  layers = register_module("layers", torch::nn::ModuleList());
  layers->push_back(encoder);
  layers->push_back(batch_norm(channels));
  layers->push_back(torch::nn::ReLU());
  Stage middle(conv_layer(channels, channels * 2, 3, true), conv_layer(channels * 2, channels, 3, true));
  layers->push_back(middle);

  first_block_ = static_cast<int64_t>(layers->size());
  int64_t up_in_c = channels;
  for (size_t i = 0; i < skip_layers_.size(); ++i) {
    const bool not_final = i + 1 != skip_layers_.size();
    const int64_t x_in_c = sizes[static_cast<size_t>(skip_layers_[i])][1];
    const bool blur = options_.blur && (not_final || options_.blur_final);
    const bool attention = options_.self_attention && i + 3 == skip_layers_.size();
    layers->push_back(UnetBlock(up_in_c, x_in_c, not_final, blur, attention));
    const int64_t ni = up_in_c / 2 + x_in_c;
    up_in_c = not_final ? ni : ni / 2;
  }
  int64_t ni = up_in_c;
  final_shuffle_ = -1;
  if (sizes.front()[2] != options_.img_size[0] || sizes.front()[3] != options_.img_size[1]) {
    final_shuffle_ = static_cast<int64_t>(layers->size());
    layers->push_back(pixel_shuffle_icnr(ni, ni, false));
  }
  layers->push_back(torch::nn::Identity());  // ResizeToOrig
  cross_block_ = -1;
  if (options_.last_cross) {
    layers->push_back(torch::nn::Identity());  // MergeLayer(dense=True)
    ni += in_channels;
    cross_block_ = static_cast<int64_t>(layers->size());
    layers->push_back(UnetResBlock(ni, options_.bottle ? ni / 2 : ni));
    if (options_.bottle) ni /= 2;
  }
  final_conv_ = static_cast<int64_t>(layers->size());
  layers->push_back(conv_layer(ni, options_.n_out, 1, /*act=*/false));
  apply_init(*middle);
  apply_init(*layers->ptr(static_cast<size_t>(final_conv_ - 1)));
  if (options_.y_range) layers->push_back(SigmoidRange(options_.y_range->first, options_.y_range->second));
  layers->push_back(torch::nn::Identity());  // ToTensorBase
}

torch::Tensor DynamicUnetImpl::forward(const torch::Tensor& input) {
  auto& encoder = *layers->ptr<torch::nn::SequentialImpl>(0);
  std::vector<torch::Tensor> skips(skip_layers_.size());
  torch::Tensor x = input;
  int64_t index = 0;
  for (auto& layer : encoder) {
    x = layer.forward(x);
    for (size_t i = 0; i < skip_layers_.size(); ++i)
      if (skip_layers_[i] == index) skips[i] = x;
    ++index;
  }
  x = torch::relu(layers->ptr<distributed::SyncBatchNormImpl>(1)->forward(x));
  x = layers->ptr<StageImpl>(3)->forward(x);
  for (size_t i = 0; i < skips.size(); ++i)
    x = layers->ptr<UnetBlockImpl>(static_cast<size_t>(first_block_) + i)->forward(x, skips[i]);
  if (final_shuffle_ >= 0) x = layers->ptr<StageImpl>(static_cast<size_t>(final_shuffle_))->forward(x);
  x = resize_like(x, input);
  if (cross_block_ >= 0)
    x = layers->ptr<UnetResBlockImpl>(static_cast<size_t>(cross_block_))->forward(torch::cat({x, input}, 1));
  x = layers->ptr<StageImpl>(static_cast<size_t>(final_conv_))->forward(x);
  if (options_.y_range) x = layers->ptr<SigmoidRangeImpl>(static_cast<size_t>(final_conv_) + 1)->forward(x);
  return x;
}

}  // namespace fastcpp::vision
