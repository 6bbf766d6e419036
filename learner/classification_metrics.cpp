#include "learner/classification_metrics.h"

#include <torch/torch.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace fastcpp::metrics {
namespace {

// Each class's counts over the set, the predicted class being the argmax of the last axis.
struct ClassCounts {
  torch::Tensor tp, predicted, actual;  // double [classes]
  std::vector<int64_t> present;         // the classes among the targets or the predictions
};

ClassCounts class_counts(const std::string& metric, const torch::Tensor& pred, const torch::Tensor& target) {
  check_one_target_per_row(metric.c_str(), pred, target);
  if (!c10::isIntegralType(target.scalar_type(), /*includeBool=*/false))
    throw Error(metric + ": targets must be class indices, got " + c10::toString(target.scalar_type()) + " ones");
  const auto predicted = pred.detach().argmax(-1).flatten().to(torch::kCPU, torch::kLong);
  const auto actual = target.detach().flatten().to(torch::kCPU, torch::kLong);
  if (actual.numel() == 0) throw Error(metric + ": no items");
  if (const auto lowest = actual.min().item<int64_t>(); lowest < 0)
    throw Error(metric + ": a target is " + std::to_string(lowest) + ", not a class index");
  const int64_t n = std::max(pred.size(-1), actual.max().item<int64_t>() + 1);
  const auto matrix = torch::bincount(actual * n + predicted, {}, n * n).view({n, n}).to(torch::kDouble);
  ClassCounts counts{matrix.diagonal(), matrix.sum(0), matrix.sum(1), {}};
  const auto present = (counts.predicted + counts.actual).gt(0);
  for (int64_t c = 0; c < n; ++c)
    if (present[c].item<bool>()) counts.present.push_back(c);
  return counts;
}

// num / den, 0 where den is 0 (scikit-learn's zero_division).
torch::Tensor ratio(const torch::Tensor& num, const torch::Tensor& den) {
  return torch::where(den.gt(0), num / den, torch::zeros_like(num));
}

enum class Score { precision, recall, fbeta };

// The score of each class, or of counts summed over the classes.
torch::Tensor scores(Score kind, double beta, const torch::Tensor& tp, const torch::Tensor& predicted,
                     const torch::Tensor& actual) {
  if (kind == Score::precision) return ratio(tp, predicted);
  if (kind == Score::recall) return ratio(tp, actual);
  const double b2 = beta * beta;  // F-beta from the counts: (1 + b2) tp / ((1 + b2) tp + b2 fn + fp)
  return ratio((1 + b2) * tp, (1 + b2) * tp + b2 * (actual - tp) + (predicted - tp));
}

std::string listed(const std::vector<int64_t>& classes) {
  std::string text;
  for (const auto c : classes) text += (text.empty() ? "" : ", ") + std::to_string(c);
  return text;
}

double averaged(Score kind, double beta, const std::string& metric, const torch::Tensor& pred,
                const torch::Tensor& target, AverageOptions options) {
  const auto counts = class_counts(metric, pred, target);
  const auto& present = counts.present;
  switch (options.average) {
    case Average::binary: {
      if (present.size() > 2)
        throw Error(metric + ": average binary scores two classes, the targets and predictions hold " +
                    std::to_string(present.size()) + " (" + listed(present) + "); use macro, micro or weighted");
      const bool known = std::find(present.begin(), present.end(), options.pos_label) != present.end();
      if (present.size() == 2 && !known)
        throw Error(metric + ": pos_label " + std::to_string(options.pos_label) + " is not one of the classes " +
                    listed(present));
      if (!known) return 0;  // never a target nor predicted: no true positive
      const auto c = options.pos_label;
      return scores(kind, beta, counts.tp[c], counts.predicted[c], counts.actual[c]).item<double>();
    }
    case Average::micro:
      return scores(kind, beta, counts.tp.sum(), counts.predicted.sum(), counts.actual.sum()).item<double>();
    case Average::macro:
    case Average::weighted: {
      const auto index = torch::tensor(present, torch::kLong);
      const auto per_class = scores(kind, beta, counts.tp, counts.predicted, counts.actual).index_select(0, index);
      if (options.average == Average::macro) return per_class.mean().item<double>();
      const auto support = counts.actual.index_select(0, index);
      return ratio((per_class * support).sum(), support.sum()).item<double>();
    }
  }
  return 0;
}

// The softmax probabilities [N, C] of the scores and the targets [N], checked.
std::pair<torch::Tensor, torch::Tensor> probabilities(const std::string& metric, const torch::Tensor& pred,
                                                      const torch::Tensor& target) {
  check_one_target_per_row(metric.c_str(), pred, target);
  if (!c10::isIntegralType(target.scalar_type(), /*includeBool=*/false))
    throw Error(metric + ": targets must be class indices, got " + c10::toString(target.scalar_type()) + " ones");
  const auto scores = pred.detach().to(torch::kCPU, torch::kDouble);
  return {torch::softmax(scores.reshape({-1, scores.size(-1)}), 1), target.detach().flatten().to(torch::kCPU, torch::kLong)};
}

MetricPtr accumulated(std::string name, MetricFn fn) { return std::make_shared<AccumMetric>(std::move(name), std::move(fn)); }

}  // namespace

double precision_value(const torch::Tensor& pred, const torch::Tensor& target, AverageOptions options) {
  return averaged(Score::precision, 0, "precision_score", pred, target, options);
}

double recall_value(const torch::Tensor& pred, const torch::Tensor& target, AverageOptions options) {
  return averaged(Score::recall, 0, "recall_score", pred, target, options);
}

double fbeta_value(const torch::Tensor& pred, const torch::Tensor& target, double beta, AverageOptions options) {
  if (!(beta > 0)) throw Error("fbeta_score: beta must be positive, got " + std::to_string(beta));
  return averaged(Score::fbeta, beta, beta == 1 ? "f1_score" : "fbeta_score", pred, target, options);
}

double matthews_corrcoef_value(const torch::Tensor& pred, const torch::Tensor& target) {
  const auto counts = class_counts("matthews_corrcoef", pred, target);
  const auto n = counts.actual.sum(), correct = counts.tp.sum();
  const auto covariance = correct * n - counts.actual.dot(counts.predicted);
  const auto spread = (n * n - counts.predicted.dot(counts.predicted)) * (n * n - counts.actual.dot(counts.actual));
  return spread.item<double>() == 0 ? 0 : (covariance / spread.sqrt()).item<double>();
}

double balanced_accuracy_value(const torch::Tensor& pred, const torch::Tensor& target) {
  const auto counts = class_counts("balanced_accuracy_score", pred, target);
  const auto targeted = counts.actual.gt(0);  // a class only predicted has no recall
  return (counts.tp.masked_select(targeted) / counts.actual.masked_select(targeted)).mean().item<double>();
}

double binary_roc_auc(const torch::Tensor& scores, const torch::Tensor& target) {
  const auto s = scores.detach().flatten().to(torch::kCPU, torch::kDouble);
  const auto t = target.detach().flatten().to(torch::kCPU, torch::kLong);
  if (s.numel() != t.numel())
    throw Error("roc_auc_score: " + std::to_string(s.numel()) + " scores for " + std::to_string(t.numel()) + " targets");
  if (t.numel() > 0 && (t.min().item<int64_t>() < 0 || t.max().item<int64_t>() > 1))
    throw Error("roc_auc_score: binary targets are 0 or 1, got " + std::to_string(t.max().item<int64_t>()));
  const double positives = static_cast<double>(t.sum().item<int64_t>()), negatives = static_cast<double>(t.numel()) - positives;
  if (positives == 0 || negatives == 0)
    throw Error("roc_auc_score: only one class is present in the targets, and the area under the ROC curve needs both");
  // The Mann-Whitney statistic: the positives' ranks among all scores, tied scores sharing their mean rank.
  const auto [sorted, order] = s.sort();
  const auto values = sorted.accessor<double, 1>();
  const auto ordered = t.index_select(0, order);
  const auto classes = ordered.accessor<int64_t, 1>();
  const int64_t n = s.numel();
  double positive_ranks = 0;
  for (int64_t first = 0, last = 0; first < n; first = last) {
    while (last < n && values[last] == values[first]) ++last;
    const double rank = (static_cast<double>(first + 1) + static_cast<double>(last)) / 2;  // 1-based, averaged
    for (int64_t i = first; i < last; ++i) positive_ranks += classes[i] * rank;
  }
  return (positive_ranks - positives * (positives + 1) / 2) / (positives * negatives);
}

MetricPtr precision(AverageOptions options) {
  return accumulated("precision_score", [options](const torch::Tensor& pred, const torch::Tensor& target) {
    return torch::tensor(precision_value(pred, target, options), torch::kDouble);
  });
}

MetricPtr recall(AverageOptions options) {
  return accumulated("recall_score", [options](const torch::Tensor& pred, const torch::Tensor& target) {
    return torch::tensor(recall_value(pred, target, options), torch::kDouble);
  });
}

MetricPtr f1_score(AverageOptions options) {
  return accumulated("f1_score", [options](const torch::Tensor& pred, const torch::Tensor& target) {
    return torch::tensor(fbeta_value(pred, target, 1, options), torch::kDouble);
  });
}

MetricPtr fbeta(double beta, AverageOptions options) {
  if (!(beta > 0)) throw Error("fbeta_score: beta must be positive, got " + std::to_string(beta));
  return accumulated("fbeta_score", [beta, options](const torch::Tensor& pred, const torch::Tensor& target) {
    return torch::tensor(fbeta_value(pred, target, beta, options), torch::kDouble);
  });
}

MetricPtr matthews_corrcoef() {
  return accumulated("matthews_corrcoef", [](const torch::Tensor& pred, const torch::Tensor& target) {
    return torch::tensor(matthews_corrcoef_value(pred, target), torch::kDouble);
  });
}

MetricPtr balanced_accuracy() {
  return accumulated("balanced_accuracy_score", [](const torch::Tensor& pred, const torch::Tensor& target) {
    return torch::tensor(balanced_accuracy_value(pred, target), torch::kDouble);
  });
}

MetricPtr roc_auc_binary() {
  return accumulated("roc_auc_score", [](const torch::Tensor& pred, const torch::Tensor& target) {
    const auto [probs, classes] = probabilities("roc_auc_score", pred, target);
    if (probs.size(1) != 2)
      throw Error("roc_auc_score: roc_auc_binary takes two outputs an item, got " + std::to_string(probs.size(1)) +
                  " (roc_auc: one class against the rest)");
    return torch::tensor(binary_roc_auc(probs.select(1, 1), classes), torch::kDouble);
  });
}

MetricPtr roc_auc() {
  return accumulated("roc_auc_score", [](const torch::Tensor& pred, const torch::Tensor& target) {
    const auto [probs, classes] = probabilities("roc_auc_score", pred, target);
    const int64_t n = probs.size(1);
    const auto among_targets = std::get<0>(torch::_unique(classes)).numel();
    if (among_targets != n || classes.min().item<int64_t>() < 0 || classes.max().item<int64_t>() >= n)
      throw Error("roc_auc_score: one class against the rest needs each of the " + std::to_string(n) +
                  " classes among the targets, which hold " + std::to_string(among_targets));
    double total = 0;
    for (int64_t c = 0; c < n; ++c) total += binary_roc_auc(probs.select(1, c), classes.eq(c));
    return torch::tensor(total / static_cast<double>(n), torch::kDouble);
  });
}

}  // namespace fastcpp::metrics
