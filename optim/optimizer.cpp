#include "optim/optimizer.h"

#include <torch/torch.h>

#include <map>

#include "core/error.h"
#include "formats/state_dict.h"

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

void Optimizer::step() {
  torch::NoGradGuard no_grad;
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
    if (with_grads.params.empty() || update_group(with_grads, group.hypers)) continue;
    for (size_t i = 0; i < with_grads.params.size(); ++i)
      update(with_grads.params[i], with_grads.grads[i], *with_grads.states[i], group.hypers, with_grads.do_wd[i]);
  }
}

void Optimizer::zero_grad() {
  for (auto& group : groups_)
    for (auto& param : group.params) param.mutable_grad().reset();
}

void Optimizer::clear_state() {
  for (auto& group_state : state_)
    for (auto& state : group_state) state = ParamState();
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
  dict.insert("n_groups", static_cast<int64_t>(groups_.size()));
  for (size_t g = 0; g < groups_.size(); ++g) {
    const auto prefix = std::to_string(g) + ".";
    dict.insert(prefix + "n_params", static_cast<int64_t>(groups_[g].params.size()));
    for (const auto& name : Hypers::names()) dict.insert(prefix + name, groups_[g].hypers.at(name));
    for (size_t i = 0; i < state_[g].size(); ++i) {
      const auto& state = state_[g][i];
      const auto param_prefix = prefix + std::to_string(i) + ".";
      dict.insert(param_prefix + "step", state.step);
      for (const auto& [name, buffer] : state.buffers) dict.insert(param_prefix + name, buffer.to(torch::kCPU, /*non_blocking=*/false, /*copy=*/true));
    }
  }
  return dict;
}

void Optimizer::load_state_dict(const c10::impl::GenericDict& dict, const std::string& source) {
  const auto what = source + " (optimizer state)";
  const auto refuse = [&](const std::string& why) { return Error("cannot read " + what + ": " + why); };
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
}

}  // namespace fastcpp
