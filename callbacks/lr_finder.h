#pragma once
// LRFinder: the learning-rate range test behind Learner::lr_find. The lr grows
// exponentially from start_lr to end_lr over num_it training batches; the run stops
// early once the smoothed loss exceeds 4x the best seen (stop_div); the model and
// optimizer are restored to their state before the test.
#include <vector>

#include "callbacks/schedule.h"

namespace fastcpp {

struct LrFindResult;

class LRFinder : public ParamScheduler {
 public:
  LRFinder(double start_lr = 1e-7, double end_lr = 10, int num_it = 100, bool stop_div = true);
  void before_fit() override;
  void before_batch() override;
  void after_batch() override;
  void before_validate() override;
  void after_fit() override;
  void after_fit_failed() override { after_fit(); }  // the weights as they were before lr_find

 private:
  int num_it_;
  bool stop_div_;
  double best_loss_ = 0;
  std::vector<char> saved_state_;
};

// fastai's suggestions from the recorded (lr, smoothed loss) pairs: valley (the
// default), minimum/10, steepest descent and slide; skips the first num_it/10 and the
// last 5, and everything from the first nan on. Slide is NaN from 15 points or fewer.
LrFindResult suggest_lrs(const std::vector<double>& lrs, const std::vector<double>& losses, int num_it);

}  // namespace fastcpp
