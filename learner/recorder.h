#pragma once
// Recorder (order 50, always present): the history of a fit.
//   losses     smoothed training loss after each batch: avg = beta*avg + (1-beta)*loss,
//              reported as avg/(1-beta^count), beta 0.98 (fastai's AvgSmoothLoss)
//   lrs, moms  hyper-parameters of the last parameter group at each training batch
//   iters      number of recorded batches at the end of each epoch
//   values     per epoch: train_loss (smoothed), valid_loss, metrics...
//   log        the last epoch's row as printed: epoch, train_loss, valid_loss, metrics, time
// Batch losses stay on the device during an epoch and are read back and averaged once at
// its end (or when the smoothed loss is asked for): no operator a batch.
#include <torch/types.h>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "learner/callback.h"

namespace fastcpp {

class Recorder : public Callback {
 public:
  explicit Recorder(double beta = 0.98) : beta_(beta) { order = 50; }

  void before_fit() override;
  void before_epoch() override;
  void after_batch() override;
  void after_train() override;
  void before_validate() override;
  void after_validate() override;
  void after_cancel_train() override { cancel_train_ = true; }
  void after_cancel_validate() override { cancel_valid_ = true; }
  void after_epoch() override;
  void after_fit() override;
  // As fastai's, which records each batch as it goes: the losses up to the failure.
  void after_fit_failed() override { flush_losses(); }

  // Smoothed training loss now (reads the batch losses back from the device).
  double smooth_loss();
  // The same without waiting for the device, for what is drawn while training runs (the
  // progress bar): on a GPU, the value an earlier call started copying back behind an
  // event (NaN until one has arrived); on the CPU, smooth_loss().
  double smooth_loss_lagged();
  // [valid_loss, metrics...] of the last validation (NaN where it was cancelled).
  const std::vector<double>& valid_values() const { return valid_values_; }
  // "epoch", "train_loss", "valid_loss", metric names..., extra columns..., "time"
  std::vector<std::string> metric_names() const;
  // An extra column of the epoch table, after the metrics (PeakMemMetric's memory
  // columns): `value` is read at after_epoch; NaN prints as n/a. Adding a name twice
  // replaces it. The column goes when its owner leaves the Learner (remove_cb, the end of
  // the fit it was passed to), so `value` may read the owner's members.
  void add_column(const Callback& owner, const std::string& name, std::function<double()> value);
  void remove_columns_of(const Callback& owner);
  // The smoothed training loss's running state ("smooth", "smooth_count"), as a resumed fit
  // needs it to go on as the uninterrupted one (callbacks/resume.h); read after an epoch.
  std::map<std::string, double> smoothing_state();
  void load_smoothing_state(const std::map<std::string, double>& state);

  // Training loss per batch (and validation loss per epoch) as a PNG line plot.
  void plot_loss(const std::string& path, size_t skip_start = 5, bool with_valid = true) const;
  // Loss against learning rate on a log scale, as after lr_find.
  void plot_lr_find(const std::string& path, size_t skip_end = 5) const;

  std::vector<double> lrs, moms, losses;
  std::vector<size_t> iters;
  std::vector<std::vector<double>> values;
  std::vector<std::string> log;

 private:
  void flush_losses();

  struct LaggedRead;
  std::shared_ptr<LaggedRead> lagged_;  // smooth_loss_lagged's copy in flight
  double beta_;
  double smooth_ = 0;  // biased running average of the batch losses read back so far
  int64_t smooth_count_ = 0;
  std::vector<torch::Tensor> pending_losses_;  // the batch losses not read back yet, on the device
  torch::Tensor valid_loss_sum_;
  int64_t valid_count_ = 0;
  std::vector<double> valid_values_;
  bool cancel_train_ = false, cancel_valid_ = false;
  struct Column {
    std::string name;
    const Callback* owner;
    std::function<double()> value;
  };
  std::vector<Column> columns_;
  std::chrono::steady_clock::time_point epoch_start_;
};

// "01:05" (or "1:02:05" past an hour), as fastai prints epoch times.
std::string format_time(double seconds);

}  // namespace fastcpp
