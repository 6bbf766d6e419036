#include "callbacks/tracker.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <sstream>
#include <utility>

#include "callbacks/lr_finder.h"
#include "core/error.h"
#include "core/spec_text.h"
#include "learner/learner.h"
#include "learner/recorder.h"

namespace fastcpp {
namespace {

bool contains(const std::string& text, const char* word) { return text.find(word) != std::string::npos; }

}  // namespace

TrackerCallback::TrackerCallback(TrackerOptions options)
    : options_(std::move(options)),
      lower_is_better_(options_.comp == Comp::infer ? contains(options_.monitor, "loss") || contains(options_.monitor, "error")
                                                    : options_.comp == Comp::lower) {
  order = 60;
}

void TrackerCallback::before_fit() {
  run = !learn().get_cb<LRFinder>();  // its epochs neither validate nor keep their weights
  trained_ = false;
  if (options_.reset_on_fit || !std::exchange(has_best_, true)) best_ = worst();
  wait_ = 0;
}

std::map<std::string, double> TrackerCallback::state() const {
  return {{"best", best_}, {"wait", static_cast<double>(wait_)}};
}

void TrackerCallback::load_state(const std::map<std::string, double>& state) {
  if (const auto best = state.find("best"); best != state.end()) best_ = best->second;
  if (const auto wait = state.find("wait"); wait != state.end()) {
    if (!(wait->second >= 0 && wait->second <= std::numeric_limits<int>::max()))  // NaN too
      throw Error("TrackerCallback: a saved 'wait' of " + std::to_string(wait->second) + " epochs");
    wait_ = static_cast<int>(wait->second);
  }
}

void TrackerCallback::before_train() {
  trained_ = true;
  // Here rather than in before_fit: a callback ordered after this one may add its column there.
  const auto names = learn().recorder->metric_names();  // epoch, train_loss, valid_loss, ..., time
  const auto it = std::find(names.begin() + 1, names.end() - 1, options_.monitor);
  if (it == names.end() - 1) {
    std::string valid;
    for (auto n = names.begin() + 1; n != names.end() - 1; ++n) valid += (valid.empty() ? "" : ", ") + *n;
    throw Error("cannot monitor '" + options_.monitor + "': the recorded values are " + valid);
  }
  column_ = static_cast<size_t>(it - names.begin() - 1);
}

void TrackerCallback::after_epoch() {
  new_best_ = false;
  measured_ = std::exchange(trained_, false);
  if (!measured_) return;
  current_ = learn().recorder->values.back().at(column_);
  new_best_ = lower_is_better_ ? current_ + options_.min_delta < best_ : current_ - options_.min_delta > best_;
  if (new_best_) best_ = current_;
  wait_ = new_best_ ? 0 : wait_ + 1;
}

SaveModel::SaveModel(SaveModelOptions options)
    : TrackerCallback({options.monitor, options.min_delta, options.comp, options.reset_on_fit}),
      save_options_(std::move(options)) {
  order = 61;
  if (save_options_.every_epoch < 0)
    throw Error("SaveModel: every_epoch must be >= 0 (0: save the best), got " +
                std::to_string(save_options_.every_epoch));
}

std::string SaveModel::path(const std::string& suffix) const {
  return (std::filesystem::path(save_options_.model_dir) / (save_options_.fname + suffix + ".pt")).string();
}

void SaveModel::after_epoch() {
  auto& l = learn();
  TrackerCallback::after_epoch();
  if (!measured_) return;
  if (save_options_.every_epoch > 0) {
    if (l.epoch % save_options_.every_epoch == 0)
      l.save(path(std::string("_").append(std::to_string(l.epoch))), save_options_.with_opt);
    return;
  }
  if (!new_best_) return;
  std::ostringstream msg;
  msg << "Better model found at epoch " << l.epoch << " with " << options_.monitor << " value: " << current_ << ".";
  l.logger(msg.str());
  l.save(path(), save_options_.with_opt);
}

void SaveModel::after_fit() {
  auto& l = learn();
  if (save_options_.at_end)
    l.save(path(), save_options_.with_opt);
  else if (!save_options_.every_epoch && best() != worst()) {  // this fit (or an earlier one it goes on from) saved it
    // The weights come back, not the epoch counters: the next fit's data order goes on from this one's.
    const auto epoch = l.epoch;
    const auto epochs_before = l.epochs_before;
    l.load(path(), save_options_.with_opt);
    l.epoch = epoch;
    l.epochs_before = epochs_before;
  }
}

EarlyStopping::EarlyStopping(EarlyStoppingOptions options)
    : TrackerCallback({options.monitor, options.min_delta, options.comp, options.reset_on_fit}),
      patience_(options.patience) {
  order = 63;
}

void EarlyStopping::after_epoch() {
  TrackerCallback::after_epoch();
  if (!measured_ || new_best_ || wait_ < patience_) return;
  auto& l = learn();
  // With reset_on_fit false the best may be an earlier fit's: no epoch of this fit to name.
  const int since = l.epoch - wait_;
  l.logger(since < 0 && !options_.reset_on_fit
               ? std::string("No improvement on an earlier fit's best: early stopping")
               : "No improvement since epoch " + std::to_string(std::max(since, 0)) + ": early stopping");
  throw CancelFitException();
}

ReduceLROnPlateau::ReduceLROnPlateau(ReduceLROnPlateauOptions options)
    : TrackerCallback({options.monitor, options.min_delta, options.comp, options.reset_on_fit}),
      reduce_options_(options) {
  order = 62;
  if (!(options.factor > 1))
    throw Error("ReduceLROnPlateau: factor must be > 1 (the lr is divided by it), got " +
                spec_text::number(options.factor));
  if (!(options.min_lr >= 0))
    throw Error("ReduceLROnPlateau: min_lr must be >= 0, got " + spec_text::number(options.min_lr));
}

void ReduceLROnPlateau::after_epoch() {
  TrackerCallback::after_epoch();
  if (!measured_ || new_best_ || wait_ < reduce_options_.patience) return;
  wait_ = 0;
  auto& l = learn();
  const double old_lr = l.opt->param_groups().back().hypers.lr;
  for (auto& group : l.opt->param_groups())
    group.hypers.lr = std::max(group.hypers.lr / reduce_options_.factor, reduce_options_.min_lr);
  const double new_lr = l.opt->param_groups().back().hypers.lr;
  if (new_lr < old_lr) {
    std::ostringstream msg;
    msg << "Epoch " << l.epoch << ": reducing lr to " << new_lr;
    l.logger(msg.str());
  }
}

}  // namespace fastcpp
