#pragma once
// GradScaler: dynamic loss scaling for fp16 training, with PyTorch's semantics and
// defaults. Each step: scale the loss; unscale the gradients in place (once) and
// check them for inf/nan; skip the step if any; update the scale:
//   found inf/nan: scale *= backoff_factor, growth count reset
//   otherwise:     after growth_interval clean steps in a row, scale *= growth_factor
// As in torch.amp.GradScaler, the scale and growth tracker are one-element tensors on
// the gradients' device, and ATen's amp kernels do the work there on every device type
// (_amp_foreach_non_finite_check_and_unscale_, _amp_update_scale_): the step's only
// host synchronization is reading found_inf, which deciding to skip the step needs.
//
// Distributed: found_inf must be the same on every rank or ranks would disagree on
// skipping. Gradients are all-reduced before the step, so an inf on any rank is an
// inf on all of them after averaging, and every rank reaches the same verdict.
#include <torch/types.h>

#include <ATen/core/Dict.h>
#include <ATen/core/ivalue.h>

#include <optional>
#include <string>
#include <vector>

namespace fastcpp {

class Optimizer;

struct GradScalerOptions {
  double init_scale = 65536.0;
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
};

class GradScaler {
 public:
  explicit GradScaler(GradScalerOptions options = {});

  // loss times the scale (which moves to the loss's device the first time).
  torch::Tensor scale(const torch::Tensor& loss);
  // Divides every gradient by the scale, once per step; true if any was inf/nan.
  bool unscale_(Optimizer& opt);
  // Divides every gradient by the scale and gives the verdict as a device tensor (float
  // [1], 1 if any was inf/nan) without reading it: for a step recorded into a CUDA graph,
  // which then skips on the device (Optimizer::skip_next_step_if).
  torch::Tensor unscale_on_device(Optimizer& opt);
  // Unscales if not done yet, then steps unless a gradient was inf/nan. True if it stepped.
  bool step(Optimizer& opt);
  // Updates the scale from this step's verdict (call after every unscaled step).
  void update();
  // Drops the verdict of a step that was unscaled but never updated (its fit failed in
  // between): the next step unscales its own gradients. The scale is kept.
  void forget_step() {
    unscaled_ = false;
    skip_step_.reset();
  }

  // Whether this step's gradients were unscaled (and update() is due).
  bool unscaled() const { return unscaled_; }

  double get_scale() const { return scale_.item<double>(); }
  int64_t growth_tracker() const { return growth_tracker_.item<int64_t>(); }
  // The scale after each update of this scaler, for diagnostics (read from the device);
  // updates recorded into a CUDA graph are not in it.
  std::vector<double> history() const;

  c10::impl::GenericDict state_dict() const;
  // A saved state read and checked (parse) apart from applying it (restore), so that a
  // checkpoint can check all its parts before it changes any; errors name `source`.
  struct State {
    double scale = 0;
    int64_t growth_tracker = 0;
    GradScalerOptions options;  // init_scale unused
  };
  static State parse(const c10::impl::GenericDict& state, const std::string& source);
  void restore(const State& state);
  void load_state_dict(const c10::impl::GenericDict& state, const std::string& source) {
    restore(parse(state, source));
  }

  // The scale and growth tracker moved to `device` (where the gradients and loss are);
  // done on first use if not before.
  void place_on(const torch::Device& device);
  // Changes when the scale's tensors are replaced (place_on a new device): a recorded
  // CUDA graph that holds the old ones is then stale.
  uint64_t generation() const { return generation_; }

 private:
  void unscale_grads(Optimizer& opt);  // sets found_inf_
  GradScalerOptions options_;
  torch::Tensor scale_;           // float32, shape [1]
  torch::Tensor growth_tracker_;  // int32, shape [1]
  torch::Tensor found_inf_;       // float32 [1] on scale_'s device: this step's verdict
  bool unscaled_ = false;
  std::optional<bool> skip_step_;  // found_inf_ read back once, for a second unscale_ call
  torch::Tensor history_;         // float32 on scale_'s device, the first history_size_ used
  int64_t history_size_ = 0;
  uint64_t generation_ = 0;
};

}  // namespace fastcpp
