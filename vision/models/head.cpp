#include "vision/models/head.h"

#include <torch/nn/init.h>
#include <torch/torch.h>

#include "core/error.h"

namespace fastcpp::vision {

torch::Tensor AdaptiveConcatPool2dImpl::forward(const torch::Tensor& x) {
  return torch::cat({std::get<0>(torch::adaptive_max_pool2d(x, {size, size})), torch::adaptive_avg_pool2d(x, {size, size})}, 1);
}

SigmoidRangeImpl::SigmoidRangeImpl(double low, double high) : low(low), high(high) {
  if (!(low < high))
    throw Error("SigmoidRange: low must be below high, got (" + c10::str(low) + ", " + c10::str(high) + ")");
}

namespace {

// fastai's BatchNorm (LinBnDrop's): weight 1, bias 1e-3.
torch::nn::BatchNorm1d batch_norm(int64_t nf) {
  torch::nn::BatchNorm1d bn(nf);
  torch::NoGradGuard no_grad;
  bn->bias.fill_(1e-3);
  return bn;
}

}  // namespace

torch::nn::Sequential create_head(int64_t nf, int64_t n_out, const HeadOptions& o) {
  if (nf < 1 || n_out < 1) throw Error("create_head: nf and n_out must be positive, got " + std::to_string(nf) + " and " + std::to_string(n_out));
  if (o.ps < 0 || o.ps >= 1) throw Error("create_head: ps must be in [0, 1), got " + std::to_string(o.ps));
  torch::nn::Sequential head;
  if (o.pool && o.concat_pool) {
    head->push_back("head_pool", AdaptiveConcatPool2d());
    nf *= 2;
  } else if (o.pool) {
    head->push_back("head_pool", torch::nn::AdaptiveAvgPool2d(1));
  }
  if (o.pool) head->push_back("head_flatten", torch::nn::Flatten());

  std::vector<int64_t> sizes{nf};
  sizes.insert(sizes.end(), o.lin_ftrs.begin(), o.lin_ftrs.end());
  sizes.push_back(n_out);
  const size_t n_linear = sizes.size() - 1;
  auto dropout_of = [&](size_t i) { return i + 1 == n_linear ? o.ps : o.ps / 2; };
  auto linear = [](int64_t in, int64_t out, bool bias) {
    auto layer = torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(bias));
    torch::NoGradGuard no_grad;
    torch::nn::init::kaiming_normal_(layer->weight);  // fastai's apply_init
    if (bias) layer->bias.zero_();
    return layer;
  };
  // fastai's lin_first takes the first dropout out in front and gives every later block
  // the dropout of the block before it; the last linear then stands alone.
  if (o.lin_first) head->push_back("head_drop0", torch::nn::Dropout(dropout_of(0)));
  const size_t n_blocks = o.lin_first ? n_linear - 1 : n_linear;
  for (size_t i = 0; i < n_blocks; ++i) {
    const auto n = std::to_string(i + 1);
    const bool bn = i > 0 || o.first_bn, relu = i + 1 < n_linear;
    const double p = dropout_of(o.lin_first ? i + 1 : i);
    if (!o.lin_first && bn) head->push_back("head_bn" + n, batch_norm(sizes[i]));
    if (!o.lin_first && p > 0) head->push_back("head_drop" + n, torch::nn::Dropout(p));
    head->push_back("head_linear" + n, linear(sizes[i], sizes[i + 1], !bn));
    if (relu) head->push_back("head_relu" + n, torch::nn::ReLU(torch::nn::ReLUOptions(true)));
    if (o.lin_first && bn) head->push_back("head_bn" + n, batch_norm(sizes[i + 1]));
    if (o.lin_first && p > 0) head->push_back("head_drop" + n, torch::nn::Dropout(p));
  }
  if (o.lin_first) head->push_back("head_linear" + std::to_string(n_linear), linear(sizes[n_linear - 1], n_out, true));
  if (o.bn_final) head->push_back("head_bn_final", torch::nn::BatchNorm1d(torch::nn::BatchNorm1dOptions(n_out).momentum(0.01)));
  if (o.y_range) head->push_back("head_sigmoid_range", SigmoidRange(o.y_range->first, o.y_range->second));
  return head;
}

}  // namespace fastcpp::vision
