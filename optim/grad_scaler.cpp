#include "optim/grad_scaler.h"

#include <torch/torch.h>

#include <limits>
#include <map>
#include <utility>

#include "core/device.h"
#include "core/error.h"
#include "optim/optimizer.h"
#include "formats/state_dict.h"

namespace fastcpp {
namespace {

bool valid_growth(const GradScalerOptions& o) {
  return o.growth_factor > 1 && o.backoff_factor > 0 && o.backoff_factor < 1 && o.growth_interval > 0;
}

}  // namespace

GradScaler::GradScaler(GradScalerOptions options)
    : options_(options),
      scale_(torch::full({1}, options.init_scale, torch::kFloat)),
      growth_tracker_(torch::zeros({1}, torch::kInt)) {
  if (!(options.init_scale > 0) || !valid_growth(options))
    throw Error("GradScaler: need init_scale > 0, growth_factor > 1, 0 < backoff_factor < 1, growth_interval > 0");
}

void GradScaler::place_on(const torch::Device& device) {
  if (scale_.device() == device) return;
  ++generation_;
  scale_ = scale_.to(device);
  growth_tracker_ = growth_tracker_.to(device);
  if (history_.defined()) history_ = history_.to(device);
}

torch::Tensor GradScaler::scale(const torch::Tensor& loss) {
  place_on(loss.device());
  return loss * scale_.reshape({});  // a 0-dim loss stays 0-dim, as PyTorch's (the scale is [1])
}

bool GradScaler::unscale_(Optimizer& opt) {
  if (!unscaled_) unscale_grads(opt);  // else unscaled already, by unscale_on_device too
  if (!skip_step_) skip_step_ = found_inf_.item<float>() > 0;  // one synchronization, as PyTorch's step
  return *skip_step_;
}

torch::Tensor GradScaler::unscale_on_device(Optimizer& opt) {
  if (!unscaled_) unscale_grads(opt);
  return found_inf_;
}

void GradScaler::unscale_grads(Optimizer& opt) {
  // The kernel wants the gradients of one device and dtype per call; found_inf is per device.
  std::map<std::pair<std::string, c10::ScalarType>, std::vector<torch::Tensor>> grads;
  for (auto& group : opt.param_groups())
    for (auto& param : group.params)
      if (auto grad = param.grad(); grad.defined()) {
        // PyTorch refuses too: unscaled in Half, small gradients flush to zero
        if (grad.scalar_type() == torch::kHalf)
          throw Error("GradScaler: a parameter's gradient is Half: under loss scaling the parameters stay float "
                      "(autocast runs the layers in Half; leave the model's dtype float)");
        grads[{grad.device().str(), grad.scalar_type()}].push_back(grad);
      }
  if (!grads.empty()) place_on(grads.begin()->second.front().device());
  // PyTorch computes the inverse in double and applies it as float32.
  const auto inv_scale = scale_.to(torch::kDouble).reciprocal().to(torch::kFloat);
  std::map<std::string, torch::Tensor> found_per_device;
  for (auto& [key, same_kind] : grads) {
    const auto device = same_kind.front().device();
    auto& found = found_per_device[key.first];
    if (!found.defined()) found = torch::zeros({1}, torch::TensorOptions().dtype(torch::kFloat).device(device));
    at::_amp_foreach_non_finite_check_and_unscale_(same_kind, found, inv_scale.to(device, /*non_blocking=*/true));
  }
  found_inf_ = torch::zeros({1}, scale_.options());
  for (auto& [device, found] : found_per_device) found_inf_ += found.to(scale_.device(), /*non_blocking=*/true);
  unscaled_ = true;
  skip_step_.reset();
}

std::vector<double> GradScaler::history() const {
  if (history_size_ == 0) return {};
  const auto values = history_.narrow(0, 0, history_size_).to(torch::kCPU, torch::kDouble);
  return {values.data_ptr<double>(), values.data_ptr<double>() + history_size_};
}

bool GradScaler::step(Optimizer& opt) {
  if (unscale_(opt)) return false;
  opt.step();
  return true;
}

void GradScaler::update() {
  if (!unscaled_) throw Error("GradScaler::update: no gradients were unscaled in this step");
  at::_amp_update_scale_(scale_, growth_tracker_, found_inf_, options_.growth_factor, options_.backoff_factor,
                         options_.growth_interval);
  unscaled_ = false;
  // A graph would write the same entry at every replay.
  if (recording_cuda_graph(scale_.device())) return;
  // Kept on the scale's device and read back when asked: no host sync per step.
  if (history_size_ == history_.numel()) {
    auto grown = torch::empty({std::max<int64_t>(64, 2 * history_size_)}, scale_.options());
    if (history_size_ > 0) grown.narrow(0, 0, history_size_).copy_(history_.narrow(0, 0, history_size_));
    history_ = grown;
  }
  history_.narrow(0, history_size_++, 1).copy_(scale_);
}

c10::impl::GenericDict GradScaler::state_dict() const {
  c10::impl::GenericDict dict(c10::StringType::get(), c10::AnyType::get());
  dict.insert("scale", get_scale());
  dict.insert("growth_tracker", growth_tracker());
  dict.insert("growth_factor", options_.growth_factor);
  dict.insert("backoff_factor", options_.backoff_factor);
  dict.insert("growth_interval", options_.growth_interval);
  return dict;
}

GradScaler::State GradScaler::parse(const c10::impl::GenericDict& state, const std::string& source) {
  const auto what = source + " (GradScaler state)";
  State parsed;
  parsed.scale = typed_entry(state, "scale", &c10::IValue::isDouble, what).toDouble();
  parsed.growth_tracker = typed_entry(state, "growth_tracker", &c10::IValue::isInt, what).toInt();
  parsed.options.growth_factor = typed_entry(state, "growth_factor", &c10::IValue::isDouble, what).toDouble();
  parsed.options.backoff_factor = typed_entry(state, "backoff_factor", &c10::IValue::isDouble, what).toDouble();
  parsed.options.growth_interval = typed_entry(state, "growth_interval", &c10::IValue::isInt, what).toInt();
  // The scale is a float32 tensor and the tracker an int32 one.
  const bool fits = parsed.scale > 0 && parsed.scale <= std::numeric_limits<float>::max() &&
                    valid_growth(parsed.options) &&
                    parsed.options.growth_interval <= std::numeric_limits<int32_t>::max() &&
                    parsed.growth_tracker >= 0 && parsed.growth_tracker < parsed.options.growth_interval;
  if (!fits)
    throw Error("cannot read " + what + ": need 0 < scale <= 3.4e38, growth_factor > 1, 0 < backoff_factor < 1, " +
                "0 <= growth_tracker < growth_interval < 2^31");
  return parsed;
}

void GradScaler::restore(const State& state) {
  scale_.fill_(state.scale);
  growth_tracker_.fill_(state.growth_tracker);
  options_.growth_factor = state.options.growth_factor;
  options_.backoff_factor = state.options.backoff_factor;
  options_.growth_interval = state.options.growth_interval;
  unscaled_ = false;
}

}  // namespace fastcpp
