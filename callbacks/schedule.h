#pragma once
// ParamScheduler (order 60): sets optimizer hyper-parameters from schedules of the
// training position (learn.pct_train) before each training batch, and keeps the
// values it set in `hps`. A hyper-parameter gets one schedule for all parameter
// groups, or one per group (discriminative lrs).
#include <map>
#include <string>
#include <vector>

#include "learner/callback.h"
#include "optim/schedules.h"

namespace fastcpp {

class ParamScheduler : public Callback {
 public:
  using Scheds = std::map<std::string, std::vector<Schedule>>;

  explicit ParamScheduler(Scheds scheds);
  void before_fit() override;
  void before_batch() override;
  void after_batch() override;

  // Values of the last parameter group, one per training batch.
  std::map<std::string, std::vector<double>> hps;

 protected:
  void set_hypers(double pos);

 private:
  Scheds scheds_;
};

}  // namespace fastcpp
