#include "callbacks/tensorboard.h"

#include <torch/torch.h>

#include <cmath>

#include "callbacks/lr_finder.h"
#include "learner/learner.h"
#include "learner/recorder.h"
#include "optim/hypers.h"

namespace fastcpp {

TensorBoardLogger::TensorBoardLogger(std::string log_dir, TensorBoardOptions options)
    : log_dir_(std::move(log_dir)), options_(options) {
  order = 60;
}

void TensorBoardLogger::before_fit() {
  events_.reset();  // a failed fit's writer (it had no after_fit)
  // One writer for a distributed run; lr_find's exploding losses are not a run (fastai's skips it too).
  if (learn().rank != 0 || learn().get_cb<LRFinder>()) return;
  events_ = std::make_unique<EventFileWriter>(log_dir_);
  path_ = events_->path();
  losses_written_ = learn().recorder->losses.size();
  hyper_tags_.clear();
  for (size_t g = 0; g < learn().opt->n_groups(); ++g)
    for (const auto& name : Hypers::names()) hyper_tags_.push_back(name + "_" + std::to_string(g));
  steps_.clear();
  hypers_.clear();
}

void TensorBoardLogger::after_batch() {
  if (!events_ || !learn().training) return;
  steps_.push_back(learn().train_iter);
  auto& values = hypers_.emplace_back();
  values.reserve(hyper_tags_.size());
  for (const auto& group : learn().opt->param_groups())
    for (const auto& name : Hypers::names()) values.push_back(group.hypers.at(name));
}

void TensorBoardLogger::write_steps() {
  const auto& losses = learn().recorder->losses;  // read back by the Recorder (order 50) at an epoch's or fit's end
  for (size_t i = 0; i < steps_.size(); ++i) {
    if (losses_written_ + i < losses.size()) events_->scalar("train_loss", steps_[i], losses[losses_written_ + i]);
    for (size_t k = 0; k < hyper_tags_.size(); ++k) events_->scalar(hyper_tags_[k], steps_[i], hypers_[i][k]);
  }
  losses_written_ = losses.size();
  steps_.clear();
  hypers_.clear();
}

void TensorBoardLogger::after_epoch() {
  if (!events_) return;
  auto& l = learn();
  write_steps();
  if (!l.recorder->values.empty()) {
    const auto names = l.recorder->metric_names();  // epoch, train_loss, valid_loss, ..., time
    const auto& row = l.recorder->values.back();     // train_loss, valid_loss, ...
    for (size_t j = 1; j < row.size() && j + 1 < names.size(); ++j)
      if (!std::isnan(row[j])) events_->scalar(names[j + 1], l.train_iter, row[j]);
  }
  if (options_.histograms)
    for (const auto& param : l.model.module().named_parameters()) events_->histogram("weights/" + param.key(), l.train_iter, param.value());
  events_->flush();
}

void TensorBoardLogger::after_fit() {
  if (events_) write_steps();  // the steps of an epoch a cancelled fit left unfinished (TerminateOnNaN's)
  events_.reset();
}

}  // namespace fastcpp
