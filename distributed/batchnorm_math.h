#pragma once
// The arithmetic of synchronized BatchNorm, shared by its two kinds of peers (processes,
// distributed/sync_batchnorm.cpp; replicas on threads, parallel/replica_batchnorm.cpp).
// Each peer computes local sums; the sums of every peer are added (an all-reduce, or a
// plain sum in one process); the normalization and the input gradient follow from them.
#include <torch/types.h>

namespace fastcpp::distributed::batchnorm {

// Shape [1, C, 1, ...] to broadcast per-channel values over x.
torch::Tensor per_channel(const torch::Tensor& v, const torch::Tensor& x);

// One peer's forward sums, in double: [sum (C), sum of squares (C), count (1)].
torch::Tensor local_stats(const torch::Tensor& x);

struct Normalization {
  torch::Tensor mean, invstd;  // per channel, double
  double count = 0;            // items per channel over every peer
};

// Mean and 1/std from the sums of every peer; updates the running statistics as for one
// batch of all the items (unbiased variance).
Normalization normalization(const torch::Tensor& summed_stats, int64_t channels, double eps, double momentum,
                            torch::Tensor& running_mean, torch::Tensor& running_var);

// (x - mean) * invstd, in x's dtype and on its device.
torch::Tensor normalize(const torch::Tensor& x, const Normalization& n);

// One peer's backward sums: [sum of dy (C), sum of dy * x_hat (C)].
torch::Tensor local_grad_sums(const torch::Tensor& dy, const torch::Tensor& x_hat);

// The input gradient from the backward sums of every peer (weight undefined: the
// gradient through the normalization alone, dy being that of x_hat).
torch::Tensor input_grad(const torch::Tensor& dy, const torch::Tensor& x_hat, const torch::Tensor& summed_grad_sums,
                         double count, const torch::Tensor& invstd, const torch::Tensor& weight);

// On CUDA: `weight` in the statistics' dtype (fp32 for fp16 or bf16 inputs), as ATen's
// backward kernel wants it; the weight of a model made fp16 as a whole is fp16.
// Undefined stays undefined.
torch::Tensor in_dtype_of(const torch::Tensor& weight, const torch::Tensor& statistics);

}  // namespace fastcpp::distributed::batchnorm
