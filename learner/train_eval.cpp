#include "learner/train_eval.h"

#include "learner/learner.h"

namespace fastcpp {

void TrainEvalCallback::after_create() { learn().n_epoch = 1; }

void TrainEvalCallback::before_fit() {
  auto& l = learn();
  l.epoch = 0;
  l.train_iter = 0;
  l.pct_train = 0;
}

void TrainEvalCallback::before_train() {
  auto& l = learn();
  l.pct_train = static_cast<double>(l.epoch) / l.n_epoch;
  l.model.module().train();
  l.training = true;
}

void TrainEvalCallback::after_batch() {
  auto& l = learn();
  l.pct_train += 1.0 / (static_cast<double>(l.n_iter) * l.n_epoch);
  ++l.train_iter;
}

void TrainEvalCallback::before_validate() {
  auto& l = learn();
  l.model.module().eval();
  l.training = false;
}

}  // namespace fastcpp
