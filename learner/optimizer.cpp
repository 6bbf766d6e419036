#include "learner/optimizer.h"

#include <torch/torch.h>

#include "core/error.h"

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

void Optimizer::step() {
  torch::NoGradGuard no_grad;
  for (size_t g = 0; g < groups_.size(); ++g) {
    auto& group = groups_[g];
    for (size_t i = 0; i < group.params.size(); ++i) {
      auto& param = group.params[i];
      const auto& grad = param.grad();
      if (!grad.defined()) continue;
      update(param, grad, state_[g][i], group.hypers, group.do_wd[i]);
    }
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
  auto get = [&](const std::string& key) {
    auto it = dict.find(c10::IValue(key));
    if (it == dict.end()) throw Error(source + ": optimizer state has no entry '" + key + "'");
    return it->value();
  };
  const auto n_groups = get("n_groups").toInt();
  if (n_groups != static_cast<int64_t>(groups_.size()))
    throw Error(source + ": optimizer state has " + std::to_string(n_groups) + " parameter groups, the learner has " +
                std::to_string(groups_.size()));
  for (size_t g = 0; g < groups_.size(); ++g) {
    const auto prefix = std::to_string(g) + ".";
    const auto n_params = get(prefix + "n_params").toInt();
    if (n_params != static_cast<int64_t>(groups_[g].params.size()))
      throw Error(source + ": optimizer group " + std::to_string(g) + " has " + std::to_string(n_params) +
                  " params in the file, " + std::to_string(groups_[g].params.size()) + " in the learner");
  }
  // Everything fits: now overwrite.
  for (size_t g = 0; g < groups_.size(); ++g) {
    const auto prefix = std::to_string(g) + ".";
    for (const auto& name : Hypers::names()) groups_[g].hypers.at(name) = get(prefix + name).toDouble();
    for (size_t i = 0; i < state_[g].size(); ++i) {
      const auto param_prefix = prefix + std::to_string(i) + ".";
      ParamState state;
      state.step = get(param_prefix + "step").toInt();
      for (const auto& entry : dict) {
        const auto& key = entry.key().toStringRef();
        if (key.rfind(param_prefix, 0) != 0 || key == param_prefix + "step") continue;
        const auto& param = groups_[g].params[i];
        state.buffers[key.substr(param_prefix.size())] = entry.value().toTensor().to(param.device());
      }
      state_[g][i] = std::move(state);
    }
  }
}

}  // namespace fastcpp
