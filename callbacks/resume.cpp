#include "callbacks/resume.h"

#include <torch/torch.h>

#include <filesystem>
#include <limits>

#include "callbacks/lr_finder.h"
#include "data/random.h"
#include "formats/file_io.h"
#include "learner/checkpoint.h"
#include "learner/learner.h"

namespace fastcpp {

ResumeFromCheckpoint::ResumeFromCheckpoint(std::string path) : path_(std::move(path)) { order = 61; }

void ResumeFromCheckpoint::before_fit() {
  auto& l = learn();
  first_epoch_ = 0;
  skipped_ = stopped_ = false;
  run = !l.get_cb<LRFinder>();  // lr_find's epochs are neither resumed nor saved
  if (!run) return;
  ++fit_;
  const auto source = "checkpoint '" + path_ + "'";
  const bool saved = std::filesystem::exists(path_);
  const auto bytes = saved ? read_file(path_) : std::vector<char>{};
  const auto extras = saved ? checkpoint::extras_of(bytes, source) : checkpoint::Extras{};
  const int saved_fit = extras.count("fit") ? static_cast<int>(extras.at("fit")) : 1;
  if (!saved || saved_fit < fit_) {  // nothing saved for this fit (an earlier fit's is overwritten)
    if (!seeded_) seed_ = static_cast<uint64_t>(torch::randint(std::numeric_limits<int64_t>::max(), {1},
                                                               torch::kLong).item<int64_t>());
    seeded_ = true;
    return;
  }
  if (extras.count("seed")) seed_ = static_cast<uint64_t>(extras.at("seed"));
  seeded_ = true;
  if (saved_fit > fit_) {
    skipped_ = true;
    first_epoch_ = l.n_epoch;
    l.logger("skipping fit " + std::to_string(fit_) + ": '" + path_ + "' holds fit " + std::to_string(saved_fit));
    return;
  }
  checkpoint::decode_into(l, bytes, /*with_opt=*/true, source);
  first_epoch_ = l.epoch + 1;  // the checkpoint holds the last completed epoch
  l.epoch = 0;
  l.logger("resuming from '" + path_ + "' at epoch " + std::to_string(first_epoch_));
}

void ResumeFromCheckpoint::before_epoch() {
  auto& l = learn();
  if (l.epoch < first_epoch_) throw CancelEpochException();
  const auto fit_seed = mix_seed(seed_, static_cast<uint64_t>(fit_));
  torch::manual_seed(mix_seed(mix_seed(fit_seed, static_cast<uint64_t>(l.epoch)), static_cast<uint64_t>(l.rank)));
}

void ResumeFromCheckpoint::after_epoch() {
  auto& l = learn();
  if (l.epoch >= first_epoch_)
    l.save(path_, /*with_opt=*/true, {{"fit", fit_}, {"seed", static_cast<int64_t>(seed_)}});
}

void ResumeFromCheckpoint::after_fit() {
  auto& l = learn();
  // All epochs done, or the fit stopped early: nothing to resume (a restart would train on
  // past the stop). A skipped fit leaves the later fit's checkpoint.
  if (!skipped_ && (stopped_ || l.epoch >= l.n_epoch) && l.rank == 0) std::filesystem::remove(path_);
}

}  // namespace fastcpp
