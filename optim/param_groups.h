#pragma once
// Which parameters are special to the optimizer: those of normalization layers
// (BatchNorm, InstanceNorm, LayerNorm, GroupNorm, and layers marked NormLayer such as
// SyncBatchNorm: trainable while frozen, no weight decay) and biases (no weight decay),
// as fastai's norm_bias_params. GroupNorm is one on purpose: fastai's norm_types leaves it
// out, so there a frozen GroupNorm backbone keeps its affine parameters fixed and decayed.
#include <torch/nn/module.h>

#include <unordered_set>
#include <vector>

namespace fastcpp {

using ParamSet = std::unordered_set<const c10::TensorImpl*>;

bool is_norm_layer(const torch::nn::Module& module);
ParamSet norm_params(const torch::nn::Module& model);
ParamSet bias_params(const torch::nn::Module& model);
inline bool contains(const ParamSet& set, const torch::Tensor& param) {
  return set.count(param.unsafeGetTensorImpl()) > 0;
}

// The default splitter: every parameter in one group.
std::vector<std::vector<torch::Tensor>> single_group(torch::nn::Module& model);

// `params` with each tensor once, at its first place: libtorch's parameters() lists a
// tensor two modules share (tied weights) once for each, where PyTorch's lists it once.
// Stepped twice, it would move twice as far; reduced twice (DDP), two hooks would copy
// its gradient out of a bucket whose all-reduce may be running.
std::vector<torch::Tensor> unique_parameters(std::vector<torch::Tensor> params);
// The same over groups: each tensor in the first group that lists it.
std::vector<std::vector<torch::Tensor>> unique_parameters(std::vector<std::vector<torch::Tensor>> groups);

}  // namespace fastcpp
