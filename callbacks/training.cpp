#include "callbacks/training.h"

#include <torch/torch.h>

#include "core/error.h"
#include "learner/learner.h"

namespace fastcpp {

GradientAccumulation::GradientAccumulation(int64_t n_acc) : n_acc_(n_acc) {
  order = 6;
  run_valid = false;
  if (n_acc <= 0) throw Error("GradientAccumulation: n_acc must be positive, got " + std::to_string(n_acc));
}

void GradientAccumulation::after_loss() {
  auto& l = learn();
  l.loss_grad = l.loss_grad * (static_cast<double>(l.yb.size(0)) / n_acc_);
}

void GradientAccumulation::before_step() {
  count_ += learn().yb.size(0);
  if (count_ < n_acc_) throw CancelBatchException();  // keep the gradients, skip step and zero_grad
  count_ = 0;
}

GradientClip::GradientClip(double max_norm, double norm_type) : max_norm_(max_norm), norm_type_(norm_type) {
  order = 11;
}

void GradientClip::before_step() {
  std::vector<torch::Tensor> params;
  for (const auto& group : learn().opt->param_groups())
    for (const auto& param : group.params)
      if (param.grad().defined()) params.push_back(param);
  torch::nn::utils::clip_grad_norm_(params, max_norm_, norm_type_);
}

TerminateOnNaN::TerminateOnNaN() {
  order = -9;
  run_valid = false;
}

void TerminateOnNaN::after_batch() {
  auto& l = learn();
  if (!l.loss.defined() || torch::isfinite(l.loss).all().item<bool>()) return;
  reason_ = "TerminateOnNaN: the training loss is " + std::string(torch::isnan(l.loss).any().item<bool>() ? "nan" : "inf") +
            " at " + l.position() + "; stopping the fit (try a lower learning rate, or gradient clipping)";
  l.logger(reason_);
  throw CancelFitException();
}

}  // namespace fastcpp
