#include "optim/fused_updates.h"

#include <torch/torch.h>

#include <array>

namespace fastcpp {
namespace {

// A dense tensor's memory as one dimension. The kernels work on each tensor's flat memory
// anyway, but ATen's CPU kernels first copy a gradient that is not contiguous (a
// channels-last weight's) and then read the original: a wasted copy per weight per step
// (0.45 ms of a 68 ms step of the Fashion-MNIST model on 2 cores). Flat, nothing is copied.
torch::Tensor flat(const torch::Tensor& t) { return t.as_strided({t.numel()}, {1}, t.storage_offset()); }

// The group's tensors (with one state buffer list or two) split by weight decay; a param
// whose gradient is not contiguous is seen flat, with its gradient and buffers.
struct Part {
  bool decay = false;
  std::vector<torch::Tensor> params, grads, first, second;
};

std::array<Part, 2> split_by_decay(const GroupTensors& group, const std::vector<torch::Tensor>& first,
                                   const std::vector<torch::Tensor>& second) {
  std::array<Part, 2> parts;
  parts[1].decay = true;
  for (size_t i = 0; i < group.params.size(); ++i) {
    auto& part = parts[group.do_wd[i] ? 1 : 0];
    const bool as_they_are = group.grads[i].is_contiguous();  // and no view to make (about 1 us each)
    const auto seen = [&](const torch::Tensor& t) { return as_they_are ? t : flat(t); };
    part.params.push_back(seen(group.params[i]));
    part.grads.push_back(seen(group.grads[i]));
    if (!first.empty()) part.first.push_back(seen(first[i]));
    if (!second.empty()) part.second.push_back(seen(second[i]));
  }
  return parts;
}

// The kernels treat each tensor as its flat memory, so two dense tensors fit together when
// their strides agree on every dimension longer than 1 (the kernels' own rule). A size-1
// dimension's stride is arbitrary: a channels-last 1x1 or one-channel weight and its
// gradient may differ there, and exact equality would fall back to the per-param loop.
bool same_layout(const torch::Tensor& a, const torch::Tensor& b) {
  if (a.sizes() != b.sizes() || !b.is_non_overlapping_and_dense()) return false;
  for (int64_t d = 0; d < a.dim(); ++d)
    if (a.size(d) > 1 && a.stride(d) != b.stride(d)) return false;
  return true;
}

}  // namespace

bool fusable(const GroupTensors& group) {
  if (group.params.empty()) return false;
  const auto& head = group.params.front();
  if (!c10::isFloatingType(head.scalar_type())) return false;
  for (size_t i = 0; i < group.params.size(); ++i) {
    const auto &param = group.params[i], &grad = group.grads[i];
    if (param.device() != head.device() || param.scalar_type() != head.scalar_type() ||
        grad.scalar_type() != head.scalar_type() || grad.is_sparse() || !param.is_non_overlapping_and_dense() ||
        !same_layout(param, grad) || group.states[i]->step != group.states.front()->step)
      return false;
    // Buffers made before the params changed layout (to_channels_last after a fit, a
    // loaded checkpoint) stay as they were: the kernels would refuse them.
    for (const auto& [name, buffer] : group.states[i]->buffers)
      if (!same_layout(param, buffer) || buffer.scalar_type() != param.scalar_type() ||
          buffer.device() != param.device())
        return false;
  }
  return true;
}

void fused_sgd_update(GroupTensors& group, const Hypers& hypers, bool momentum) {
  std::vector<torch::Tensor> grad_avgs;
  for (size_t i = 0; i < group.params.size(); ++i) {
    ++group.states[i]->step;
    if (momentum) grad_avgs.push_back(state_buffer(*group.states[i], "grad_avg", group.grads[i]));
  }
  for (auto& part : split_by_decay(group, grad_avgs, {})) {
    if (part.params.empty()) continue;
    // fastai's decay is decoupled (PyTorch's SGD adds it to the gradient instead).
    if (part.decay && hypers.wd != 0) torch::_foreach_mul_(part.params, 1 - hypers.lr * hypers.wd);
    // The buffers start at zero: mom * 0 + grad is PyTorch's first-step copy of the gradient.
    at::_fused_sgd_(part.params, part.grads, part.first, /*weight_decay=*/0, momentum ? hypers.mom : 0.0, hypers.lr,
                    /*dampening=*/0, /*nesterov=*/false, /*maximize=*/false, /*is_first_step=*/false);
  }
}

void fused_adam_update(GroupTensors& group, const Hypers& hypers) {
  std::vector<torch::Tensor> grad_avgs, sqr_avgs;
  for (size_t i = 0; i < group.params.size(); ++i) {
    ++group.states[i]->step;
    grad_avgs.push_back(state_buffer(*group.states[i], "grad_avg", group.grads[i]));
    sqr_avgs.push_back(state_buffer(*group.states[i], "sqr_avg", group.grads[i]));
  }
  // The kernels read the step (for the bias corrections) from a float tensor per param,
  // all at the same step here: one tensor, filled on the device (no copy from the host).
  const auto step = torch::full({}, static_cast<double>(group.states.front()->step),
                                group.params.front().options().dtype(torch::kFloat));
  for (auto& part : split_by_decay(group, grad_avgs, sqr_avgs)) {
    if (part.params.empty()) continue;
    const std::vector<torch::Tensor> steps(part.params.size(), step);
    at::_fused_adamw_(part.params, part.grads, part.first, part.second, /*max_exp_avg_sqs=*/{}, steps, hypers.lr,
                      hypers.mom, hypers.sqr_mom, part.decay ? hypers.wd : 0.0, hypers.eps, /*amsgrad=*/false,
                      /*maximize=*/false);
  }
}

}  // namespace fastcpp
