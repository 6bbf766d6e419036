#pragma once
// Optimizer: parameter groups, each with its own Hypers, and per-parameter state.
// Subclasses (SGD, Adam in optimizers.h) write only the per-parameter update.
// All params stay in the optimizer when frozen: a param whose grad is undefined
// (requires_grad off, or unused) is skipped, as in fastai.
#include <torch/types.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Dict.h>
#include <ATen/core/ivalue.h>

#include "optim/hypers.h"

namespace fastcpp {

struct ParamGroup {
  std::vector<torch::Tensor> params;
  // do_wd[i] false: params[i] gets no weight decay (norm layers and biases by default).
  std::vector<bool> do_wd;
  Hypers hypers;
};

struct ParamState {
  std::map<std::string, torch::Tensor> buffers;  // e.g. grad_avg, sqr_avg
  int64_t step = 0;
};

// The state buffer `name`, zeros shaped and laid out as `like` on first use.
torch::Tensor& state_buffer(ParamState& state, const char* name, const torch::Tensor& like);

// The params of one group that have gradients, for an update of all of them at once.
struct GroupTensors {
  std::vector<torch::Tensor> params, grads;
  std::vector<ParamState*> states;
  std::vector<bool> do_wd;
};

class Optimizer {
 public:
  explicit Optimizer(std::vector<ParamGroup> groups);
  virtual ~Optimizer() = default;

  // One update of every param that has a gradient, without autograd recording.
  void step();
  // Drops the gradients (set to none, as PyTorch 2 does by default).
  void zero_grad();
  // Forgets the per-parameter state (momentum buffers, step counts).
  void clear_state();

  std::vector<ParamGroup>& param_groups() { return groups_; }
  const std::vector<ParamGroup>& param_groups() const { return groups_; }
  size_t n_groups() const { return groups_.size(); }

  // Sets a hyper-parameter on every group, or one value per group.
  void set_hyper(const std::string& name, double value);
  void set_hyper(const std::string& name, const std::vector<double>& per_group);
  std::vector<double> hyper(const std::string& name) const;

  // State as a flat dictionary ("<group>.<hyper>", "<group>.<param>.<buffer>",
  // "<group>.<param>.step") on the CPU, for checkpoints; load checks it fits these groups.
  c10::impl::GenericDict state_dict() const;
  void load_state_dict(const c10::impl::GenericDict& state, const std::string& source);

 protected:
  friend class Lookahead;  // runs the update of the optimizer it wraps
  virtual void update(torch::Tensor& param, const torch::Tensor& grad, ParamState& state,
                      const Hypers& hypers, bool do_wd) = 0;
  // The same update for a whole group in a few kernel launches, where the optimizer can
  // (SGD and Adam: ATen's fused kernels); false leaves it to update().
  virtual bool update_group(GroupTensors& group, const Hypers& hypers) { return false; }

 private:
  std::vector<ParamGroup> groups_;
  std::vector<std::vector<ParamState>> state_;  // aligned with groups_[g].params
};

// An empty dictionary with string keys and values of any type.
c10::impl::GenericDict string_dict();

using OptFunc = std::function<std::unique_ptr<Optimizer>(std::vector<ParamGroup>)>;

}  // namespace fastcpp
