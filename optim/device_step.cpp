#include "optim/device_step.h"

#include <torch/torch.h>

namespace fastcpp {
namespace {

torch::Tensor host_values(const Hypers& h) {
  return torch::tensor({h.lr, h.mom, h.sqr_mom, h.wd, h.eps}, torch::kFloat);
}

// The tensors of a step that may be skipped: `keep` is 1 - found_inf (undefined when
// nothing can skip it), and kept(x) is x where the step happens and 0 where it is skipped.
struct Skip {
  explicit Skip(GroupTensors& group, const torch::Tensor& found_inf) {
    if (!found_inf.defined()) return;
    const auto found = found_inf.reshape({}).gt(0);  // a sum of verdicts: 0, or 1 or more
    // Overflowed gradients hold inf or nan, which times 0 is still nan.
    for (auto& grad : group.grads) grad.masked_fill_(found, 0);
    keep = found.logical_not().to(torch::kFloat);
  }
  torch::Tensor kept(const torch::Tensor& value) const { return keep.defined() ? value * keep : value; }
  void count(torch::Tensor& step) const { keep.defined() ? step.add_(keep) : step.add_(1); }
  torch::Tensor keep;
};

// fastai's decoupled weight decay, p *= 1 - lr*wd, on the params whose do_wd is set.
void decay_weights(GroupTensors& group, const torch::Tensor& lr, const torch::Tensor& wd) {
  std::vector<torch::Tensor> decayed;
  for (size_t i = 0; i < group.params.size(); ++i)
    if (group.do_wd[i]) decayed.push_back(group.params[i]);
  if (!decayed.empty()) torch::_foreach_mul_(decayed, 1 - lr * wd);
}

std::vector<torch::Tensor> buffers(GroupTensors& group, const char* name) {
  std::vector<torch::Tensor> result;
  for (size_t i = 0; i < group.params.size(); ++i)
    result.push_back(state_buffer(*group.states[i], name, group.params[i]));
  return result;
}

}  // namespace

DeviceHypers::DeviceHypers(const torch::Device& device, const Hypers& hypers, int64_t step_count)
    : values(host_values(hypers).to(device)),
      step(torch::full({}, static_cast<double>(step_count), torch::TensorOptions(torch::kFloat).device(device))) {}

void DeviceHypers::refresh(const Hypers& hypers) {
  const auto host = host_values(hypers);
  // A pinned source lets the copy run behind the host; the caching host allocator keeps
  // the block until the copy is done.
  values.copy_(values.is_cuda() ? host.pin_memory() : host, /*non_blocking=*/true);
}

bool device_steppable(const GroupTensors& group) {
  if (group.params.empty()) return false;
  const auto& head = group.params.front();
  if (!c10::isFloatingType(head.scalar_type())) return false;
  for (size_t i = 0; i < group.params.size(); ++i) {
    const auto &param = group.params[i], &grad = group.grads[i];
    if (param.device() != head.device() || grad.device() != head.device() || grad.is_sparse() ||
        !c10::isFloatingType(param.scalar_type()))
      return false;
    for (const auto& [name, buffer] : group.states[i]->buffers)
      if (buffer.device() != head.device()) return false;
  }
  return true;
}

void device_sgd_update(GroupTensors& group, DeviceHypers& h, const torch::Tensor& found_inf, bool momentum) {
  const Skip skip(group, found_inf);
  const auto lr = skip.kept(h.lr());
  skip.count(h.step);
  decay_weights(group, lr, h.wd());
  if (!momentum) {
    torch::_foreach_sub_(group.params, torch::_foreach_mul(group.grads, lr));
    return;
  }
  auto grad_avgs = buffers(group, "grad_avg");
  // grad_avg = mom*grad_avg + g, with mom 1 where the step is skipped (and g zeroed).
  torch::_foreach_mul_(grad_avgs, 1 - skip.kept(1 - h.mom()));
  torch::_foreach_add_(grad_avgs, group.grads);
  torch::_foreach_sub_(group.params, torch::_foreach_mul(grad_avgs, lr));
}

void device_adam_update(GroupTensors& group, DeviceHypers& h, const torch::Tensor& found_inf) {
  auto grad_avgs = buffers(group, "grad_avg");
  auto sqr_avgs = buffers(group, "sqr_avg");
  const Skip skip(group, found_inf);
  const auto lr = skip.kept(h.lr());
  const auto one_minus_mom = skip.kept(1 - h.mom()), one_minus_sqr_mom = skip.kept(1 - h.sqr_mom());
  skip.count(h.step);
  decay_weights(group, lr, h.wd());
  torch::_foreach_mul_(grad_avgs, 1 - one_minus_mom);
  torch::_foreach_add_(grad_avgs, torch::_foreach_mul(group.grads, one_minus_mom));
  auto squares = torch::_foreach_mul(group.grads, group.grads);
  torch::_foreach_mul_(squares, one_minus_sqr_mom);
  torch::_foreach_mul_(sqr_avgs, 1 - one_minus_sqr_mom);
  torch::_foreach_add_(sqr_avgs, squares);
  // A first step skipped leaves the count at 0, and lr 0 over a bias correction of 0 is nan.
  const auto t = h.step.clamp_min(1);
  const auto debias1 = 1 - h.mom().pow(t), debias2 = 1 - h.sqr_mom().pow(t);
  auto denominators = torch::_foreach_div(sqr_avgs, debias2);
  torch::_foreach_sqrt_(denominators);
  torch::_foreach_add_(denominators, h.eps());
  auto steps = torch::_foreach_div(grad_avgs, denominators);
  torch::_foreach_mul_(steps, lr / debias1);
  torch::_foreach_sub_(group.params, steps);
}

}  // namespace fastcpp
