#pragma once
// TensorBoardLogger (order 60, after the Recorder): a fit as TensorBoard shows fastai's,
// written to an event file in `log_dir` (callbacks/tensorboard_events.h):
//   per training batch (step = train_iter after it)  train_loss (the smoothed loss), and
//                                                      each group's hyper-parameters: lr_0, mom_0, ...
//   per epoch                                          valid_loss, the metrics and the extra
//                                                      columns (those not n/a)
//   per epoch, with histograms                         weights/<parameter name>
// The batch values are written at the end of each epoch (or of a fit cancelled within
// one), once the Recorder has read the losses back from the device, so logging adds no
// synchronization per batch. Each fit gets an event file of its own; lr_find gets none.
//
//   learn.add_cb(TensorBoardLogger("runs/fashion"));   // then: tensorboard --logdir runs
#include <memory>
#include <string>
#include <vector>

#include "callbacks/tensorboard_events.h"
#include "learner/callback.h"

namespace fastcpp {

struct TensorBoardOptions {
  bool histograms = false;  // weight histograms each epoch
};

class TensorBoardLogger : public Callback {
 public:
  explicit TensorBoardLogger(std::string log_dir = "runs", TensorBoardOptions options = {});
  void before_fit() override;
  void after_batch() override;
  void after_epoch() override;
  void after_fit() override;
  void after_fit_failed() override { after_fit(); }  // the steps written so far
  // The event file of the last (or current) fit.
  const std::string& path() const { return path_; }

 private:
  void write_steps();  // the training steps kept since the last write
  std::string log_dir_;
  TensorBoardOptions options_;
  std::unique_ptr<EventFileWriter> events_;
  std::string path_;
  size_t losses_written_ = 0;
  std::vector<std::string> hyper_tags_;  // lr_0, mom_0, ..., made once per fit
  std::vector<int64_t> steps_;           // this epoch's training steps, with their hypers in hyper_tags_' order
  std::vector<std::vector<double>> hypers_;
};

}  // namespace fastcpp
