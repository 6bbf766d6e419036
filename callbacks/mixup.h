#pragma once
// MixUp and CutMix (fastai's): each training batch blended with a shuffled copy of
// itself. Validation batches are left alone.
//   MixUp   x = lerp(x_shuffled, x, lam), one lam per item drawn from Beta(alpha, alpha)
//           and taken as max(lam, 1 - lam)
//   CutMix  a box of the shuffled images pasted into the batch (its size from one
//           Beta(alpha, alpha) draw, its centre uniform); lam = the share of pixels kept
// With class-index targets the loss becomes, per item, lerp(loss(pred, y_shuffled),
// loss(pred, y), lam), averaged; other targets are blended as x is. The draws come from
// libtorch's default generator in fastai's order, so torch::manual_seed(s) gives the
// batches fastai gives after torch.manual_seed(s) (tested).
#include <memory>
#include <optional>

#include "learner/callback.h"
#include "learner/loss.h"

namespace fastcpp {

class MixHandler : public Callback {
 public:
  explicit MixHandler(double alpha);
  // The Learner's loss function is swapped for the mixing one while training, and put back
  // after it, however training ends (a cancelled epoch skips after_train).
  void before_train() override;
  void after_train() override;
  void after_cancel_train() override { after_train(); }
  void after_cancel_epoch() override { after_train(); }
  void after_cancel_fit() override { after_train(); }

  // This batch's weight of the original items: [bs] (MixUp) or [1] (CutMix).
  const torch::Tensor& lam() const { return batch_->lam; }

 protected:
  // What the mixing loss reads of the batch: shared with it, so that the loss never reads a
  // callback that is gone.
  struct MixedBatch {
    torch::Tensor lam;
    torch::Tensor shuffled_y;  // the shuffled class indices; undefined when the targets were blended
  };
  // n draws of Beta(alpha, alpha), as torch.distributions.Beta samples them.
  torch::Tensor sample_beta(int64_t n) const;
  // The shuffled targets kept for the loss (class indices), or the targets blended.
  void mix_targets(const torch::Tensor& shuffle);

  std::shared_ptr<MixedBatch> batch_ = std::make_shared<MixedBatch>();

 private:
  double alpha_;
  std::optional<Loss> plain_loss_;
  bool said_per_item_ = false;
};

class MixUp : public MixHandler {
 public:
  explicit MixUp(double alpha = 0.4) : MixHandler(alpha) {}
  void before_batch() override;
};

class CutMix : public MixHandler {
 public:
  explicit CutMix(double alpha = 1.0) : MixHandler(alpha) {}
  void before_batch() override;
};

}  // namespace fastcpp
