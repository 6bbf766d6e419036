#include "distributed/batchnorm_math.h"

#include "core/error.h"

#include <torch/torch.h>

namespace fastcpp::distributed::batchnorm {
namespace {

std::vector<int64_t> reduce_dims(const torch::Tensor& x) {
  std::vector<int64_t> dims{0};
  for (int64_t d = 2; d < x.dim(); ++d) dims.push_back(d);
  return dims;
}

}  // namespace

torch::Tensor per_channel(const torch::Tensor& v, const torch::Tensor& x) {
  std::vector<int64_t> shape(static_cast<size_t>(x.dim()), 1);
  shape[1] = v.size(0);
  return v.view(shape);
}

torch::Tensor local_stats(const torch::Tensor& x) {
  const auto dims = reduce_dims(x);
  const double count = static_cast<double>(x.numel() / std::max<int64_t>(x.size(1), 1));
  auto xd = x.to(torch::kDouble);  // double for the variance
  return torch::cat({xd.sum(dims), (xd * xd).sum(dims), torch::full({1}, count, xd.options())});
}

Normalization normalization(const torch::Tensor& summed_stats, int64_t channels, double eps, double momentum,
                            torch::Tensor& running_mean, torch::Tensor& running_var) {
  Normalization n;
  n.count = summed_stats[2 * channels].item<double>();
  if (n.count == 1)
    throw Error("SyncBatchNorm: expected more than 1 value per channel when training, got 1 over all the "
                "synchronized batches; train on batches of 2 or more");
  n.mean = summed_stats.narrow(0, 0, channels) / n.count;
  auto var = (summed_stats.narrow(0, channels, channels) / n.count - n.mean * n.mean).clamp_min(0);
  n.invstd = (var + eps).rsqrt();
  torch::NoGradGuard no_grad;
  const auto device = running_mean.device();
  running_mean.mul_(1 - momentum).add_(n.mean.to(device, running_mean.scalar_type()), momentum);
  const double unbias = n.count > 1 ? n.count / (n.count - 1) : 1.0;
  running_var.mul_(1 - momentum).add_((var * unbias).to(device, running_var.scalar_type()), momentum);
  return n;
}

torch::Tensor normalize(const torch::Tensor& x, const Normalization& n) {
  const auto options = torch::TensorOptions().dtype(x.scalar_type()).device(x.device());
  return (x - per_channel(n.mean.to(options), x)) * per_channel(n.invstd.to(options), x);
}

torch::Tensor local_grad_sums(const torch::Tensor& dy, const torch::Tensor& x_hat) {
  const auto dims = reduce_dims(dy);
  return torch::cat({dy.sum(dims), (dy * x_hat).sum(dims)});
}

torch::Tensor input_grad(const torch::Tensor& dy, const torch::Tensor& x_hat, const torch::Tensor& summed_grad_sums,
                         double count, const torch::Tensor& invstd, const torch::Tensor& weight) {
  const int64_t channels = dy.size(1);
  const auto sums = summed_grad_sums.to(dy.device(), dy.scalar_type());
  auto mean_dy = sums.narrow(0, 0, channels) / count;
  auto mean_dy_xhat = sums.narrow(0, channels, channels) / count;
  const auto scale = invstd.to(dy.device(), dy.scalar_type());
  return (dy - per_channel(mean_dy, dy) - x_hat * per_channel(mean_dy_xhat, dy)) *
         per_channel(weight.defined() ? scale * weight : scale, dy);
}

torch::Tensor in_dtype_of(const torch::Tensor& weight, const torch::Tensor& statistics) {
  return weight.defined() ? weight.to(statistics.scalar_type()) : weight;
}

}  // namespace fastcpp::distributed::batchnorm
