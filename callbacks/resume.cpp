#include "callbacks/resume.h"

#include <filesystem>

#include "callbacks/lr_finder.h"
#include "learner/learner.h"

namespace fastcpp {

ResumeFromCheckpoint::ResumeFromCheckpoint(std::string path) : path_(std::move(path)) { order = 61; }

void ResumeFromCheckpoint::before_fit() {
  auto& l = learn();
  first_epoch_ = 0;
  run = !l.get_cb<LRFinder>();  // lr_find's epochs are neither resumed nor saved
  if (!run || !std::filesystem::exists(path_)) return;
  l.load(path_);
  first_epoch_ = l.epoch + 1;  // the checkpoint holds the last completed epoch
  l.epoch = 0;
  l.logger("resuming from '" + path_ + "' at epoch " + std::to_string(first_epoch_));
}

void ResumeFromCheckpoint::before_epoch() {
  if (learn().epoch < first_epoch_) throw CancelEpochException();
}

void ResumeFromCheckpoint::after_epoch() {
  if (learn().epoch >= first_epoch_) learn().save(path_);
}

void ResumeFromCheckpoint::after_fit() {
  auto& l = learn();
  if (l.epoch >= l.n_epoch && l.rank == 0) std::filesystem::remove(path_);  // all epochs done: nothing to resume
}

}  // namespace fastcpp
