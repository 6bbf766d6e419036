#pragma once
// ProgressCallback (order 60, added by default): the epoch table, and on a terminal a
// live bar for the current phase with it/s, elapsed<remaining and the smoothed loss.
// When stdout is not a terminal (CI logs, files) only the table's lines are printed,
// one per epoch. Rows go through learn.logger; nothing is printed while
// learn.logging is off (lr_find).
//
// ShowGraph (order 65): fastai's live loss graph, as a PNG rewritten after every epoch
// (the smoothed training loss per batch and the validation loss per epoch), so it can
// be watched in an image viewer while the fit runs.
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "learner/callback.h"

namespace fastcpp {

class ProgressCallback : public Callback {
 public:
  // live: draw the bar; default: whether stdout is a terminal.
  explicit ProgressCallback(bool live);
  ProgressCallback();

  void before_fit() override;
  void before_train() override { start_phase(); }
  void before_validate() override { start_phase(); }
  void after_batch() override;
  void after_train() override { end_phase(); }
  void after_validate() override { end_phase(); }
  void after_epoch() override;
  void after_fit() override;
  void after_fit_failed() override { after_fit(); }  // the error starts on a clean line

 private:
  void start_phase();
  void end_phase();
  void draw(bool force);

  bool live_;
  // The Learner's logger while this one, which clears the bar before each line, stands in
  // for it: a line logged mid-phase (TerminateOnNaN's, an epoch cancelled) starts on a clean line.
  std::optional<std::function<void(const std::string&)>> wrapped_logger_;
  std::chrono::steady_clock::time_point phase_start_, last_draw_;
  std::shared_ptr<bool> drawn_ = std::make_shared<bool>(false);  // shared with the logger that clears the bar
};

class ShowGraph : public Callback {
 public:
  explicit ShowGraph(std::string path = "loss.png") : path_(std::move(path)) { order = 65; }
  void before_fit() override;  // sits out lr_find, as fastai's
  void after_epoch() override;

 private:
  std::string path_;
};

}  // namespace fastcpp
