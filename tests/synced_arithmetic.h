#pragma once
// SyncBatchNorm's synchronized arithmetic on one batch, with no communicator (what
// bench/sync_batchnorm times against BatchNorm), checked against torch::batch_norm in
// training: output (dtype and layout too), the gradients of input, weight and bias, and
// the running statistics. `parameters`: the layers' dtype (fp32 under autocast; a model
// made fp16 as a whole has fp16 weights and statistics).
#include "helpers.h"

namespace fastcpp::testing {

inline void check_synced_arithmetic_equals_batchnorm(const torch::TensorOptions& options, at::MemoryFormat format,
                                                     double rtol, double atol,
                                                     torch::Dtype parameters = torch::kFloat) {
  torch::manual_seed(0);
  const auto x = torch::randn({6, 4, 5, 3}).to(options).contiguous(format);
  const auto dy = torch::randn({6, 4, 5, 3}).to(options).contiguous(format);
  distributed::SyncBatchNorm synced(4), plain(4);
  for (auto* bn : {&synced, &plain}) (*bn)->to(options.device(), parameters);
  {
    torch::NoGradGuard no_grad;
    synced->weight.copy_(torch::rand({4}) + 0.5);
    synced->bias.copy_(torch::randn({4}));
    plain->weight.copy_(synced->weight);
    plain->bias.copy_(synced->bias);
  }
  auto x_synced = x.detach().requires_grad_(), x_plain = x.detach().requires_grad_();
  auto y_synced = distributed::synchronized_batch_norm(*synced, x_synced, nullptr);
  auto y_plain = torch::batch_norm(x_plain, plain->weight, plain->bias, plain->running_mean, plain->running_var,
                                   /*training=*/true, plain->momentum, plain->eps, /*cudnn_enabled=*/true);
  y_synced.backward(dy);
  y_plain.backward(dy);
  CHECK(y_synced.dtype() == x.dtype());
  CHECK(y_synced.is_contiguous(format));
  const auto close = [&](const torch::Tensor& a, const torch::Tensor& b) {
    return torch::allclose(a.cpu().to(torch::kDouble), b.cpu().to(torch::kDouble), rtol, atol);
  };
  CHECK(close(y_synced, y_plain));
  CHECK(close(x_synced.grad(), x_plain.grad()));
  CHECK(close(synced->weight.grad(), plain->weight.grad()));
  CHECK(close(synced->bias.grad(), plain->bias.grad()));
  CHECK(close(synced->running_mean, plain->running_mean));
  CHECK(close(synced->running_var, plain->running_var));
}

}  // namespace fastcpp::testing
