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
  if (o.concat_pool) {
    head->push_back("head_pool", AdaptiveConcatPool2d());
    nf *= 2;
  } else {
    head->push_back("head_pool", torch::nn::AdaptiveAvgPool2d(1));
  }
  head->push_back("head_flatten", torch::nn::Flatten());

  std::vector<int64_t> sizes{nf};
  sizes.insert(sizes.end(), o.lin_ftrs.begin(), o.lin_ftrs.end());
  sizes.push_back(n_out);
  const size_t n_linear = sizes.size() - 1;
  for (size_t i = 0; i < n_linear; ++i) {
    const auto n = std::to_string(i + 1);
    const bool last = i + 1 == n_linear;
    head->push_back("head_bn" + n, batch_norm(sizes[i]));
    const double p = last ? o.ps : o.ps / 2;
    if (p > 0) head->push_back("head_drop" + n, torch::nn::Dropout(p));
    auto linear = torch::nn::Linear(torch::nn::LinearOptions(sizes[i], sizes[i + 1]).bias(false));
    torch::nn::init::kaiming_normal_(linear->weight);
    head->push_back("head_linear" + n, linear);
    if (!last) head->push_back("head_relu" + n, torch::nn::ReLU(torch::nn::ReLUOptions(true)));
  }
  if (o.bn_final) head->push_back("head_bn_final", torch::nn::BatchNorm1d(torch::nn::BatchNorm1dOptions(n_out).momentum(0.01)));
  if (o.y_range) head->push_back("head_sigmoid_range", SigmoidRange(o.y_range->first, o.y_range->second));
  return head;
}

}  // namespace fastcpp::vision
