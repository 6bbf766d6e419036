#pragma once
// ResumeFromCheckpoint (order 61): makes a fit restartable. After every epoch it saves
// the learner (model, optimizer, scaler, epoch) to `path` (atomically; rank 0 only
// when distributed); at the start of a fit it loads `path` if it exists and skips the
// epochs already done, so a restarted process (fastcpp-launch --max-restarts,
// torchrun's elastic restarts) ends with the weights an uninterrupted run would have:
// the schedule, the data order and the optimizer state all depend only on the epoch.
// It sits out lr_find (which neither loads nor saves the checkpoint).
#include <string>

#include "learner/callback.h"

namespace fastcpp {

class ResumeFromCheckpoint : public Callback {
 public:
  explicit ResumeFromCheckpoint(std::string path);
  void before_fit() override;
  void before_epoch() override;
  void after_epoch() override;
  void after_fit() override;
  int resumed_from() const { return first_epoch_; }  // 0 when nothing was resumed

 private:
  std::string path_;
  int first_epoch_ = 0;
};

}  // namespace fastcpp
