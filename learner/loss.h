#pragma once
// Loss: a loss function plus the activation that turns raw model outputs into
// predictions (softmax for cross-entropy), as fastai's loss functions carry, and
// optionally its unreduced form (one loss per item, for interpretation). An activation
// with a name ("softmax") can travel in an exported model (learner/export.h).
#include <torch/types.h>

#include <functional>
#include <memory>
#include <string>

#include "core/device_check.h"

namespace fastcpp {

class Loss {
 public:
  using Fn = std::function<torch::Tensor(const torch::Tensor& pred, const torch::Tensor& target)>;
  using Activation = std::function<torch::Tensor(const torch::Tensor&)>;

  Loss() = default;
  template <class F, class = std::enable_if_t<std::is_constructible_v<Fn, F>>>
  Loss(F fn, Activation activation = nullptr, Fn per_item = nullptr,  // NOLINT: a lambda is a loss
       std::string activation_name = {})
      : fn_(std::move(fn)),
        activation_(std::move(activation)),
        per_item_(std::move(per_item)),
        activation_name_(std::move(activation_name)) {}

  torch::Tensor operator()(const torch::Tensor& pred, const torch::Tensor& target) const { return fn_(pred, target); }
  // Each item's loss, [batch]: the unreduced form when given (averaged over each item's
  // positions where it keeps them: a mask's pixels), else the loss of each item as a batch
  // of one (for losses that average over the batch). MixUp mixes these.
  torch::Tensor per_item(const torch::Tensor& pred, const torch::Tensor& target) const;
  // Whether it has its unreduced form (else per_item calls it once per item).
  bool has_per_item() const { return static_cast<bool>(per_item_); }
  torch::Tensor activation(const torch::Tensor& pred) const { return activation_ ? activation_(pred) : pred; }
  bool has_activation() const { return static_cast<bool>(activation_); }
  const std::string& activation_name() const { return activation_name_; }
  explicit operator bool() const { return static_cast<bool>(fn_); }

  // The checks of its input made on the device without waiting (CrossEntropyLoss's
  // labels on a GPU); a loss that wraps another shares them.
  const std::shared_ptr<DeviceCheck>& checks() const { return checks_; }
  Loss& share_checks(std::shared_ptr<DeviceCheck> checks) {
    checks_ = std::move(checks);
    return *this;
  }
  // Waits for those checks and throws for the first that failed: the Learner calls it at
  // the end of each phase, where it waits for the device anyway.
  void finish_checks() const {
    if (checks_) checks_->finish();
  }

 private:
  Fn fn_;
  Activation activation_;
  Fn per_item_;
  std::string activation_name_;
  std::shared_ptr<DeviceCheck> checks_;
};

struct CrossEntropyOptions {
  double label_smoothing = 0.0;
};

// Mean cross-entropy over class indices. Checks the targets: integer type, and every
// label in [0, n_classes): an error naming the label and its position, where CUDA
// would raise a device-side assert. On a GPU the range check does not stop the device:
// the labels are clamped for the kernel and the check is read a few batches later (by
// the end of the phase at the latest). Activation: softmax.
Loss CrossEntropyLoss(CrossEntropyOptions options = {});
// Several classes an item, as fastai's BCEWithLogitsLossFlat: binary cross-entropy of raw
// outputs [batch, classes] against one-hot float targets of the same shape, the mean
// over both. Activation: sigmoid.
Loss BCEWithLogitsLoss();
Loss MSELoss();

}  // namespace fastcpp
