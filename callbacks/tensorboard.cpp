#include "callbacks/tensorboard.h"

#include <torch/torch.h>

#include <cmath>

#include "learner/hypers.h"
#include "learner/learner.h"
#include "learner/recorder.h"

namespace fastcpp {

TensorBoardLogger::TensorBoardLogger(std::string log_dir, TensorBoardOptions options)
    : log_dir_(std::move(log_dir)), options_(options) {
  order = 60;
}

void TensorBoardLogger::before_fit() {
  if (learn().rank != 0) return;  // one writer for a distributed run
  events_ = std::make_unique<EventFileWriter>(log_dir_);
  path_ = events_->path();
  losses_written_ = learn().recorder->losses.size();
  steps_.clear();
  hypers_.clear();
}

void TensorBoardLogger::after_batch() {
  if (!events_ || !learn().training) return;
  steps_.push_back(learn().train_iter);
  std::vector<std::pair<std::string, double>> values;
  const auto& groups = learn().opt->param_groups();
  for (size_t g = 0; g < groups.size(); ++g)
    for (const auto& name : Hypers::names()) values.emplace_back(name + "_" + std::to_string(g), groups[g].hypers.at(name));
  hypers_.push_back(std::move(values));
}

void TensorBoardLogger::after_epoch() {
  if (!events_) return;
  auto& l = learn();
  const auto& losses = l.recorder->losses;  // read back by the Recorder (order 50) at this epoch's end
  for (size_t i = 0; i < steps_.size(); ++i) {
    if (losses_written_ + i < losses.size()) events_->scalar("train_loss", steps_[i], losses[losses_written_ + i]);
    for (const auto& [tag, value] : hypers_[i]) events_->scalar(tag, steps_[i], value);
  }
  losses_written_ = losses.size();
  steps_.clear();
  hypers_.clear();
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

void TensorBoardLogger::after_fit() { events_.reset(); }

}  // namespace fastcpp
