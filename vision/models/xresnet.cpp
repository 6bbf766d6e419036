#include "vision/models/xresnet.h"

#include <torch/nn/init.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/dropout.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/pooling.h>

#include "core/error.h"
#include "vision/models/avg_pool.h"
#include "vision/models/small_map_conv.h"

namespace fastcpp::vision {
namespace {

enum class Norm { one, zero };  // the norm's starting scale: zero makes a block start as the identity

// fastai's ConvLayer: a bias-free conv with "same" padding, a norm, and a ReLU when `act`.
Stage conv_layer(int64_t ni, int64_t nf, int64_t ks, int64_t stride = 1, Norm norm = Norm::one, bool act = true) {
  Stage layer;
  layer->push_back(torch::nn::Conv2d(torch::nn::Conv2dOptions(ni, nf, ks).stride(stride).padding(ks / 2).bias(false)));
  distributed::SyncBatchNorm bn(nf);
  torch::NoGradGuard no_grad;
  bn->weight.fill_(norm == Norm::zero ? 0.0 : 1.0);
  layer->push_back(bn);
  if (act) layer->push_back(torch::nn::ReLU(torch::nn::ReLUOptions(true)));
  return layer;
}

}  // namespace

ResBlockImpl::ResBlockImpl(int64_t expansion, int64_t ni, int64_t nf, int64_t stride)
    : expansion(expansion), ni(ni), nf(nf), stride(stride) {
  reset();
}

void ResBlockImpl::reset() {
  // As fastai's: ni and nf count in units of `expansion` channels; nf is also the hidden width.
  const int64_t in = ni * expansion, out = nf * expansion;
  Stage convs;
  if (expansion == 1) {
    convs->push_back(conv_layer(in, nf, 3, stride));
    convs->push_back(conv_layer(nf, out, 3, 1, Norm::zero, /*act=*/false));
  } else {
    convs->push_back(conv_layer(in, nf, 1));
    convs->push_back(conv_layer(nf, nf, 3, stride));
    convs->push_back(conv_layer(nf, out, 1, 1, Norm::zero, /*act=*/false));
  }
  convpath = register_module("convpath", convs);
  Stage shortcut;
  if (stride != 1)
    shortcut->push_back(AvgPool(stride, /*ceil_mode=*/true));
  if (in != out) shortcut->push_back(conv_layer(in, out, 1, 1, Norm::one, /*act=*/false));
  idpath = register_module("idpath", shortcut);
}

torch::Tensor ResBlockImpl::forward(const torch::Tensor& x) {
  const auto shortcut = idpath->is_empty() ? x : idpath->forward(x);
  // relu(convpath(x) + shortcut), the last ConvLayer's BatchNorm taking the add and the ReLU
  // (forward_relu: one kernel each way on the CPU).
  auto out = x;
  const size_t layers = convpath->size();
  for (size_t i = 0; i + 1 < layers; ++i) out = convpath->begin()[i].forward(out);
  const auto last = convpath->ptr<StageImpl>(layers - 1);  // conv, BatchNorm
  out = conv2d(*last->ptr<torch::nn::Conv2dImpl>(0), out);
  return last->ptr<distributed::SyncBatchNormImpl>(1)->forward_relu(out, shortcut);
}

torch::nn::Sequential xresnet(int64_t expansion, const std::vector<int64_t>& blocks, XResNetOptions o) {
  if (expansion != 1 && expansion != 4) throw Error("xresnet: expansion must be 1 or 4, got " + std::to_string(expansion));
  if (blocks.size() < 4) throw Error("xresnet: expected at least 4 stages of blocks, got " + std::to_string(blocks.size()));
  if (o.n_out < 1 || o.c_in < 1 || o.widen <= 0) throw Error("xresnet: n_out, c_in and widen must be positive");

  torch::nn::Sequential model;
  const int64_t stem[] = {o.c_in, 32, 32, 64};
  for (int i = 0; i < 3; ++i) model->push_back(conv_layer(stem[i], stem[i + 1], 3, i == 0 ? 2 : 1));
  model->push_back(torch::nn::MaxPool2d(torch::nn::MaxPool2dOptions(3).stride(2).padding(1)));

  // Stage widths as fastai's: 64/expansion in, then 64, 128, 256, 512 (x widen), 256 beyond.
  std::vector<int64_t> widths{64 / expansion};
  for (size_t stage = 0; stage < blocks.size(); ++stage)
    widths.push_back(static_cast<int64_t>((stage < 4 ? int64_t{64} << stage : 256) * o.widen));
  for (size_t stage = 0; stage < blocks.size(); ++stage) {
    Stage layer;
    for (int64_t i = 0; i < blocks[stage]; ++i)
      layer->push_back(ResBlock(expansion, i == 0 ? widths[stage] : widths[stage + 1], widths[stage + 1],
                                i == 0 && stage > 0 ? 2 : 1));
    model->push_back(layer);
  }
  model->push_back(torch::nn::AdaptiveAvgPool2d(torch::nn::AdaptiveAvgPool2dOptions(1)));
  model->push_back(torch::nn::Flatten());
  model->push_back(torch::nn::Dropout(o.p));
  model->push_back(torch::nn::Linear(widths.back() * expansion, o.n_out));

  // fastai's init_cnn: He-normal (fan_in) convs and linears, every bias (norms' too) zero.
  torch::NoGradGuard no_grad;
  for (auto& module : model->modules(/*include_self=*/false)) {
    if (auto* c = module->as<torch::nn::Conv2d>()) torch::nn::init::kaiming_normal_(c->weight);
    else if (auto* l = module->as<torch::nn::Linear>()) {
      torch::nn::init::kaiming_normal_(l->weight);
      l->bias.zero_();
    } else if (auto* bn = module->as<distributed::SyncBatchNorm>()) {
      bn->bias.zero_();
    }
  }
  return model;
}

torch::nn::Sequential xresnet18(XResNetOptions options) { return xresnet(1, {2, 2, 2, 2}, options); }
torch::nn::Sequential xresnet34(XResNetOptions options) { return xresnet(1, {3, 4, 6, 3}, options); }
torch::nn::Sequential xresnet50(XResNetOptions options) { return xresnet(4, {3, 4, 6, 3}, options); }
torch::nn::Sequential xresnet101(XResNetOptions options) { return xresnet(4, {3, 4, 23, 3}, options); }

}  // namespace fastcpp::vision
