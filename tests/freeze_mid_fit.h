#pragma once
// Trainable parameters changed between batches, as gradual unfreezing does (tests only):
// the model's first two parameters start the fit frozen (set after the fit's start, which
// applies the Learner's own freezing, and before to_parallel's and to_distributed's), are
// unfrozen before batch 2 of epoch 1, and the last two are frozen before batch 1 of epoch 2.
#include "learner/callback.h"
#include "learner/learner.h"

namespace fastcpp::testing {

struct FreezeMidFit : Callback {
  void before_fit() override {
    for (size_t k : {0, 1}) learn().model.module().parameters()[k].set_requires_grad(false);
  }
  void before_batch() override {
    if (!learn().training) return;
    auto params = learn().model.module().parameters();
    if (learn().epoch == 1 && learn().iter == 2)
      for (size_t k : {0, 1}) params[k].set_requires_grad(true);
    if (learn().epoch == 2 && learn().iter == 1)
      for (size_t k : {params.size() - 2, params.size() - 1}) params[k].set_requires_grad(false);
  }
};

}  // namespace fastcpp::testing
