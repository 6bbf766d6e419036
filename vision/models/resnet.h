#pragma once
// The ResNet family (18, 34, 50, 101) with torchvision's layout and parameter names
// (conv1, bn1, layer1.0.conv1, layer2.0.downsample.0, fc, ...), so a state dict saved
// from torchvision loads by name (formats/state_dict.h) and ours loads there.
//
//   auto model = vision::resnet34({.num_classes = 10});
//   auto small = vision::resnet18({.num_classes = 10, .in_channels = 1, .stem = vision::Stem::cifar});
//
// Stems: imagenet (7x7 stride-2 conv and a max pool, torchvision's) or cifar (3x3
// stride-1 conv, no pool: for 28-64 px images, where the ImageNet stem would throw
// away most of the picture). Norm layers are SyncBatchNorm: plain BatchNorm in one
// process, synchronized under to_distributed.
#include <torch/nn/cloneable.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>

#include <string>
#include <vector>

#include "distributed/sync_batchnorm.h"

namespace fastcpp::vision {

enum class Stem { imagenet, cifar };

struct ResNetOptions {
  int64_t num_classes = 1000;
  int64_t in_channels = 3;
  Stem stem = Stem::imagenet;
  int64_t width = 64;  // channels of the first stage (doubling at each later stage)
};

// The models are Cloneable (reset() builds them from their arguments), so that
// to_parallel can copy them onto each device.

// Two 3x3 convs (ResNet-18/34).
struct BasicBlockImpl : torch::nn::Cloneable<BasicBlockImpl> {
  static constexpr int64_t expansion = 1;
  BasicBlockImpl(int64_t in, int64_t planes, int64_t stride);
  void reset() override;
  torch::Tensor forward(const torch::Tensor& x);
  int64_t in, planes, stride;
  // Declared in torchvision's order, which is the order of registration and of the state dict.
  torch::nn::Conv2d conv1{nullptr};
  distributed::SyncBatchNorm bn1{nullptr};
  torch::nn::Conv2d conv2{nullptr};
  distributed::SyncBatchNorm bn2{nullptr};
  torch::nn::Sequential downsample{nullptr};  // 1x1 conv + norm where the shape changes
};
TORCH_MODULE(BasicBlock);

// 1x1 reduce, 3x3 (strided, as torchvision's v1.5), 1x1 expand by 4 (ResNet-50/101).
struct BottleneckImpl : torch::nn::Cloneable<BottleneckImpl> {
  static constexpr int64_t expansion = 4;
  BottleneckImpl(int64_t in, int64_t planes, int64_t stride);
  void reset() override;
  torch::Tensor forward(const torch::Tensor& x);
  int64_t in, planes, stride;
  torch::nn::Conv2d conv1{nullptr};
  distributed::SyncBatchNorm bn1{nullptr};
  torch::nn::Conv2d conv2{nullptr};
  distributed::SyncBatchNorm bn2{nullptr};
  torch::nn::Conv2d conv3{nullptr};
  distributed::SyncBatchNorm bn3{nullptr};
  torch::nn::Sequential downsample{nullptr};
};
TORCH_MODULE(Bottleneck);

// A stage (layer1 ... layer4): blocks in a row. A Sequential with a plain forward, so
// that it can sit inside another Sequential (the body). A SyncBatchNorm followed by a ReLU
// runs as SyncBatchNorm::forward_relu (one kernel each way on the CPU), a Conv2d as
// vision::conv2d (one matrix product over small maps on the CPU).
struct StageImpl : torch::nn::SequentialImpl {
  using SequentialImpl::SequentialImpl;
  torch::Tensor forward(const torch::Tensor& x);
  // A Stage with its layers' names (SequentialImpl's clone makes a Sequential of "0", "1", ...).
  std::shared_ptr<torch::nn::Module> clone(const std::optional<torch::Device>& device = std::nullopt) const override;
};
TORCH_MODULE(Stage);

struct ResNetImpl : torch::nn::Cloneable<ResNetImpl> {
  // `blocks`: blocks per stage, e.g. {2, 2, 2, 2}; bottleneck: Bottleneck blocks, else BasicBlock.
  ResNetImpl(std::vector<int64_t> blocks, bool bottleneck, ResNetOptions options);
  void reset() override;
  torch::Tensor forward(const torch::Tensor& x);

  // Everything before the pooling and the classifier, as a Sequential holding the same
  // modules under the same names (conv1, bn1, relu, [maxpool], layer1 ... layer4):
  // what vision_learner puts under a new head.
  torch::nn::Sequential body() const { return body_; }
  int64_t num_features() const { return num_features_; }  // channels out of the body

  torch::nn::Linear fc{nullptr};

 private:
  std::vector<int64_t> blocks_;
  bool bottleneck_;
  ResNetOptions options_;
  torch::nn::Sequential body_{nullptr};
  int64_t num_features_ = 0;
};
TORCH_MODULE(ResNet);

ResNet resnet18(ResNetOptions options = {});
ResNet resnet34(ResNetOptions options = {});
ResNet resnet50(ResNetOptions options = {});
ResNet resnet101(ResNetOptions options = {});

}  // namespace fastcpp::vision
