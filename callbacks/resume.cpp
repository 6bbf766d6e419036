#include "callbacks/resume.h"

#include <torch/torch.h>

#include <filesystem>
#include <functional>
#include <limits>

#include "callbacks/lr_finder.h"
#include "callbacks/tracker.h"
#include "core/error.h"
#include "data/random.h"
#include "formats/file_io.h"
#include "formats/torch_file.h"
#include "learner/checkpoint.h"
#include "learner/learner.h"
#include "learner/recorder.h"

namespace fastcpp {

namespace {

// What a resumed fit takes back besides the model and the optimizer: the Recorder's smoothed
// loss, each tracker's best value and wait. Their entries are saved as extras under a prefix
// ("recorder.", "tracker.<position among them>.<name>.").
struct KeptState {
  std::string prefix;
  std::function<std::map<std::string, double>()> save;
  std::function<void(const std::map<std::string, double>&)> load;
};

std::vector<KeptState> kept_states(const Learner& learn) {
  std::vector<KeptState> kept;
  if (auto* recorder = learn.recorder.get())
    kept.push_back({"recorder.", [recorder] { return recorder->smoothing_state(); },
                    [recorder](const auto& state) { recorder->load_smoothing_state(state); }});
  int trackers = 0;
  for (const auto& cb : learn.cbs())
    if (auto* tracker = dynamic_cast<TrackerCallback*>(cb.get()))
      kept.push_back({"tracker." + std::to_string(trackers++) + "." + cb->name() + ".",
                      [tracker] { return tracker->state(); },
                      [tracker](const auto& state) { tracker->load_state(state); }});
  return kept;
}

}  // namespace

ResumeFromCheckpoint::ResumeFromCheckpoint(std::string path) : path_(std::move(path)) { order = 64; }

void ResumeFromCheckpoint::before_fit() {
  auto& l = learn();
  first_epoch_ = 0;
  skipped_ = stopped_ = false;
  last_epoch_ = -1;
  run = !l.get_cb<LRFinder>();  // lr_find's epochs are neither resumed nor saved
  if (!run) return;
  ++fit_;
  const auto source = "checkpoint '" + path_ + "'";
  std::error_code error;
  const bool saved = std::filesystem::exists(path_, error);
  if (error) throw Error("cannot read " + source + ": " + error.message());
  const auto file = saved ? unpickle(read_file(path_), source, "a checkpoint") : c10::IValue();
  const auto extras = saved ? checkpoint::extras_of(file, source) : checkpoint::Extras{};
  const auto integer = [&](const std::string& key, int64_t fallback) {
    if (!extras.count(key)) return fallback;
    if (!extras.at(key).isInt()) throw Error("cannot read " + source + ": its extra '" + key + "' is not an integer");
    return extras.at(key).toInt();
  };
  const auto fit_entry = integer("fit", 1);
  if (fit_entry < 1 || fit_entry > std::numeric_limits<int>::max())
    throw Error("cannot read " + source + ": its extra 'fit' is " + std::to_string(fit_entry) + ", not a fit's number");
  const int saved_fit = static_cast<int>(fit_entry);
  if (!seeded_) {
    // Rank 0's on every rank (every rank meets in it, checkpoint or not): each rank's own draw
    // would give way to rank 0's, the one the checkpoint keeps, on a resume, and its dropout
    // would not repeat.
    const auto drawn = torch::randint(std::numeric_limits<int64_t>::max(), {1}, torch::kLong).item<int64_t>();
    seed_ = static_cast<uint64_t>(l.from_rank_0 ? l.from_rank_0(drawn) : drawn);
  }
  if (l.from_rank_0) {
    // Every rank must resume as rank 0 does: a rank on a node that cannot see rank 0's file
    // would train from epoch 0 beside it, apart, until a collective hangs. (An earlier fit's
    // checkpoint counts as none: it changes nothing.)
    const int64_t mine = saved && saved_fit >= fit_ ? saved_fit : 0, rank_0 = l.from_rank_0(mine);
    const auto seen = [](int64_t fit) { return fit == 0 ? std::string("none") : "fit " + std::to_string(fit) + "'s"; };
    if (rank_0 != mine)
      throw Error(source + ": rank 0 finds " + seen(rank_0) + ", rank " + std::to_string(l.rank) + " finds " +
                  seen(mine) + "; every rank reads rank 0's checkpoint: put it on a file system all nodes share");
  }
  if (!saved || saved_fit < fit_) {  // nothing saved for this fit (an earlier fit's is overwritten)
    seeded_ = true;
    return;
  }
  seed_ = static_cast<uint64_t>(integer("seed", static_cast<int64_t>(seed_)));
  seeded_ = true;
  if (saved_fit > fit_) {
    skipped_ = true;
    first_epoch_ = l.n_epoch;
    l.logger("skipping fit " + std::to_string(fit_) + ": '" + path_ + "' holds fit " + std::to_string(saved_fit));
    return;
  }
  const auto n_epoch = integer("n_epoch", l.n_epoch);  // none in checkpoints made before it
  if (n_epoch != l.n_epoch)
    throw Error(source + " holds a fit of " + std::to_string(n_epoch) + " epochs, this fit has " +
                std::to_string(l.n_epoch) + ": its schedule would not go on where it stopped; remove the checkpoint "
                "to train this fit from its start");
  checkpoint::decode_into(l, file, /*with_opt=*/true, source);
  // After the Recorder's and the trackers' before_fit (orders 50 to 63) reset what this sets.
  for (const auto& part : kept_states(l)) {
    std::map<std::string, double> state;
    for (const auto& [key, value] : extras)
      if (key.rfind(part.prefix, 0) == 0)
        state[key.substr(part.prefix.size())] = value.isInt() ? static_cast<double>(value.toInt()) : value.toDouble();
    part.load(state);
  }
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
  last_epoch_ = l.epoch;
  if (l.epoch < first_epoch_) return;
  checkpoint::Extras extras{{"fit", fit_}, {"n_epoch", l.n_epoch}, {"seed", static_cast<int64_t>(seed_)}};
  for (const auto& part : kept_states(l))
    for (const auto& [entry, value] : part.save()) extras[part.prefix + entry] = value;
  l.save(path_, /*with_opt=*/true, extras);
}

void ResumeFromCheckpoint::after_fit() {
  auto& l = learn();
  // All epochs done, or the fit stopped early: nothing to resume (a restart would train on
  // past the stop). A skipped fit leaves the later fit's checkpoint.
  if (skipped_ || !(stopped_ || last_epoch_ + 1 >= l.n_epoch) || l.rank != 0) return;
  std::error_code error;
  if (!std::filesystem::remove(path_, error) && error)
    throw Error("cannot remove the finished fit's checkpoint '" + path_ + "': " + error.message());
}

}  // namespace fastcpp
