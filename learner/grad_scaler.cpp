#include "learner/grad_scaler.h"

#include <torch/torch.h>

#include <map>

#include "core/error.h"
#include "learner/optimizer.h"

namespace fastcpp {

GradScaler::GradScaler(GradScalerOptions options) : options_(options), scale_(options.init_scale) {
  if (options.init_scale <= 0 || options.growth_factor <= 1 || options.backoff_factor <= 0 ||
      options.backoff_factor >= 1 || options.growth_interval <= 0)
    throw Error("GradScaler: need init_scale > 0, growth_factor > 1, 0 < backoff_factor < 1, growth_interval > 0");
}

torch::Tensor GradScaler::scale(const torch::Tensor& loss) const { return loss * scale_; }

bool GradScaler::unscale_(Optimizer& opt) {
  if (unscaled_) return found_inf_;
  // PyTorch computes the inverse in double and applies it as float32.
  const float inv_scale = static_cast<float>(1.0 / scale_);
  std::map<std::string, std::vector<torch::Tensor>> cuda_grads;  // by device and dtype, as the kernel wants
  bool found = false;
  for (auto& group : opt.param_groups())
    for (auto& param : group.params) {
      auto grad = param.grad();
      if (!grad.defined()) continue;
      if (grad.is_cuda()) {
        cuda_grads[grad.device().str() + c10::toString(grad.scalar_type())].push_back(grad);
      } else {
        found = found || !torch::isfinite(grad).all().item<bool>();
        grad.mul_(inv_scale);
      }
    }
  for (auto& [key, grads] : cuda_grads) {
    const auto options = torch::TensorOptions().dtype(torch::kFloat).device(grads.front().device());
    auto found_inf = torch::zeros({1}, options);
    auto inv = torch::full({1}, inv_scale, options);
    at::_amp_foreach_non_finite_check_and_unscale_(grads, found_inf, inv);
    found = found || found_inf.item<float>() > 0;  // one sync per device, as PyTorch's step
  }
  unscaled_ = true;
  found_inf_ = found;
  return found_inf_;
}

bool GradScaler::step(Optimizer& opt) {
  if (unscale_(opt)) return false;
  opt.step();
  return true;
}

void GradScaler::update() {
  if (!unscaled_) throw Error("GradScaler::update: no gradients were unscaled in this step");
  if (found_inf_) {
    scale_ *= options_.backoff_factor;
    growth_tracker_ = 0;
  } else if (++growth_tracker_ == options_.growth_interval) {
    scale_ *= options_.growth_factor;
    growth_tracker_ = 0;
  }
  history_.push_back(scale_);
  unscaled_ = found_inf_ = false;
}

c10::impl::GenericDict GradScaler::state_dict() const {
  c10::impl::GenericDict dict(c10::StringType::get(), c10::AnyType::get());
  dict.insert("scale", scale_);
  dict.insert("growth_tracker", growth_tracker_);
  dict.insert("growth_factor", options_.growth_factor);
  dict.insert("backoff_factor", options_.backoff_factor);
  dict.insert("growth_interval", options_.growth_interval);
  return dict;
}

void GradScaler::load_state_dict(const c10::impl::GenericDict& state) {
  auto get = [&](const char* key) {
    auto it = state.find(c10::IValue(std::string(key)));
    if (it == state.end()) throw Error(std::string("GradScaler state has no '") + key + "'");
    return it->value();
  };
  scale_ = get("scale").toDouble();
  growth_tracker_ = get("growth_tracker").toInt();
  options_.growth_factor = get("growth_factor").toDouble();
  options_.backoff_factor = get("backoff_factor").toDouble();
  options_.growth_interval = get("growth_interval").toInt();
  unscaled_ = found_inf_ = false;
}

}  // namespace fastcpp
