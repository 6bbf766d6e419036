#pragma once
// fastai's create_head: the classifier put on a pretrained body.
//   [max pool ++ avg pool] -> flatten -> (BatchNorm -> Dropout -> Linear -> ReLU) per
//   hidden layer -> BatchNorm -> Dropout -> Linear
// With the defaults (lin_ftrs {512}, ps 0.5): dropout 0.25 before the hidden layer and
// 0.5 before the last, linears without bias (a BatchNorm precedes each), He-initialized.
// lin_first turns each block around as fastai's: Dropout first, then (Linear -> ReLU ->
// BatchNorm -> Dropout) per hidden layer, then a last Linear with a bias.
#include <torch/nn/cloneable.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/pimpl.h>

#include <optional>
#include <utility>
#include <vector>

namespace fastcpp::vision {

// Max and average pooling to `size` concatenated along the channels ([max, avg], as fastai).
struct AdaptiveConcatPool2dImpl : torch::nn::Cloneable<AdaptiveConcatPool2dImpl> {
  explicit AdaptiveConcatPool2dImpl(int64_t size = 1) : size(size) {}
  void reset() override {}  // nothing to build: Cloneable, for to_parallel
  torch::Tensor forward(const torch::Tensor& x);
  int64_t size;
};
TORCH_MODULE(AdaptiveConcatPool2d);

// fastai's SigmoidRange: outputs squashed into (low, high), for a regression's known range.
struct SigmoidRangeImpl : torch::nn::Cloneable<SigmoidRangeImpl> {
  SigmoidRangeImpl(double low, double high);
  void reset() override {}  // nothing to build: Cloneable, for to_parallel
  torch::Tensor forward(const torch::Tensor& x) { return torch::sigmoid(x) * (high - low) + low; }
  double low, high;
};
TORCH_MODULE(SigmoidRange);

struct HeadOptions {
  std::vector<int64_t> lin_ftrs{512};  // hidden layer widths
  double ps = 0.5;                     // dropout of the last layer; hidden layers get half
  bool concat_pool = true;             // false: average pooling only
  bool bn_final = false;               // a BatchNorm after the last linear
  std::optional<std::pair<double, double>> y_range;  // a SigmoidRange(low, high) last
  bool pool = true;                    // false: no pooling and flatten (a body that ends flat)
  bool first_bn = true;                // false: the first linear has a bias and no BatchNorm before it
  bool lin_first = false;              // each linear before its BatchNorm and Dropout (above)
};

// A head for a body with `nf` output channels (features, without pooling) and `n_out`
// outputs. Its layers are named head_pool, head_flatten, head_bn1, head_drop1,
// head_linear1, head_relu1, ..., head_bn_final, head_sigmoid_range (with lin_first:
// head_drop0 first, then head_linear1, head_relu1, head_bn1, head_drop1, ...).
torch::nn::Sequential create_head(int64_t nf, int64_t n_out, const HeadOptions& options = {});

}  // namespace fastcpp::vision
