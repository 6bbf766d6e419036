#include "learner/optimizers.h"

#include <torch/torch.h>

#include <cmath>

namespace fastcpp {
namespace {

void decay_weights(torch::Tensor& param, const Hypers& hypers, bool do_wd) {
  if (do_wd && hypers.wd != 0) param.mul_(1 - hypers.lr * hypers.wd);
}

torch::Tensor& buffer(ParamState& state, const char* name, const torch::Tensor& like) {
  auto& tensor = state.buffers[name];
  if (!tensor.defined()) tensor = torch::zeros_like(like, torch::MemoryFormat::Preserve);
  return tensor;
}

}  // namespace

void SGD::update(torch::Tensor& param, const torch::Tensor& grad, ParamState& state, const Hypers& hypers,
                 bool do_wd) {
  decay_weights(param, hypers, do_wd);
  ++state.step;
  if (hypers.mom == 0) {
    param.add_(grad, -hypers.lr);
    return;
  }
  auto& grad_avg = buffer(state, "grad_avg", param);
  grad_avg.mul_(hypers.mom).add_(grad);
  param.add_(grad_avg, -hypers.lr);
}

void Adam::update(torch::Tensor& param, const torch::Tensor& grad, ParamState& state, const Hypers& hypers,
                  bool do_wd) {
  decay_weights(param, hypers, do_wd);
  auto& grad_avg = buffer(state, "grad_avg", param);
  auto& sqr_avg = buffer(state, "sqr_avg", param);
  grad_avg.mul_(hypers.mom).add_(grad, 1 - hypers.mom);
  sqr_avg.mul_(hypers.sqr_mom).addcmul_(grad, grad, 1 - hypers.sqr_mom);
  const auto step = static_cast<double>(++state.step);
  const double debias1 = 1 - std::pow(hypers.mom, step);
  const double debias2 = 1 - std::pow(hypers.sqr_mom, step);
  auto denom = sqr_avg.sqrt().div_(std::sqrt(debias2)).add_(hypers.eps);
  param.addcdiv_(grad_avg, denom, -hypers.lr / debias1);
}

OptFunc sgd(SGDOptions options) {
  return [options](std::vector<ParamGroup> groups) -> std::unique_ptr<Optimizer> {
    for (auto& group : groups) {
      group.hypers.mom = options.mom;
      group.hypers.wd = options.wd;
    }
    return std::make_unique<SGD>(std::move(groups));
  };
}

OptFunc adam(AdamOptions options) {
  return [options](std::vector<ParamGroup> groups) -> std::unique_ptr<Optimizer> {
    for (auto& group : groups) {
      group.hypers.mom = options.mom;
      group.hypers.sqr_mom = options.sqr_mom;
      group.hypers.eps = options.eps;
      group.hypers.wd = options.wd;
    }
    return std::make_unique<Adam>(std::move(groups));
  };
}

}  // namespace fastcpp
