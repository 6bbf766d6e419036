#pragma once
// relu(batch_norm(x) + residual) as one kernel each way, for channels-last float input on the
// CPU: what a ResNet block ends with (and, without the residual, what follows its first
// convolution). ATen takes three passes over the data forward (statistics, normalization,
// ReLU; the add a fourth) and three backward (ReLU's gradient, two for BatchNorm's); this
// takes two each way, and one dispatch instead of two or three. SyncBatchNorm::forward_relu
// calls it where it applies; the arithmetic is ATen's, with each channel's sums in double.
#include <torch/types.h>

namespace fastcpp::distributed {

struct SyncBatchNormImpl;

// Whether fused_batchnorm_relu takes these: x [N, C, H, W] float on the CPU, channels-last and
// dense, more than one value per channel; residual undefined or of x's shape and layout; the
// layer's parameters and running statistics float, contiguous, on the CPU.
bool fused_batchnorm_relu_applies(const SyncBatchNormImpl& bn, const torch::Tensor& x, const torch::Tensor& residual);

// relu(bn(x) + residual), residual optional. In training: with the statistics of this batch,
// updating bn's running mean and variance as torch::batch_norm does (not num_batches_tracked);
// in evaluation: with the running statistics, and no gradient (call it where none is asked for).
torch::Tensor fused_batchnorm_relu(SyncBatchNormImpl& bn, const torch::Tensor& x, const torch::Tensor& residual);

}  // namespace fastcpp::distributed
