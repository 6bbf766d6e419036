#pragma once
// MixedPrecision (order 10): fastai's event mapping for autocast training.
//   before_fit       fp16 needs CUDA (bf16 runs on CUDA and CPU); fp16 gets a GradScaler
//                    (learn.scaler, kept across fits so a checkpoint can restore it)
//   before_batch     autocast on           after_pred   pred cast to float
//   after_loss       autocast off (backward runs outside it)
//   before_backward  loss_grad *= scale
//   before_step      unscale the gradients in place; inf/nan: skip the step
//                    (CancelStep), so GradientClip (order 11) sees unscaled gradients
//                    and GradientAccumulation (order 6) unscales only at the real step;
//                    in a step recorded as a CUDA graph the verdict stays on the device
//                    and the optimizer skips there (callbacks/cuda_graphs.h)
//   after_step       update the scale (after a skipped step too)
// A loss that is itself nan/inf, or too many overflowing steps in a row, stops the
// fit with an error that shows the loss-scale history, instead of training on garbage:
// the nan/inf loss at the next batch, so that a callback may end the fit first at this
// one's end (lr_find, which restores the weights; TerminateOnNaN), as in fastai, where
// such a step is skipped like any overflow.
#include <torch/types.h>

#include <optional>
#include <string>

#include "learner/callback.h"
#include "optim/grad_scaler.h"

namespace fastcpp {

struct MixedPrecisionOptions {
  torch::ScalarType dtype = torch::kHalf;  // kHalf or kBFloat16
  GradScalerOptions scaler;
  int max_skipped_in_row = 50;
  std::optional<bool> loss_scale;  // default: for fp16 only (bf16 has fp32's range)
};

class MixedPrecision : public Callback {
 public:
  explicit MixedPrecision(MixedPrecisionOptions options = {});
  void before_fit() override;
  void before_batch() override;
  void after_pred() override;
  void after_loss() override;
  void before_backward() override;
  void before_step() override;
  void after_step() override;
  void after_batch() override { autocast(false); }
  void after_fit() override { autocast(false); }
  void after_fit_failed() override { autocast(false); }  // what follows the failed fit runs in full precision

  torch::ScalarType dtype() const { return options_.dtype; }

 private:
  void autocast(bool enabled);
  std::string scale_history() const;
  bool scaling() const { return options_.loss_scale.value_or(options_.dtype == torch::kHalf); }
  MixedPrecisionOptions options_;
  c10::DeviceType device_type_ = c10::DeviceType::CPU;
  int skipped_in_row_ = 0;
  std::string diverged_;  // the error for a nan/inf loss, thrown at the next batch
  bool finding_lr_ = false;  // lr_find's fit: a nan/inf loss is no error
};

// ChannelsLast (order -1): the model's 4-d weights and each input batch in NHWC
// memory layout, which convolution kernels (cuDNN with tensor cores, oneDNN) prefer.
class ChannelsLast : public Callback {
 public:
  ChannelsLast() { order = -1; }
  void before_fit() override;
  void before_batch() override;
};

}  // namespace fastcpp
