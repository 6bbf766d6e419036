#include "callbacks/training.h"

#include <torch/torch.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/spec_text.h"
#include "learner/learner.h"

namespace fastcpp {

GradientAccumulation::GradientAccumulation(int64_t n_acc) : n_acc_(n_acc) {
  order = 6;
  run_valid = false;
  if (n_acc <= 0) throw Error("GradientAccumulation: n_acc must be positive, got " + std::to_string(n_acc));
}

void GradientAccumulation::after_loss() {
  auto& l = learn();
  if (!l.yb.defined()) return;  // no target, no loss, no step
  l.loss_grad = l.loss_grad * (static_cast<double>(l.yb.size(0)) / n_acc_);
}

void GradientAccumulation::before_step() {
  count_ += learn().yb.size(0);
  if (count_ < n_acc_) throw CancelBatchException();  // keep the gradients, skip step and zero_grad
  count_ = 0;
}

void BnFreeze::before_train() {
  for (const auto& module : learn().model.module().modules()) {
    const auto params = module->parameters(/*recurse=*/false);
    const bool tracks_statistics = module->named_buffers(/*recurse=*/false).contains("running_mean");
    if (tracks_statistics && !params.empty() &&
        std::none_of(params.begin(), params.end(), [](const torch::Tensor& p) { return p.requires_grad(); }))
      module->eval();
  }
}

GradientClip::GradientClip(double max_norm, double norm_type) : max_norm_(max_norm), norm_type_(norm_type) {
  order = 11;
  capturable = true;  // the norm and the factor stay on the device
  // A negative max_norm would turn every gradient around.
  if (!(max_norm > 0)) throw Error("GradientClip: max_norm must be positive, got " + spec_text::number(max_norm));
  if (!(norm_type > 0)) throw Error("GradientClip: norm_type must be positive, got " + spec_text::number(norm_type));
}

void GradientClip::before_step() {
  // As torch.nn.utils.clip_grad_norm_'s foreach path: the norm and the factor stay on the
  // devices (libtorch's C++ clip_grad_norm_ reads the norm back, a host sync per step).
  std::vector<std::pair<torch::Device, std::vector<torch::Tensor>>> grads;  // per device
  for (const auto& group : learn().opt->param_groups())
    for (const auto& param : group.params) {
      if (!param.grad().defined()) continue;
      const auto device = param.grad().device();
      auto at = std::find_if(grads.begin(), grads.end(), [&](const auto& entry) { return entry.first == device; });
      if (at == grads.end()) at = grads.insert(grads.end(), {device, {}});
      at->second.push_back(param.grad());
    }
  if (grads.empty()) return;
  const auto home = grads.front().first;
  const bool infinity = std::isinf(norm_type_);
  std::vector<torch::Tensor> device_norms;
  for (const auto& [device, list] : grads) {
    const auto norms = torch::stack(torch::_foreach_norm(list, norm_type_));
    device_norms.push_back((infinity ? norms.max() : torch::linalg_vector_norm(norms, norm_type_)).to(home));
  }
  const auto stacked = torch::stack(device_norms);
  const auto total = infinity ? stacked.max() : torch::linalg_vector_norm(stacked, norm_type_);
  const auto factor = torch::clamp_max(max_norm_ / (total + 1e-6), 1.0);
  for (auto& [device, list] : grads) torch::_foreach_mul_(list, factor.to(device, /*non_blocking=*/true));
}

TerminateOnNaN::TerminateOnNaN() { order = -9; }

void TerminateOnNaN::after_batch() {  // validation batches too, as fastai's
  auto& l = learn();
  if (!l.loss.defined() || torch::isfinite(l.loss).all().item<bool>()) return;
  reason_ = std::string("TerminateOnNaN: the ") + (l.training ? "training" : "validation") + " loss is " +
            (torch::isnan(l.loss).any().item<bool>() ? "nan" : "inf") + " at " + l.position() +
            "; stopping the fit (try a lower learning rate, or gradient clipping)";
  l.logger(reason_);
  throw CancelFitException();
}

}  // namespace fastcpp
