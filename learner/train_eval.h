#pragma once
// TrainEvalCallback (order -10, always present): switches the model between train
// and eval mode and keeps the loop's counters, as fastai's:
//   pct_train = epoch/n_epoch at before_train, += 1/(n_iter*n_epoch) after each
//   training batch (first batch at 0, last at 1 - 1/N); train_iter counts them.
#include "learner/callback.h"

namespace fastcpp {

class TrainEvalCallback : public Callback {
 public:
  TrainEvalCallback() {
    order = -10;
    run_valid = false;
  }
  void after_create() override;
  void before_fit() override;
  void before_train() override;
  void after_batch() override;
  void before_validate() override;
};

}  // namespace fastcpp
