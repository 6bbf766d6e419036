#pragma once
// fastai's AvgPool: average pooling whose stride is its kernel, without padding; ceil_mode
// keeps a last, partial window (ResBlock's shortcut: 7x7 -> 4x4), its average taken over the
// values inside. torch::nn::AvgPool2d's arithmetic, with a CPU path of its own for channels-last
// float maps that writes each gradient once (ATen's backward zeroes the input's gradient, then
// adds each window into it). Elsewhere (a GPU, contiguous maps, other dtypes) it is
// torch::avg_pool2d.
#include <torch/nn/cloneable.h>

namespace fastcpp::vision {

// avg_pool2d(x, kernel, stride = kernel, padding = 0, ceil_mode) of torch, x [N, C, H, W].
torch::Tensor avg_pool(const torch::Tensor& x, int64_t kernel, bool ceil_mode);

struct AvgPoolImpl : torch::nn::Cloneable<AvgPoolImpl> {
  explicit AvgPoolImpl(int64_t kernel, bool ceil_mode = false);
  void reset() override {}
  torch::Tensor forward(const torch::Tensor& x) { return avg_pool(x, kernel, ceil_mode); }

  int64_t kernel;
  bool ceil_mode;
};
TORCH_MODULE(AvgPool);

}  // namespace fastcpp::vision
