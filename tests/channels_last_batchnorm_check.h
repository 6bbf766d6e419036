#pragma once
// SyncBatchNorm's channels-last steps (distributed/channels_last_batchnorm.h) against
// torch::batch_norm in training over the whole batch, in fp64 on the CPU: as one peer, and
// as two peers holding the two halves of the batch (their statistics gathered and their
// backward sums added, as to_distributed's collectives do). The CPU suite runs it on the CPU
// twin, the gpu suite on the CUDA kernels. KernelChoiceFor sets the synced layers' choice.
#include "helpers.h"

#include "distributed/channels_last_batchnorm.h"

namespace fastcpp::testing {

inline void check_channels_last_batchnorm(const torch::TensorOptions& options, const std::vector<int64_t>& shape,
                                          double rtol, double atol) {
  namespace cl = distributed::channels_last;
  CAPTURE(shape);
  CAPTURE(options.dtype());
  torch::manual_seed(0);
  const int64_t channels = shape[1], rows = c10::multiply_integers(shape) / channels;
  const auto format = shape.size() == 4 ? at::MemoryFormat::ChannelsLast : at::MemoryFormat::Contiguous;
  // Off-centre values: a mean of 3 against a deviation of 2 tests the sums' cancellation.
  const auto x = (torch::randn(shape) * 2 + 3).to(options).contiguous(format);
  const auto dy = torch::randn(shape).to(options).contiguous(format);
  const auto floats = options.dtype(torch::kFloat);
  const auto weight = (torch::rand({channels}) + 0.5).to(floats), bias = torch::randn({channels}).to(floats);
  const double momentum = 0.1, eps = 1e-5;

  // The reference, in fp64 from the very values x holds.
  auto x_ref = x.to(torch::kCPU, torch::kDouble).detach().requires_grad_();
  auto w_ref = weight.to(torch::kCPU, torch::kDouble).requires_grad_();
  auto b_ref = bias.to(torch::kCPU, torch::kDouble).requires_grad_();
  auto mean_ref = torch::zeros({channels}, torch::kDouble), var_ref = torch::ones({channels}, torch::kDouble);
  const auto y_ref = torch::batch_norm(x_ref, w_ref, b_ref, mean_ref, var_ref, /*training=*/true, momentum, eps, false);
  y_ref.backward(dy.to(torch::kCPU, torch::kDouble));
  const auto close = [&](const torch::Tensor& ours, const torch::Tensor& reference) {
    return torch::allclose(ours.to(torch::kCPU, torch::kDouble), reference, rtol, atol);
  };
  // The weight's and bias's gradients are sums over every row: in fp32 (by any kernel, ATen's
  // too) their rounding grows as the square root of the rows, ~1e-4 at 50,176.
  const auto close_sum = [&](const torch::Tensor& ours, const torch::Tensor& reference) {
    return torch::allclose(ours.to(torch::kCPU, torch::kDouble), reference, rtol,
                           atol * std::sqrt(static_cast<double>(rows)));
  };

  {  // one peer
    auto running_mean = torch::zeros({channels}, floats), running_var = torch::ones({channels}, floats);
    const auto stats = cl::local_statistics(x, eps);
    REQUIRE(stats.sizes() == torch::IntArrayRef{2 * channels + 1});
    CHECK(stats[2 * channels].item<double>() == rows);
    const auto n = cl::normalize(x, stats.unsqueeze(0), weight, bias, running_mean, running_var, momentum, eps);
    CHECK(n.y.dtype() == x.dtype());
    CHECK(n.y.strides() == x.strides());
    CHECK(close(n.y, y_ref));
    CHECK(n.count.item<double>() == rows);
    CHECK(close(running_mean, mean_ref));
    CHECK(close(running_var, var_ref));
    const auto sums = cl::grad_sums(dy, x, n.mean, n.invstd);
    const auto dx = cl::input_grad(dy, x, n.mean, n.invstd, weight, sums.sums, n.count);
    CHECK(dx.dtype() == x.dtype());
    CHECK(dx.strides() == x.strides());
    CHECK(close(dx, x_ref.grad()));
    CHECK(close_sum(sums.grad_weight, w_ref.grad()));
    CHECK(close_sum(sums.grad_bias, b_ref.grad()));
  }

  if (shape[0] >= 2) {  // two peers, each with half the batch
    const int64_t half = shape[0] / 2;
    const torch::Tensor xs[] = {x.narrow(0, 0, half), x.narrow(0, half, shape[0] - half)};
    const torch::Tensor dys[] = {dy.narrow(0, 0, half), dy.narrow(0, half, shape[0] - half)};
    const auto gathered = torch::stack({cl::local_statistics(xs[0], eps), cl::local_statistics(xs[1], eps)});
    std::vector<torch::Tensor> ys, dxs;
    std::vector<cl::Normalized> normalized;
    for (int peer = 0; peer < 2; ++peer) {
      auto running_mean = torch::zeros({channels}, floats), running_var = torch::ones({channels}, floats);
      normalized.push_back(cl::normalize(xs[peer], gathered, weight, bias, running_mean, running_var, momentum, eps));
      ys.push_back(normalized.back().y);
      CHECK(close(running_mean, mean_ref));  // every peer's running statistics: those of the whole batch
      CHECK(close(running_var, var_ref));
    }
    CHECK(close(torch::cat(ys), y_ref));
    std::vector<cl::GradSums> sums;
    for (int peer = 0; peer < 2; ++peer)
      sums.push_back(cl::grad_sums(dys[peer], xs[peer], normalized[peer].mean, normalized[peer].invstd));
    const auto summed = sums[0].sums + sums[1].sums;  // the all-reduce
    for (int peer = 0; peer < 2; ++peer) {
      const auto& n = normalized[peer];
      dxs.push_back(cl::input_grad(dys[peer], xs[peer], n.mean, n.invstd, weight, summed, n.count));
    }
    CHECK(close(torch::cat(dxs), x_ref.grad()));
    // Each peer's weight and bias gradients are its own: added, those of the whole batch.
    CHECK(close_sum(sums[0].grad_weight + sums[1].grad_weight, w_ref.grad()));
    CHECK(close_sum(sums[0].grad_bias + sums[1].grad_bias, b_ref.grad()));
  }
}

// While it lives, the synced layers take `choice` (on the CPU, cpu_twin runs the kernels'
// path by their twin); then the choice before.
class KernelChoiceFor {
 public:
  explicit KernelChoiceFor(distributed::channels_last::KernelChoice choice)
      : previous_(distributed::channels_last::kernel_choice()) {
    distributed::channels_last::use_kernels(choice);
  }
  ~KernelChoiceFor() { distributed::channels_last::use_kernels(previous_); }
  KernelChoiceFor(const KernelChoiceFor&) = delete;
  KernelChoiceFor& operator=(const KernelChoiceFor&) = delete;

 private:
  distributed::channels_last::KernelChoice previous_;
};

}  // namespace fastcpp::testing
