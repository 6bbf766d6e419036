#pragma once
// Optimizer: parameter groups, each with its own Hypers, and per-parameter state.
// Subclasses (SGD, Adam in optimizers.h) write only the per-parameter update.
// All params stay in the optimizer when frozen: a param whose grad is undefined
// (requires_grad off, or unused) is skipped. zero_grad drops the gradients (PyTorch 2's
// default) where fastai zeroes them, so a param unused in one batch (after having a
// gradient) is not stepped there, where fastai's would still move by its momentum.
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

struct DeviceHypers;

struct ParamState {
  std::map<std::string, torch::Tensor> buffers;  // e.g. grad_avg, sqr_avg
  int64_t step = 0;
  // Stepped on the device, whose count is the group's: `step` is stale until it goes back.
  bool counted_on_device = false;
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

  // The class's name ("Adam"; a wrapper's names what it wraps: "Lookahead<RAdam>"), for
  // messages and to tell optimizer states apart.
  virtual std::string name() const;

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

  // ---- the step on the device (optim/device_step.h), which a CUDA graph can record
  // On: each group's hyper-parameters and step count live on its params' device, the
  // state buffers exist before the first step, and a step reads nothing back to the host.
  // Off again: the step counts come back to the host. Throws for an optimizer without it.
  void set_device_step(bool on);
  bool device_step() const { return device_step_; }
  // SGD and Adam (and their options); not RAdam, QHAdam, LARC/LARS, LAMB or Lookahead.
  bool has_device_step() const { return !device_buffers().empty(); }
  // Copies the hyper-parameters the host set to the device without waiting. step() does
  // it itself, except while a CUDA graph records it: then call it before each replay.
  void refresh_device_hypers();
  // The next step is skipped wherever found_inf, GradScaler's verdict, is set (on the device
  // without a read back; a step on the host reads it).
  void skip_next_step_if(torch::Tensor found_inf) { found_inf_ = std::move(found_inf); }

  // fastai's decouple_wd. True (the default): weight decay shrinks the weights, p *= 1 - lr*wd.
  // False: L2 regularization instead, grad += wd*p before the update (in place on the
  // gradients, as fastai's l2_reg), which the update's averages then carry.
  void set_decouple_wd(bool decouple) { decouple_wd_ = decouple; }
  bool decouple_wd() const { return decouple_wd_; }
  // Changes whenever the state tensors are replaced (clear_state, load_state_dict,
  // set_device_step): a recorded CUDA graph that holds the old ones is then stale.
  uint64_t state_generation() const { return state_generation_; }

 protected:
  friend class Lookahead;  // runs the update of the optimizer it wraps
  virtual void update(torch::Tensor& param, const torch::Tensor& grad, ParamState& state,
                      const Hypers& hypers, bool do_wd) = 0;
  // The same update for a whole group in a few kernel launches, where the optimizer can
  // (SGD and Adam: ATen's fused kernels); false leaves it to update().
  virtual bool update_group(GroupTensors& group, const Hypers& hypers) { return false; }
  // The state buffers the device step keeps per param (none: it has no device step).
  virtual std::vector<const char*> device_buffers() const { return {}; }
  virtual void update_on_device(GroupTensors& group, DeviceHypers& hypers, const torch::Tensor& found_inf) {}

 private:
  void step_on_device(size_t g, GroupTensors& group, const torch::Tensor& found_inf);
  // Each group's step count on the device, read back (-1: none there).
  std::vector<int64_t> device_step_counts() const;
  // The device's counts and buffers made again from the host's state (after it was replaced).
  void remake_device_state();

  std::vector<ParamGroup> groups_;
  std::vector<std::vector<ParamState>> state_;  // aligned with groups_[g].params
  bool device_step_ = false;
  uint64_t state_generation_ = 0;
  std::vector<std::shared_ptr<DeviceHypers>> device_hypers_;  // per group, while device_step_
  torch::Tensor found_inf_;
  bool decouple_wd_ = true;
};

// An empty dictionary with string keys and values of any type.
c10::impl::GenericDict string_dict();

using OptFunc = std::function<std::unique_ptr<Optimizer>(std::vector<ParamGroup>)>;

}  // namespace fastcpp
