#pragma once
// GradScaler: dynamic loss scaling for fp16 training, with PyTorch's semantics and
// defaults. Each step: scale the loss; unscale the gradients in place (once) and
// check them for inf/nan; skip the step if any; update the scale:
//   found inf/nan: scale *= backoff_factor, growth count reset
//   otherwise:     after growth_interval clean steps in a row, scale *= growth_factor
// On CUDA the ATen amp kernels do the unscale/check and the update on the device;
// elsewhere plain tensor ops do the same (bit-equal to the fixture of PyTorch's logic).
//
// Distributed: found_inf must be the same on every rank or ranks would disagree on
// skipping. Gradients are all-reduced before the step, so an inf on any rank is an
// inf on all of them after averaging, and every rank reaches the same verdict.
#include <torch/types.h>

#include <ATen/core/Dict.h>
#include <ATen/core/ivalue.h>

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

  torch::Tensor scale(const torch::Tensor& loss) const;
  // Divides every gradient by the scale, once per step; true if any was inf/nan.
  bool unscale_(Optimizer& opt);
  // Unscales if not done yet, then steps unless a gradient was inf/nan. True if it stepped.
  bool step(Optimizer& opt);
  // Updates the scale from this step's verdict (call after every unscaled step).
  void update();

  double get_scale() const { return scale_; }
  int64_t growth_tracker() const { return growth_tracker_; }
  // The scale after each update of this scaler, for diagnostics.
  const std::vector<double>& history() const { return history_; }

  c10::impl::GenericDict state_dict() const;
  void load_state_dict(const c10::impl::GenericDict& state);

 private:
  GradScalerOptions options_;
  double scale_;
  int64_t growth_tracker_ = 0;
  bool unscaled_ = false;
  bool found_inf_ = false;
  std::vector<double> history_;
};

}  // namespace fastcpp
