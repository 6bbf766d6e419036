#pragma once
// Metrics: computed over the validation set each epoch (and by validate()).
//   AvgMetric    a per-batch function averaged, weighted by batch size (exact for
//                accuracy-like metrics); sums stay on the device, no sync per batch.
//   AccumMetric  keeps every prediction and target, computes once at the end (for
//                metrics that do not decompose over batches).
// A user metric is a function (metrics::from_fn) or a class deriving from Metric.
// More: learner/classification_metrics.h (F1, precision, recall, ROC AUC, MCC),
// learner/regression_metrics.h (mse, rmse, mae, r2), vision/segmentation.h (Dice, IoU).
#include <torch/types.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace fastcpp {

class Learner;

class Metric {
 public:
  virtual ~Metric() = default;
  virtual std::string name() const = 0;
  virtual void reset() = 0;
  virtual void accumulate(const Learner& learn) = 0;  // reads learn.pred and learn.yb
  virtual double value() const = 0;
};

using MetricPtr = std::shared_ptr<Metric>;
using MetricFn = std::function<torch::Tensor(const torch::Tensor& pred, const torch::Tensor& target)>;

class AvgMetric : public Metric {
 public:
  AvgMetric(std::string name, MetricFn fn) : name_(std::move(name)), fn_(std::move(fn)) {}
  std::string name() const override { return name_; }
  void reset() override;
  void accumulate(const Learner& learn) override;
  double value() const override;

 private:
  std::string name_;
  MetricFn fn_;
  torch::Tensor total_;
  int64_t count_ = 0;
};

class AccumMetric : public Metric {
 public:
  // activation: apply the loss's activation (softmax) to predictions before fn.
  AccumMetric(std::string name, MetricFn fn, bool activation = false)
      : name_(std::move(name)), fn_(std::move(fn)), activation_(activation) {}
  std::string name() const override { return name_; }
  void reset() override;
  void accumulate(const Learner& learn) override;
  double value() const override;

 private:
  std::string name_;
  MetricFn fn_;
  bool activation_;
  std::vector<torch::Tensor> preds_, targets_;
};

namespace metrics {

// Per-batch functions: pred [N, C] scores, target [N] class indices.
torch::Tensor accuracy_fn(const torch::Tensor& pred, const torch::Tensor& target);
torch::Tensor top_k_accuracy_fn(const torch::Tensor& pred, const torch::Tensor& target, int64_t k);

MetricPtr accuracy();
MetricPtr error_rate();
// Several classes an item (one-hot targets [N, C]): the share of (item, class) pairs
// where (sigmoid(pred) > thresh) matches the target, as fastai's accuracy_multi.
MetricPtr accuracy_multi(double thresh = 0.5, bool sigmoid = true);
MetricPtr top_k_accuracy(int64_t k = 5);
// A user-defined per-batch function, averaged over the set.
MetricPtr from_fn(std::string name, MetricFn fn);
// exp of the mean validation loss, batches weighted by their size (fastai's Perplexity,
// for language models).
MetricPtr perplexity();

// One target per row of scores, as fastai's flatten_check (a [N, 1] target would
// broadcast): an Error naming `metric` otherwise.
void check_one_target_per_row(const char* metric, const torch::Tensor& pred, const torch::Tensor& target);

}  // namespace metrics
}  // namespace fastcpp
