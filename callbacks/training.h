#pragma once
// Callbacks that change how a step is taken.
//
// GradientAccumulation (order 6): steps once every n_acc samples; until then the
//   batch ends after backward (CancelBatch skips step and zero_grad), so gradients
//   add up. The loss is scaled by bs/n_acc, so k batches of b equal one batch of k*b.
// GradientClip (order 11, after MixedPrecision): clips the global gradient norm.
// TerminateOnNaN (order -9): stops the fit when the training loss is nan or inf,
//   naming the batch.
// BnFreeze (order -5, after TrainEval): while training, the norm layers with running
//   statistics whose parameters are all frozen stay in eval mode, so that their statistics
//   stay the pretrained model's (fastai's, for a body frozen with train_bn = false).
#include <string>

#include "learner/callback.h"

namespace fastcpp {

class GradientAccumulation : public Callback {
 public:
  explicit GradientAccumulation(int64_t n_acc = 32);
  void before_fit() override { count_ = 0; }
  // Whether a batch of batch_size samples, now, ends with an optimizer step
  // (DistributedTrainer all-reduces only then: DDP's no_sync).
  bool will_step(int64_t batch_size) const { return count_ + batch_size >= n_acc_; }
  void after_loss() override;
  void before_step() override;

 private:
  int64_t n_acc_;
  int64_t count_ = 0;
};

class GradientClip : public Callback {
 public:
  explicit GradientClip(double max_norm = 1.0, double norm_type = 2.0);
  void before_step() override;

 private:
  double max_norm_, norm_type_;
};

class BnFreeze : public Callback {
 public:
  BnFreeze() { order = -5; }
  void before_train() override;
};

class TerminateOnNaN : public Callback {
 public:
  TerminateOnNaN();
  void after_batch() override;
  // Why the fit was stopped; empty if it was not.
  const std::string& reason() const { return reason_; }

 private:
  std::string reason_;
};

}  // namespace fastcpp
