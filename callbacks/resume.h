#pragma once
// ResumeFromCheckpoint (order 64, after the trackers): makes a program's fits restartable.
// After every epoch it saves the learner (model, optimizer, scaler, epoch) to `path`
// (atomically; rank 0 only when distributed) with the fit's number (1 for the first fit it
// runs in), a seed, the Recorder's smoothed loss and the trackers' state (the best value
// of SaveModel, EarlyStopping and ReduceLROnPlateau, and the epochs since it), restored when
// the checkpoint is loaded. Not kept: GradientAccumulation's gradients pending at an epoch's end (where
// the epoch's items are not a multiple of its count, the resumed steps fall elsewhere).
// At the start of a fit it reads `path`: a checkpoint of this fit is loaded and its epochs
// are skipped; one of a later fit (fine_tune restarted in its second phase) skips this
// whole fit, which the later one replaces; none, or one of an earlier fit, trains from
// the start. So a restarted process (fastcpp-launch --max-restarts, torchrun's elastic
// restarts) ends with the weights an uninterrupted run would have: the schedule and the
// data order depend only on the epoch (and the epochs of the fits before, which the
// program calls again), the optimizer state is in the checkpoint, and each
// trained epoch reseeds the global generators (dropout, MixUp) from (seed, fit, epoch,
// rank). The seed is drawn from the global generator at the first fit, rank 0's used by
// every rank (Learner::from_rank_0) and saved.
// A checkpoint of this fit with another number of epochs is an error (the program
// changed: its schedule would jump); so is, in a distributed run, a rank that finds
// another checkpoint than rank 0 (nodes without a shared file system).
// It sits out lr_find (which neither counts as a fit nor loads or saves the checkpoint).
#include <cstdint>
#include <string>

#include "learner/callback.h"

namespace fastcpp {

class ResumeFromCheckpoint : public Callback {
 public:
  explicit ResumeFromCheckpoint(std::string path);
  void before_fit() override;
  void before_epoch() override;
  void after_epoch() override;
  void after_cancel_fit() override { stopped_ = true; }
  void after_fit() override;
  // The first epoch this fit trained: 0 when nothing was resumed, n_epoch for a skipped fit.
  int resumed_from() const { return first_epoch_; }

 private:
  std::string path_;
  int fit_ = 0;  // fits run so far, this one included
  int first_epoch_ = 0;
  bool skipped_ = false;  // a later fit's checkpoint stands for this one
  bool stopped_ = false;  // cancelled (EarlyStopping): done, as a fit that ran its epochs
  int last_epoch_ = -1;   // the last epoch that ended (learn.epoch may be a loaded file's by after_fit)
  bool seeded_ = false;
  uint64_t seed_ = 0;
};

}  // namespace fastcpp
