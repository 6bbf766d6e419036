#include "learner/regression_metrics.h"

#include <torch/torch.h>

#include <limits>

#include "core/error.h"

namespace fastcpp::metrics {
namespace {

// The predictions and targets flattened, in double, as fastai's flatten_check.
std::pair<torch::Tensor, torch::Tensor> flattened(const char* metric, const torch::Tensor& pred,
                                                  const torch::Tensor& target) {
  if (pred.numel() != target.numel())
    throw Error(std::string(metric) + ": predictions " + c10::str(pred.sizes()) + " and targets " +
                c10::str(target.sizes()) + " hold different numbers of values");
  return {pred.detach().flatten().to(torch::kDouble), target.detach().flatten().to(torch::kDouble)};
}

template <class Fn>
MetricPtr averaged(const char* name, Fn fn) {
  return std::make_shared<AvgMetric>(name, [name, fn](const torch::Tensor& pred, const torch::Tensor& target) {
    const auto [p, t] = flattened(name, pred, target);
    return fn(p, t);
  });
}

template <class Fn>
MetricPtr accumulated(const char* name, Fn fn) {
  return std::make_shared<AccumMetric>(name, [name, fn](const torch::Tensor& pred, const torch::Tensor& target) {
    const auto [p, t] = flattened(name, pred, target);
    return fn(p, t);
  });
}

}  // namespace

MetricPtr mse() {
  return averaged("mse", [](const torch::Tensor& p, const torch::Tensor& t) { return (p - t).square().mean(); });
}

MetricPtr rmse() {
  return accumulated("rmse", [](const torch::Tensor& p, const torch::Tensor& t) {
    return (p - t).square().mean().sqrt();
  });
}

MetricPtr mae() {
  return averaged("mae", [](const torch::Tensor& p, const torch::Tensor& t) { return (p - t).abs().mean(); });
}

MetricPtr msle() {
  return averaged("msle", [](const torch::Tensor& p, const torch::Tensor& t) {
    return (p.log1p() - t.log1p()).square().mean();
  });
}

MetricPtr exp_rmspe() {
  return accumulated("exp_rmspe", [](const torch::Tensor& p, const torch::Tensor& t) {
    return ((t.exp() - p.exp()) / t.exp()).square().mean().sqrt();
  });
}

MetricPtr r2_score() {
  return accumulated("r2_score", [](const torch::Tensor& p, const torch::Tensor& t) {
    if (t.numel() < 2) return torch::tensor(std::numeric_limits<double>::quiet_NaN(), torch::kDouble);
    const auto residual = (t - p).square().sum(), total = (t - t.mean()).square().sum();
    if (total.item<double>() == 0) return torch::tensor(residual.item<double>() == 0 ? 1.0 : 0.0, torch::kDouble);
    return 1 - residual / total;
  });
}

}  // namespace fastcpp::metrics
