#pragma once
// fastai's XResNet (18, 34, 50, 101): ResNet with the "bag of tricks" changes, for
// training from scratch: a stem of three 3x3 convs, the shortcut's downsampling by
// average pooling before its 1x1 conv, and the last norm of each block starting at
// zero so every block starts as the identity. A Sequential with fastai's layout and
// parameter names (0.0.weight, 4.0.convpath.0.0.weight, 5.0.idpath.1.0.weight,
// 11.weight, ...), so a fastai state dict loads by name (formats/state_dict.h).
//
//   Learner learn(dls, vision::xresnet18({.n_out = 10, .c_in = 1}), CrossEntropyLoss(), {metrics::accuracy()});
//
// Norm layers are SyncBatchNorm: plain BatchNorm in one process, synchronized under
// to_distributed.
#include <torch/nn/modules/container/sequential.h>

#include "vision/models/resnet.h"

namespace fastcpp::vision {

struct XResNetOptions {
  int64_t n_out = 1000;
  int64_t c_in = 3;
  double p = 0.0;       // dropout before the classifier
  double widen = 1.0;   // scales the stages' widths (64, 128, 256, 512)
};

// fastai's ResBlock: convpath (two 3x3 ConvLayers, or 1x1-3x3-1x1 with expansion 4)
// plus idpath (average pool where strided, 1x1 ConvLayer where the width changes).
struct ResBlockImpl : torch::nn::Cloneable<ResBlockImpl> {
  ResBlockImpl(int64_t expansion, int64_t ni, int64_t nf, int64_t stride);
  void reset() override;  // Cloneable, for to_parallel
  torch::Tensor forward(const torch::Tensor& x);
  int64_t expansion, ni, nf, stride;
  Stage convpath{nullptr};
  Stage idpath{nullptr};  // empty: the identity
};
TORCH_MODULE(ResBlock);

// `blocks` per stage, e.g. {2, 2, 2, 2}; expansion 1 (basic blocks) or 4 (bottlenecks).
torch::nn::Sequential xresnet(int64_t expansion, const std::vector<int64_t>& blocks, XResNetOptions options = {});
torch::nn::Sequential xresnet18(XResNetOptions options = {});
torch::nn::Sequential xresnet34(XResNetOptions options = {});
torch::nn::Sequential xresnet50(XResNetOptions options = {});
torch::nn::Sequential xresnet101(XResNetOptions options = {});

}  // namespace fastcpp::vision
