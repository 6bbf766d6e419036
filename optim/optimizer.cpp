#include "optim/optimizer.h"

#include <torch/torch.h>

#include <algorithm>
#include <map>
#include <utility>

#include <c10/util/Type.h>

#include "core/device.h"
#include "core/error.h"
#include "formats/state_dict.h"
#include "optim/device_step.h"

namespace fastcpp {

Optimizer::Optimizer(std::vector<ParamGroup> groups) : groups_(std::move(groups)) {
  for (auto& group : groups_) {
    if (group.do_wd.empty()) group.do_wd.assign(group.params.size(), true);
    if (group.do_wd.size() != group.params.size())
      throw Error("ParamGroup: do_wd has " + std::to_string(group.do_wd.size()) + " entries for " +
                  std::to_string(group.params.size()) + " params");
    state_.emplace_back(group.params.size());
  }
}

torch::Tensor& state_buffer(ParamState& state, const char* name, const torch::Tensor& like) {
  auto& tensor = state.buffers[name];
  if (!tensor.defined()) tensor = torch::zeros_like(like, torch::MemoryFormat::Preserve);
  return tensor;
}

namespace {

// fastai's l2_reg: grad += wd*p on the params whose do_wd is set, which then take no
// decoupled decay. `wd` is a number, or a tensor on the params' device for the device step.
template <class Wd>
void add_l2_to_grads(GroupTensors& group, const Wd& wd) {
  std::vector<torch::Tensor> params, grads;
  for (size_t i = 0; i < group.params.size(); ++i) {
    if (!group.do_wd[i]) continue;
    if (group.grads[i].is_sparse())
      throw Error("L2 weight decay (decouple_wd false) adds wd * param to each gradient, which a sparse one cannot "
                  "take: decay it decoupled (decouple_wd true), or give its parameter no weight decay");
    params.push_back(group.params[i]);
    grads.push_back(group.grads[i]);
    group.do_wd[i] = false;
  }
  if (!grads.empty()) torch::_foreach_add_(grads, torch::_foreach_mul(params, wd));
}

}  // namespace

std::string Optimizer::name() const {
  const auto full = c10::demangle(typeid(*this).name());
  const auto colon = full.rfind("::");
  return colon == std::string::npos ? full : full.substr(colon + 2);
}

void Optimizer::step() {
  torch::NoGradGuard no_grad;
  const auto found_inf = std::exchange(found_inf_, torch::Tensor());
  if (found_inf.defined() && !device_step_ && found_inf.item<float>() > 0) return;  // on the host: read, then skipped
  for (size_t g = 0; g < groups_.size(); ++g) {
    auto& group = groups_[g];
    GroupTensors with_grads;
    for (size_t i = 0; i < group.params.size(); ++i) {
      if (!group.params[i].grad().defined()) continue;
      with_grads.params.push_back(group.params[i]);
      with_grads.grads.push_back(group.params[i].grad());
      with_grads.states.push_back(&state_[g][i]);
      with_grads.do_wd.push_back(group.do_wd[i]);
    }
    if (with_grads.params.empty()) continue;
    if (device_step_) {
      for (auto* state : with_grads.states) state->counted_on_device = true;
      step_on_device(g, with_grads, found_inf);
      continue;
    }
    if (!decouple_wd_ && group.hypers.wd != 0) add_l2_to_grads(with_grads, group.hypers.wd);
    if (update_group(with_grads, group.hypers)) continue;
    for (size_t i = 0; i < with_grads.params.size(); ++i)
      update(with_grads.params[i], with_grads.grads[i], *with_grads.states[i], group.hypers, with_grads.do_wd[i]);
  }
}

void Optimizer::step_on_device(size_t g, GroupTensors& group, const torch::Tensor& found_inf) {
  if (!device_steppable(group))
    throw Error("the optimizer's step on the device needs the params of a group on one device, with dense "
                "floating-point gradients (group " + std::to_string(g) + ")");
  auto& hypers = *device_hypers_[g];
  if (!recording_cuda_graph(hypers.values.device())) hypers.refresh(groups_[g].hypers);
  if (!decouple_wd_) add_l2_to_grads(group, hypers.wd());  // wd may change between replays
  update_on_device(group, hypers, found_inf.defined() ? found_inf.to(hypers.values.device()) : found_inf);
}

void Optimizer::set_device_step(bool on) {
  if (on == device_step_) return;
  if (on && !has_device_step())
    throw Error("set_device_step: " + name() + " has no step on the device (SGD and Adam have)");
  ++state_generation_;
  torch::NoGradGuard no_grad;
  if (!on) {
    const auto counts = device_step_counts();
    for (size_t g = 0; g < groups_.size(); ++g)
      for (auto& state : state_[g])
        if (std::exchange(state.counted_on_device, false)) state.step = counts[g];
    device_hypers_.clear();
    device_step_ = false;
    return;
  }
  for (size_t g = 0; g < groups_.size(); ++g) {
    const auto& params = groups_[g].params;
    if (params.empty()) {
      device_hypers_.push_back(nullptr);
      continue;
    }
    // One count per group, as the fused updates keep it: the most any param has taken
    // (a param frozen since has fewer).
    int64_t step = 0;
    for (const auto& state : state_[g]) step = std::max(step, state.step);
    device_hypers_.push_back(std::make_shared<DeviceHypers>(params.front().device(), groups_[g].hypers, step));
    // Made now, not inside a recorded step, where their zeroing would replay every time.
    for (size_t i = 0; i < params.size(); ++i)
      if (params[i].requires_grad())
        for (const char* name : device_buffers()) state_buffer(state_[g][i], name, params[i]);
  }
  device_step_ = true;
}

void Optimizer::refresh_device_hypers() {
  for (size_t g = 0; g < device_hypers_.size(); ++g)
    if (device_hypers_[g]) device_hypers_[g]->refresh(groups_[g].hypers);
}

std::vector<int64_t> Optimizer::device_step_counts() const {
  std::vector<int64_t> counts(groups_.size(), -1);
  for (size_t g = 0; g < device_hypers_.size(); ++g)
    if (device_hypers_[g]) counts[g] = static_cast<int64_t>(device_hypers_[g]->step.item<float>());
  return counts;
}

void Optimizer::remake_device_state() {
  if (!device_step_) return;
  device_step_ = false;
  device_hypers_.clear();
  set_device_step(true);
}

void Optimizer::zero_grad() {
  for (auto& group : groups_)
    for (auto& param : group.params) param.mutable_grad().reset();
}

void Optimizer::clear_state() {
  ++state_generation_;
  for (auto& group_state : state_)
    for (auto& state : group_state) state = ParamState();
  remake_device_state();  // at step 0
}

void Optimizer::set_hyper(const std::string& name, double value) {
  for (auto& group : groups_) group.hypers.at(name) = value;
}

void Optimizer::set_hyper(const std::string& name, const std::vector<double>& per_group) {
  if (per_group.size() != groups_.size())
    throw Error("set_hyper('" + name + "'): " + std::to_string(per_group.size()) + " values for " +
                std::to_string(groups_.size()) + " parameter groups");
  for (size_t g = 0; g < groups_.size(); ++g) groups_[g].hypers.at(name) = per_group[g];
}

std::vector<double> Optimizer::hyper(const std::string& name) const {
  std::vector<double> values;
  for (const auto& group : groups_) values.push_back(group.hypers.at(name));
  return values;
}

c10::impl::GenericDict string_dict() { return c10::impl::GenericDict(c10::StringType::get(), c10::AnyType::get()); }

c10::impl::GenericDict Optimizer::state_dict() const {
  auto dict = string_dict();
  dict.insert("optimizer", name());
  dict.insert("n_groups", static_cast<int64_t>(groups_.size()));
  const auto counts = device_step_counts();
  for (size_t g = 0; g < groups_.size(); ++g) {
    const auto prefix = std::to_string(g) + ".";
    dict.insert(prefix + "n_params", static_cast<int64_t>(groups_[g].params.size()));
    for (const auto& name : Hypers::names()) dict.insert(prefix + name, groups_[g].hypers.at(name));
    for (size_t i = 0; i < state_[g].size(); ++i) {
      const auto& state = state_[g][i];
      const auto param_prefix = prefix + std::to_string(i) + ".";
      dict.insert(param_prefix + "step", state.counted_on_device ? counts[g] : state.step);
      for (const auto& [name, buffer] : state.buffers) dict.insert(param_prefix + name, buffer.to(torch::kCPU, /*non_blocking=*/false, /*copy=*/true));
    }
  }
  return dict;
}

void Optimizer::load_state_dict(const c10::impl::GenericDict& dict, const std::string& source) {
  const auto what = source + " (optimizer state)";
  const auto refuse = [&](const std::string& why) { return Error("cannot read " + what + ": " + why); };
  // Another kind's buffers would be taken for this one's (SGD's momentum as Adam's average).
  if (dict.contains("optimizer")) {  // older files do not say
    const auto saved_by = typed_entry(dict, "optimizer", &c10::IValue::isString, what).toStringRef();
    if (saved_by != name()) throw refuse("it is " + saved_by + "'s, the learner's optimizer is " + name());
  }
  const auto n_groups = typed_entry(dict, "n_groups", &c10::IValue::isInt, what).toInt();
  if (n_groups != static_cast<int64_t>(groups_.size()))
    throw refuse(std::to_string(n_groups) + " parameter groups, the learner has " + std::to_string(groups_.size()));
  // The per-parameter entries ("<group>.<param>.<buffer>") in one pass, by "<group>.<param>.".
  std::map<std::string, std::map<std::string, c10::IValue>> by_param;
  for (const auto& entry : dict) {
    if (!entry.key().isString()) throw refuse("a key is not a string");
    const auto& key = entry.key().toStringRef();
    const auto second_dot = key.find('.', key.find('.') + 1);
    if (key.find('.') != std::string::npos && second_dot != std::string::npos)
      by_param[key.substr(0, second_dot + 1)][key.substr(second_dot + 1)] = entry.value();
  }
  // Everything is read and checked into these first, so that a bad file changes nothing.
  std::vector<std::map<std::string, double>> hypers(groups_.size());
  std::vector<std::vector<ParamState>> states(groups_.size());
  for (size_t g = 0; g < groups_.size(); ++g) {
    const auto prefix = std::to_string(g) + ".";
    const auto n_params = typed_entry(dict, prefix + "n_params", &c10::IValue::isInt, what).toInt();
    if (n_params != static_cast<int64_t>(groups_[g].params.size()))
      throw refuse("group " + std::to_string(g) + " has " + std::to_string(n_params) + " params, the learner's " +
                   std::to_string(groups_[g].params.size()));
    for (const auto& name : Hypers::names())
      hypers[g][name] = typed_entry(dict, prefix + name, &c10::IValue::isDouble, what).toDouble();
    for (size_t i = 0; i < groups_[g].params.size(); ++i) {
      const auto param_prefix = prefix + std::to_string(i) + ".";
      const auto& param = groups_[g].params[i];
      ParamState state;
      state.step = typed_entry(dict, param_prefix + "step", &c10::IValue::isInt, what).toInt();
      for (const auto& [name, value] : by_param[param_prefix]) {
        if (name == "step") continue;
        if (!value.isTensor() || !value.toTensor().is_floating_point() || value.toTensor().sizes() != param.sizes())
          throw refuse("its '" + param_prefix + name + "' entry is not a floating-point tensor of its parameter's shape " +
                       c10::str(param.sizes()));
        state.buffers[name] = value.toTensor().to(param.device(), param.scalar_type());
      }
      states[g].push_back(std::move(state));
    }
  }
  for (size_t g = 0; g < groups_.size(); ++g) {
    for (const auto& [name, value] : hypers[g]) groups_[g].hypers.at(name) = value;
    state_[g] = std::move(states[g]);
  }
  ++state_generation_;
  remake_device_state();
}

}  // namespace fastcpp
