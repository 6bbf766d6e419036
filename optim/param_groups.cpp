#include "optim/param_groups.h"

#include <torch/torch.h>

#include "core/norm_layer.h"

namespace fastcpp {

bool is_norm_layer(const torch::nn::Module& module) {
  return dynamic_cast<const torch::nn::BatchNorm1dImpl*>(&module) ||
         dynamic_cast<const NormLayer*>(&module) ||
         dynamic_cast<const torch::nn::BatchNorm2dImpl*>(&module) ||
         dynamic_cast<const torch::nn::BatchNorm3dImpl*>(&module) ||
         dynamic_cast<const torch::nn::InstanceNorm1dImpl*>(&module) ||
         dynamic_cast<const torch::nn::InstanceNorm2dImpl*>(&module) ||
         dynamic_cast<const torch::nn::InstanceNorm3dImpl*>(&module) ||
         dynamic_cast<const torch::nn::LayerNormImpl*>(&module) ||
         dynamic_cast<const torch::nn::GroupNormImpl*>(&module);
}

ParamSet norm_params(const torch::nn::Module& model) {
  ParamSet set;
  for (const auto& module : model.modules(/*include_self=*/true))
    if (is_norm_layer(*module))
      for (const auto& param : module->parameters(/*recurse=*/false)) set.insert(param.unsafeGetTensorImpl());
  return set;
}

ParamSet bias_params(const torch::nn::Module& model) {
  ParamSet set;
  for (const auto& module : model.modules(/*include_self=*/true))
    for (const auto& item : module->named_parameters(/*recurse=*/false))
      if (item.key() == "bias") set.insert(item.value().unsafeGetTensorImpl());
  return set;
}

std::vector<std::vector<torch::Tensor>> single_group(torch::nn::Module& model) { return {model.parameters()}; }

std::vector<std::vector<torch::Tensor>> unique_parameters(std::vector<std::vector<torch::Tensor>> groups) {
  ParamSet seen;
  for (auto& group : groups)
    std::erase_if(group, [&](const torch::Tensor& param) { return !seen.insert(param.unsafeGetTensorImpl()).second; });
  return groups;
}

std::vector<torch::Tensor> unique_parameters(std::vector<torch::Tensor> params) {
  std::vector<std::vector<torch::Tensor>> one_group{std::move(params)};
  return std::move(unique_parameters(std::move(one_group)).front());
}

}  // namespace fastcpp
