#pragma once
// The feature pyramid of RetinaNet, as torchvision builds it, with its parameter names
// (a torchvision state dict loads by name):
//
//   ResNetBody       the ResNet up to layer4 (conv1, bn1, layer1 ... layer4), returning the
//                    outputs of layer2, layer3 and layer4 (C3, C4, C5: strides 8, 16, 32)
//   FeaturePyramid   1x1 "inner" convs bring each to the same channels, each coarser map
//                    is added (upsampled, nearest) into the finer one, 3x3 "layer" convs
//                    smooth the sums: P3, P4, P5; then P6 (a stride-2 conv) and P7 (ReLU,
//                    stride-2 conv), torchvision's LastLevelP6P7
//   ResNetFPN        both: torchvision's BackboneWithFPN ("body", "fpn")
#include <torch/nn/cloneable.h>
#include <torch/nn/modules/container/any.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/conv.h>

#include <string>
#include <utility>
#include <vector>

#include "vision/models/resnet.h"

namespace fastcpp::vision {

using ResNetArch = ResNet (*)(ResNetOptions);  // resnet18, resnet34, resnet50, resnet101

struct ResNetBodyImpl : torch::nn::Cloneable<ResNetBodyImpl> {
  ResNetBodyImpl(ResNetArch arch, ResNetOptions options);
  void reset() override;
  // The outputs of layer2, layer3 and layer4.
  std::vector<torch::Tensor> forward(const torch::Tensor& x);
  // Channels of those three outputs.
  std::vector<int64_t> out_channels() const { return out_channels_; }

  ResNetArch arch;
  ResNetOptions options;

 private:
  std::vector<std::pair<std::string, torch::nn::AnyModule>> layers_;
  std::vector<int64_t> out_channels_;
};
TORCH_MODULE(ResNetBody);

// P6 and P7 from P5 (torchvision's RetinaNet: in_channels out_channels) or from C5 (its v2:
// in_channels C5's). Said, not inferred from the channels as torchvision does: a C5 as wide
// as the pyramid still gives P6 from C5 when asked.
struct LastLevelP6P7Impl : torch::nn::Cloneable<LastLevelP6P7Impl> {
  LastLevelP6P7Impl(int64_t in_channels, int64_t out_channels, bool from_p5);
  void reset() override;
  // {P6, P7}.
  std::vector<torch::Tensor> forward(const torch::Tensor& x);
  bool uses_p5() const { return from_p5; }

  int64_t in_channels, out_channels;
  bool from_p5;
  torch::nn::Conv2d p6{nullptr}, p7{nullptr};
};
TORCH_MODULE(LastLevelP6P7);

struct FeaturePyramidImpl : torch::nn::Cloneable<FeaturePyramidImpl> {
  // in_channels: of each input map, finest first; P6 from C5 (p6_from_c5) or from P5.
  FeaturePyramidImpl(std::vector<int64_t> in_channels, int64_t out_channels, bool p6_from_c5);
  void reset() override;
  // {C3, C4, C5} (finest first) -> {P3, P4, P5, P6, P7}.
  std::vector<torch::Tensor> forward(const std::vector<torch::Tensor>& c);

  std::vector<int64_t> in_channels;
  int64_t out_channels;
  bool p6_from_c5;
  torch::nn::ModuleList inner_blocks{nullptr}, layer_blocks{nullptr};
  LastLevelP6P7 extra_blocks{nullptr};
};
TORCH_MODULE(FeaturePyramid);

struct ResNetFPNImpl : torch::nn::Cloneable<ResNetFPNImpl> {
  // p6_from_c5: torchvision's RetinaNet v2 (P6 from layer4's output), else v1's (from P5).
  ResNetFPNImpl(ResNetArch arch, ResNetOptions options, int64_t out_channels, bool p6_from_c5 = false);
  void reset() override;
  // Five maps of out_channels, strides 8 to 128.
  std::vector<torch::Tensor> forward(const torch::Tensor& x);

  ResNetArch arch;
  ResNetOptions options;
  int64_t out_channels;
  bool p6_from_c5;
  ResNetBody body{nullptr};
  FeaturePyramid fpn{nullptr};
};
TORCH_MODULE(ResNetFPN);

}  // namespace fastcpp::vision
