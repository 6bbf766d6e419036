#include "vision/models/resnet.h"

#include <torch/nn/init.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/pooling.h>

#include "core/error.h"
#include "core/sequential.h"
#include "vision/models/small_map_conv.h"

namespace fastcpp::vision {
namespace {

torch::nn::Conv2d conv(int64_t in, int64_t out, int64_t kernel, int64_t stride) {
  return torch::nn::Conv2d(torch::nn::Conv2dOptions(in, out, kernel).stride(stride).padding(kernel / 2).bias(false));
}

// torchvision's shortcut: present when the block changes the resolution or the width.
torch::nn::Sequential make_downsample(int64_t in, int64_t out, int64_t stride) {
  if (stride == 1 && in == out) return nullptr;
  return torch::nn::Sequential(conv(in, out, 1, stride), distributed::SyncBatchNorm(out));
}

template <class Block>
Stage make_stage(int64_t& in, int64_t planes, int64_t blocks, int64_t stride) {
  Stage stage;
  for (int64_t i = 0; i < blocks; ++i) {
    stage->push_back(Block(in, planes, i == 0 ? stride : 1));
    in = planes * Block::Impl::expansion;
  }
  return stage;
}

}  // namespace

torch::Tensor StageImpl::forward(const torch::Tensor& x) {
  auto out = x;
  for (size_t i = 0; i < size(); ++i) {
    auto* bn = ptr(i)->as<distributed::SyncBatchNormImpl>();
    if (bn && i + 1 < size() && ptr(i + 1)->as<torch::nn::ReLUImpl>()) {
      out = bn->forward_relu(out);
      ++i;
    } else if (auto* conv = ptr(i)->as<torch::nn::Conv2dImpl>()) {
      out = conv2d(*conv, out);
    } else {
      out = begin()[i].forward(out);
    }
  }
  return out;
}

std::shared_ptr<torch::nn::Module> StageImpl::clone(const std::optional<torch::Device>& device) const {
  auto copy = std::make_shared<StageImpl>();
  clone_layers_into(*copy, *this, device);
  return copy;
}

BasicBlockImpl::BasicBlockImpl(int64_t in, int64_t planes, int64_t stride) : in(in), planes(planes), stride(stride) {
  reset();
}

void BasicBlockImpl::reset() {
  conv1 = register_module("conv1", conv(in, planes, 3, stride));
  bn1 = register_module("bn1", distributed::SyncBatchNorm(planes));
  conv2 = register_module("conv2", conv(planes, planes, 3, 1));
  bn2 = register_module("bn2", distributed::SyncBatchNorm(planes));
  if (auto shortcut = make_downsample(in, planes * expansion, stride)) downsample = register_module("downsample", shortcut);
}

torch::Tensor BasicBlockImpl::forward(const torch::Tensor& x) {
  const auto out = bn1->forward_relu(conv2d(*conv1, x));
  return bn2->forward_relu(conv2d(*conv2, out), downsample ? downsample->forward(x) : x);
}

BottleneckImpl::BottleneckImpl(int64_t in, int64_t planes, int64_t stride) : in(in), planes(planes), stride(stride) {
  reset();
}

void BottleneckImpl::reset() {
  conv1 = register_module("conv1", conv(in, planes, 1, 1));
  bn1 = register_module("bn1", distributed::SyncBatchNorm(planes));
  conv2 = register_module("conv2", conv(planes, planes, 3, stride));
  bn2 = register_module("bn2", distributed::SyncBatchNorm(planes));
  conv3 = register_module("conv3", conv(planes, planes * expansion, 1, 1));
  bn3 = register_module("bn3", distributed::SyncBatchNorm(planes * expansion));
  if (auto shortcut = make_downsample(in, planes * expansion, stride)) downsample = register_module("downsample", shortcut);
}

torch::Tensor BottleneckImpl::forward(const torch::Tensor& x) {
  auto out = bn1->forward_relu(conv1(x));
  out = bn2->forward_relu(conv2d(*conv2, out));
  return bn3->forward_relu(conv3(out), downsample ? downsample->forward(x) : x);
}

ResNetImpl::ResNetImpl(std::vector<int64_t> blocks, bool bottleneck, ResNetOptions options)
    : blocks_(std::move(blocks)), bottleneck_(bottleneck), options_(options) {
  if (blocks_.size() != 4) throw Error("ResNet: expected 4 stages of blocks, got " + std::to_string(blocks_.size()));
  if (options.num_classes < 1 || options.in_channels < 1 || options.width < 1)
    throw Error("ResNet: num_classes, in_channels and width must be positive");
  reset();
}

void ResNetImpl::reset() {
  const auto& o = options_;
  const auto& blocks = blocks_;
  const bool bottleneck = bottleneck_;
  body_ = torch::nn::Sequential();
  const bool cifar = o.stem == Stem::cifar;
  body_->push_back("conv1", register_module("conv1", conv(o.in_channels, o.width, cifar ? 3 : 7, cifar ? 1 : 2)));
  body_->push_back("bn1", register_module("bn1", distributed::SyncBatchNorm(o.width)));
  body_->push_back("relu", register_module("relu", torch::nn::ReLU(torch::nn::ReLUOptions(true))));
  if (!cifar)
    body_->push_back("maxpool", register_module("maxpool", torch::nn::MaxPool2d(torch::nn::MaxPool2dOptions(3).stride(2).padding(1))));
  int64_t in = o.width;
  for (int stage = 0; stage < 4; ++stage) {
    const int64_t planes = o.width << stage, stride = stage == 0 ? 1 : 2;
    auto layer = bottleneck ? make_stage<Bottleneck>(in, planes, blocks[stage], stride)
                            : make_stage<BasicBlock>(in, planes, blocks[stage], stride);
    const auto name = "layer" + std::to_string(stage + 1);
    body_->push_back(name, register_module(name, layer));
  }
  num_features_ = in;
  fc = register_module("fc", torch::nn::Linear(in, o.num_classes));

  // torchvision's initialization: He (fan_out) for convs, unit scale and zero shift for norms.
  torch::NoGradGuard no_grad;
  for (auto& module : modules(/*include_self=*/false)) {
    if (auto* c = module->as<torch::nn::Conv2d>())
      torch::nn::init::kaiming_normal_(c->weight, 0, torch::kFanOut, torch::kReLU);
    else if (auto* bn = module->as<distributed::SyncBatchNorm>()) {
      bn->weight.fill_(1);
      bn->bias.zero_();
    }
  }
}

torch::Tensor ResNetImpl::forward(const torch::Tensor& x) {
  return fc(torch::adaptive_avg_pool2d(body_->forward(x), {1, 1}).flatten(1));
}

ResNet resnet18(ResNetOptions options) { return ResNet(std::vector<int64_t>{2, 2, 2, 2}, false, options); }
ResNet resnet34(ResNetOptions options) { return ResNet(std::vector<int64_t>{3, 4, 6, 3}, false, options); }
ResNet resnet50(ResNetOptions options) { return ResNet(std::vector<int64_t>{3, 4, 6, 3}, true, options); }
ResNet resnet101(ResNetOptions options) { return ResNet(std::vector<int64_t>{3, 4, 23, 3}, true, options); }

}  // namespace fastcpp::vision
