#include "learner/metrics.h"

#include <torch/torch.h>

#include "core/error.h"
#include "learner/learner.h"

namespace fastcpp {

void AvgMetric::reset() {
  total_ = torch::Tensor();
  count_ = 0;
}

namespace {

// A metric's function gives one number.
void check_one_number(const std::string& metric, const torch::Tensor& value, const char* over) {
  if (value.numel() != 1)
    throw Error("metric '" + metric + "' gave a tensor of " + c10::str(value.sizes()) + " for " + over +
                ", not one number");
}

}  // namespace

void AvgMetric::accumulate(const Learner& learn) {
  const int64_t bs = learn.yb.size(0);
  const auto batch_value = fn_(learn.pred, learn.yb).detach();
  check_one_number(name_, batch_value, "a batch");
  if (!total_.defined()) total_ = torch::zeros({}, batch_value.options().dtype(torch::kDouble));
  total_.add_(batch_value.reshape({}), static_cast<double>(bs));  // one operator a batch, summed in double
  count_ += bs;
}

double AvgMetric::value() const {
  if (count_ == 0) return std::nan("");
  return total_.item<double>() / static_cast<double>(count_);
}

void AccumMetric::reset() {
  preds_.clear();
  targets_.clear();
}

void AccumMetric::accumulate(const Learner& learn) {
  // On the CPU, as fastai's: a validation set of masks or boxes would fill the GPU.
  auto pred = learn.pred.detach();
  preds_.push_back((activation_ ? learn.loss_func.activation(pred) : pred).to(torch::kCPU));
  targets_.push_back(learn.yb.detach().to(torch::kCPU));
}

double AccumMetric::value() const {
  if (preds_.empty()) return std::nan("");
  const auto value = fn_(torch::cat(preds_), torch::cat(targets_));
  check_one_number(name_, value, "the set");
  return value.item<double>();
}

namespace metrics {

void check_one_target_per_row(const char* metric, const torch::Tensor& pred, const torch::Tensor& target) {
  if (pred.dim() > 0 && pred.size(-1) == 0)
    throw Error(std::string(metric) + ": predictions " + c10::str(pred.sizes()) + " score no class");
  if (pred.dim() == 0 || target.numel() * pred.size(-1) != pred.numel())
    throw Error(std::string(metric) + ": predictions " + c10::str(pred.sizes()) + " and targets " +
                c10::str(target.sizes()) + " differ in their number of items (one class index an item)");
}

torch::Tensor accuracy_fn(const torch::Tensor& pred, const torch::Tensor& target) {
  check_one_target_per_row("accuracy", pred, target);
  return (pred.argmax(-1).flatten() == target.flatten()).to(torch::kFloat).mean();
}

torch::Tensor top_k_accuracy_fn(const torch::Tensor& pred, const torch::Tensor& target, int64_t k) {
  if (k < 1 || k > pred.size(-1))
    throw Error("top_k_accuracy: k=" + std::to_string(k) + " but the model has " + std::to_string(pred.size(-1)) +
                " outputs");
  check_one_target_per_row("top_k_accuracy", pred, target);
  auto top = std::get<1>(pred.topk(k, -1)).reshape({-1, k});
  return (top == target.flatten().unsqueeze(-1)).any(-1).to(torch::kFloat).mean();
}

MetricPtr accuracy() { return std::make_shared<AvgMetric>("accuracy", accuracy_fn); }

MetricPtr accuracy_multi(double thresh, bool sigmoid) {
  return std::make_shared<AvgMetric>("accuracy_multi", [thresh, sigmoid](const torch::Tensor& pred, const torch::Tensor& target) {
    if (pred.sizes() != target.sizes())
      throw Error("accuracy_multi: predictions " + c10::str(pred.sizes()) + " and targets " + c10::str(target.sizes()) +
                  " differ in shape (it takes one-hot targets, one column a class)");
    const auto scores = sigmoid ? pred.sigmoid() : pred;
    return ((scores > thresh) == target.to(torch::kBool)).to(torch::kFloat).mean();
  });
}

MetricPtr error_rate() {
  return std::make_shared<AvgMetric>("error_rate", [](const torch::Tensor& pred, const torch::Tensor& target) {
    return 1 - accuracy_fn(pred, target);
  });
}

MetricPtr top_k_accuracy(int64_t k) {
  return std::make_shared<AvgMetric>("top_" + std::to_string(k) + "_accuracy",
                                     [k](const torch::Tensor& pred, const torch::Tensor& target) {
                                       return top_k_accuracy_fn(pred, target, k);
                                     });
}

MetricPtr from_fn(std::string name, MetricFn fn) { return std::make_shared<AvgMetric>(std::move(name), std::move(fn)); }

namespace {

class Perplexity : public Metric {
 public:
  std::string name() const override { return "perplexity"; }
  void reset() override {
    total_ = torch::Tensor();
    count_ = 0;
  }
  void accumulate(const Learner& learn) override {  // summed on the device: no sync a batch
    const int64_t bs = learn.yb.size(0);
    const auto loss = learn.loss.detach().to(torch::kDouble).mean();
    total_ = total_.defined() ? total_ + loss * static_cast<double>(bs) : loss * static_cast<double>(bs);
    count_ += bs;
  }
  double value() const override {
    return count_ ? std::exp(total_.item<double>() / static_cast<double>(count_)) : std::nan("");
  }

 private:
  torch::Tensor total_;
  int64_t count_ = 0;
};

}  // namespace

MetricPtr perplexity() { return std::make_shared<Perplexity>(); }

}  // namespace metrics
}  // namespace fastcpp
