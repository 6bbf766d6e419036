#include "data/batch_transforms.h"

#include <torch/torch.h>

#include "learner/error.h"

namespace fastcpp {

torch::Tensor IntToFloat::operator()(const torch::Tensor& x) const {
  if (x.is_floating_point()) return x;
  return x.to(torch::kFloat).div_(255);
}

torch::Tensor Normalize::operator()(const torch::Tensor& x) const {
  if (mean.empty() || mean.size() != std.size())
    throw Error("Normalize: need as many means as stds, got " + std::to_string(mean.size()) + " and " +
                std::to_string(std.size()));
  auto input = IntToFloat()(x);
  const auto channels = static_cast<int64_t>(mean.size());
  if (input.dim() < 2 || (input.size(1) != channels && channels != 1))
    throw Error("Normalize: " + std::to_string(channels) + " channel statistics for a batch of shape " +
                c10::str(input.sizes()));
  std::vector<int64_t> shape(static_cast<size_t>(input.dim()), 1);
  shape[1] = channels;
  auto options = torch::TensorOptions().dtype(input.scalar_type());
  auto mean_t = torch::tensor(mean, options).view(shape).to(input.device(), /*non_blocking=*/true);
  auto std_t = torch::tensor(std, options).view(shape).to(input.device(), /*non_blocking=*/true);
  return (input - mean_t) / std_t;
}

}  // namespace fastcpp
