#pragma once
// Callbacks that watch a monitored value (a column of the epoch table, default
// valid_loss) after each epoch. "Better" is lower for names containing "loss" or
// "error", higher otherwise (or as `comp` says: fastai's comp=np.less / np.greater),
// by more than min_delta. Trackers sit out lr_find, as fastai's do, and an epoch a resumed
// fit skips before training (callbacks/resume.h, fit's start_epoch) counts for nothing.
//
// SaveModel (order 61): saves <model_dir>/<fname>.pt when the value improves (or every
//   `every_epoch`-th epoch as <fname>_<epoch>.pt); loads the best back at the end of the fit.
// EarlyStopping (order 63): stops the fit after `patience` epochs without improvement.
// ReduceLROnPlateau (order 62): divides every lr by `factor` after `patience` epochs
//   without improvement, never below min_lr.
// With reset_on_fit false (fastai's reset_on_fit=False) the best value of earlier fits
// stays the one to beat; the epochs without improvement start again each fit.
// A fit resumed by ResumeFromCheckpoint goes on with each tracker's best value and epochs
// without improvement as they were when its checkpoint was saved.
#include <limits>
#include <map>
#include <string>

#include "learner/callback.h"

namespace fastcpp {

// Which way a monitored value gets better.
enum class Comp { infer, lower, higher };

struct TrackerOptions {
  std::string monitor = "valid_loss";
  double min_delta = 0.0;
  Comp comp = Comp::infer;
  bool reset_on_fit = true;
};

class TrackerCallback : public Callback {
 public:
  explicit TrackerCallback(TrackerOptions options);
  void before_fit() override;
  // Finds the monitored column (an Error before any training if there is none); a
  // subclass's own calls this one too.
  void before_train() override;
  void after_epoch() override;

  double best() const { return best_; }
  // What best() is before any value: +inf where lower is better, else -inf (the other infinity can be best).
  double worst() const {
    return lower_is_better_ ? std::numeric_limits<double>::infinity() : -std::numeric_limits<double>::infinity();
  }
  // The best value and the epochs since it ("best", "wait"), as a restarted fit needs them.
  std::map<std::string, double> state() const;
  void load_state(const std::map<std::string, double>& state);

 protected:
  bool measured_ = false;  // this epoch trained, and its value was compared with the best
  bool new_best_ = false;
  double current_ = 0;
  int wait_ = 0;  // measured epochs since the best (a subclass may start it again)
  TrackerOptions options_;

 private:
  bool lower_is_better_;
  bool trained_ = false;
  bool has_best_ = false;  // a fit has started: best_ holds a value
  size_t column_ = 0;  // of the monitored value in the Recorder's values
  double best_ = 0;
};

struct SaveModelOptions {
  std::string monitor = "valid_loss";
  double min_delta = 0.0;
  Comp comp = Comp::infer;
  std::string fname = "model";
  std::string model_dir = "models";
  int every_epoch = 0;  // n > 0: save every n-th epoch (0, n, 2n, ...) instead of the best, as fastai's
  bool at_end = false;  // save the final model instead of loading the best (with every_epoch: besides)
  bool with_opt = false;
  bool reset_on_fit = true;
};

class SaveModel : public TrackerCallback {
 public:
  explicit SaveModel(SaveModelOptions options = {});
  void after_epoch() override;
  void after_fit() override;
  std::string path(const std::string& suffix = "") const;

 private:
  SaveModelOptions save_options_;
};

struct EarlyStoppingOptions {
  std::string monitor = "valid_loss";
  double min_delta = 0.0;
  Comp comp = Comp::infer;
  int patience = 1;
  bool reset_on_fit = true;
};

class EarlyStopping : public TrackerCallback {
 public:
  explicit EarlyStopping(EarlyStoppingOptions options = {});
  void after_epoch() override;

 private:
  int patience_;
};

struct ReduceLROnPlateauOptions {
  std::string monitor = "valid_loss";
  double min_delta = 0.0;
  Comp comp = Comp::infer;
  int patience = 1;
  double factor = 10.0;
  double min_lr = 0.0;
  bool reset_on_fit = true;
};

class ReduceLROnPlateau : public TrackerCallback {
 public:
  explicit ReduceLROnPlateau(ReduceLROnPlateauOptions options = {});
  void after_epoch() override;

 private:
  ReduceLROnPlateauOptions reduce_options_;
};

}  // namespace fastcpp
