#pragma once
// Trainable parameters changed between batches, as gradual unfreezing does (tests only):
// the model's first `first` parameters start the fit frozen (set after the fit's start,
// which applies the Learner's own freezing, and before to_parallel's and to_distributed's),
// are unfrozen before one training batch, and the last two are frozen before another; with
// `between_passes`, both changes are made after that batch's loss instead, between its forward
// and its backward (a parameter frozen there gets no gradient from that backward on one device).
#include "learner/callback.h"
#include "learner/learner.h"

namespace fastcpp::testing {

struct FreezeMidFit : Callback {
  struct At {
    int epoch;
    size_t iter;
  };
  explicit FreezeMidFit(At unfreeze_first = {1, 2}, At freeze_last = {2, 1}, size_t first = 2,
                        bool between_passes = false)
      : unfreeze_first(unfreeze_first), freeze_last(freeze_last), first(first), between_passes(between_passes) {
    // Its after_loss does nothing unless between_passes: to_graphs may record it then.
    capturable = !between_passes;
  }
  void before_fit() override {
    auto params = learn().model.module().parameters();
    for (size_t k = 0; k < first; ++k) params[k].set_requires_grad(false);
  }
  void before_batch() override {
    if (!between_passes) change();
  }
  void after_loss() override {
    if (between_passes) change();
  }
  void change() {
    if (!learn().training) return;
    auto params = learn().model.module().parameters();
    const auto now = [&](At at) { return learn().epoch == at.epoch && learn().iter == at.iter; };
    if (now(unfreeze_first))
      for (size_t k = 0; k < first; ++k) params[k].set_requires_grad(true);
    if (now(freeze_last))
      for (size_t k : {params.size() - 2, params.size() - 1}) params[k].set_requires_grad(false);
  }
  At unfreeze_first, freeze_last;
  size_t first;
  bool between_passes;
};

}  // namespace fastcpp::testing
