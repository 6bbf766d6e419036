#include "learner/classification_metrics.h"

#include <torch/torch.h>

#include <cmath>

#include "core/error.h"

namespace fastcpp::metrics {
namespace {

void check_class_indices(const std::string& metric, const torch::Tensor& target) {
  if (!c10::isIntegralType(target.scalar_type(), /*includeBool=*/false))
    throw Error(metric + ": targets must be class indices, got " + c10::toString(target.scalar_type()) + " ones");
}

// Each class's counts over the set, the predicted class being the argmax of the last axis,
// for the classes among the targets or the predictions (scikit-learn's labels), in order.
struct ClassCounts {
  torch::Tensor classes;                // int64 [K]
  torch::Tensor matrix;                 // double [K, K]: targets by row, predictions by column
  torch::Tensor tp, predicted, actual;  // double [K]
};

ClassCounts class_counts(const std::string& metric, const torch::Tensor& pred, const torch::Tensor& target) {
  check_one_target_per_row(metric.c_str(), pred, target);
  check_class_indices(metric, target);
  const auto predicted = pred.detach().argmax(-1).flatten().to(torch::kCPU, torch::kLong);
  const auto actual = target.detach().flatten().to(torch::kCPU, torch::kLong);
  const int64_t n = actual.numel();
  if (n == 0) throw Error(metric + ": no items");
  // Classes numbered by rank among those present: a stray large target costs nothing.
  const auto [classes, index] =
      torch::_unique(torch::cat({actual, predicted}), /*sorted=*/true, /*return_inverse=*/true);
  const int64_t k = classes.numel();
  const auto matrix = torch::bincount(index.narrow(0, 0, n) * k + index.narrow(0, n, n), {}, k * k).view({k, k});
  const auto counts = matrix.to(torch::kDouble);
  return {classes, counts, counts.diagonal(), counts.sum(0), counts.sum(1)};
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

std::string listed(const torch::Tensor& classes) {
  std::string text;
  for (int64_t i = 0; i < classes.numel(); ++i) text += (i ? ", " : "") + std::to_string(classes[i].item<int64_t>());
  return text;
}

double averaged(Score kind, double beta, const std::string& metric, const torch::Tensor& pred,
                const torch::Tensor& target, AverageOptions options) {
  const auto counts = class_counts(metric, pred, target);
  const auto per_class = [&] { return scores(kind, beta, counts.tp, counts.predicted, counts.actual); };
  switch (options.average) {
    case Average::binary: {
      const int64_t k = counts.classes.numel();
      if (k > 2)
        throw Error(metric + ": average binary scores two classes, the targets and predictions hold " +
                    std::to_string(k) + " (" + listed(counts.classes) + "); use macro, micro or weighted");
      const auto at = counts.classes.eq(options.pos_label).nonzero();
      if (at.numel() == 0 && k == 2)
        throw Error(metric + ": pos_label " + std::to_string(options.pos_label) + " is not one of the classes " +
                    listed(counts.classes));
      return at.numel() == 0 ? 0 : per_class()[at[0][0]].item<double>();  // never a target nor predicted: 0
    }
    case Average::micro:
      return scores(kind, beta, counts.tp.sum(), counts.predicted.sum(), counts.actual.sum()).item<double>();
    case Average::macro:
      return per_class().mean().item<double>();
    case Average::weighted:
      return ratio((per_class() * counts.actual).sum(), counts.actual.sum()).item<double>();
  }
  return 0;
}

void check_beta(double beta) {
  if (!(beta > 0) || !std::isfinite(beta))
    throw Error("fbeta_score: beta must be positive and finite, got " + std::to_string(beta));
}

// The softmax probabilities [N, C] of the scores and the targets [N], checked.
std::pair<torch::Tensor, torch::Tensor> probabilities(const torch::Tensor& pred, const torch::Tensor& target) {
  check_one_target_per_row("roc_auc_score", pred, target);
  check_class_indices("roc_auc_score", target);
  const auto scores = pred.detach().to(torch::kCPU, torch::kDouble);
  return {torch::softmax(scores.reshape({-1, scores.size(-1)}), 1),
          target.detach().flatten().to(torch::kCPU, torch::kLong)};
}

// A multi-label score: `kind` of each label's (or item's, or all) counts, averaged.
double multi_label_score(Score kind, double beta, const char* metric, const torch::Tensor& pred,
                         const torch::Tensor& target, const MultiOptions& o) {
  if (pred.sizes() != target.sizes() || pred.dim() != 2)
    throw Error(std::string(metric) + ": multi-label predictions and targets are [items, labels] alike, got " +
                c10::str(pred.sizes()) + " and " + c10::str(target.sizes()));
  const auto t = target.detach().to(torch::kCPU, torch::kDouble);
  if (!t.eq(0).logical_or(t.eq(1)).all().item<bool>())
    throw Error(std::string(metric) + ": multi-label targets are 0 or 1");
  auto scores_of = pred.detach().to(torch::kCPU, torch::kDouble);
  if (o.sigmoid) scores_of = scores_of.sigmoid();
  const auto p = scores_of.ge(o.thresh).to(torch::kDouble);
  const int64_t by = o.average == MultiAverage::samples ? 1 : 0;  // sum over items: each label's counts
  const auto tp = (p * t).sum(by), predicted = p.sum(by), actual = t.sum(by);
  if (o.average == MultiAverage::micro) return scores(kind, beta, tp.sum(), predicted.sum(), actual.sum()).item<double>();
  const auto each = scores(kind, beta, tp, predicted, actual);
  if (o.average != MultiAverage::weighted) return each.mean().item<double>();
  const double weight = actual.sum().item<double>();
  return weight == 0 ? 0 : (each * actual).sum().item<double>() / weight;
}

template <class Fn>
MetricPtr accumulated(std::string name, Fn value) {
  return std::make_shared<AccumMetric>(std::move(name),
                                       [value](const torch::Tensor& pred, const torch::Tensor& target) {
                                         return torch::tensor(value(pred, target), torch::kDouble);
                                       });
}

}  // namespace

double precision_value(const torch::Tensor& pred, const torch::Tensor& target, AverageOptions options) {
  return averaged(Score::precision, 0, "precision_score", pred, target, options);
}

double recall_value(const torch::Tensor& pred, const torch::Tensor& target, AverageOptions options) {
  return averaged(Score::recall, 0, "recall_score", pred, target, options);
}

double fbeta_value(const torch::Tensor& pred, const torch::Tensor& target, double beta, AverageOptions options) {
  check_beta(beta);
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

double cohen_kappa_value(const torch::Tensor& pred, const torch::Tensor& target, KappaWeights weights) {
  const auto counts = class_counts("cohen_kappa_score", pred, target);
  const int64_t k = counts.classes.numel();
  const auto expected = torch::outer(counts.actual, counts.predicted) / counts.actual.sum();  // by chance
  const auto place = torch::arange(k, torch::kDouble);
  const auto distance = (place.unsqueeze(1) - place.unsqueeze(0)).abs();
  const auto cost = weights == KappaWeights::linear    ? distance
                    : weights == KappaWeights::quadratic ? distance.square()
                                                         : distance.gt(0).to(torch::kDouble);
  const double chance = (cost * expected).sum().item<double>();  // 0: one class in common, undefined
  return chance == 0 ? std::nan("") : 1 - (cost * counts.matrix).sum().item<double>() / chance;
}

double binary_roc_auc(const torch::Tensor& scores, const torch::Tensor& target) {
  check_class_indices("roc_auc_score", target);
  const auto s = scores.detach().flatten().to(torch::kCPU, torch::kDouble);
  const auto t = target.detach().flatten().to(torch::kCPU, torch::kLong);
  if (s.numel() != t.numel())
    throw Error("roc_auc_score: " + std::to_string(s.numel()) + " scores for " + std::to_string(t.numel()) +
                " targets");
  if (const auto other = t.ne(0).logical_and(t.ne(1)).nonzero(); other.numel() > 0)
    throw Error("roc_auc_score: binary targets are 0 or 1, got " + std::to_string(t[other[0][0]].item<int64_t>()));
  if (!s.isfinite().all().item<bool>())  // a diverged model's: no order to rank
    throw Error("roc_auc_score: the scores hold nan or infinity");
  const double positives = static_cast<double>(t.sum().item<int64_t>());
  const double negatives = static_cast<double>(t.numel()) - positives;
  if (positives == 0 || negatives == 0)
    throw Error("roc_auc_score: only one class is present in the targets, and the area under the ROC curve needs both");
  // The Mann-Whitney statistic: the positives' ranks among all scores, tied scores sharing their mean rank.
  const auto [sorted, order] = s.sort();
  const auto ordered = t.index_select(0, order);
  const auto values = sorted.accessor<double, 1>();
  const auto classes = ordered.accessor<int64_t, 1>();
  const int64_t n = s.numel();
  double positive_ranks = 0;
  for (int64_t first = 0, last = 0; first < n; first = last) {
    while (last < n && values[last] == values[first]) ++last;
    const double rank = (static_cast<double>(first + 1) + static_cast<double>(last)) / 2;  // 1-based, averaged
    for (int64_t i = first; i < last; ++i) positive_ranks += static_cast<double>(classes[i]) * rank;
  }
  return (positive_ranks - positives * (positives + 1) / 2) / (positives * negatives);
}

MetricPtr precision(AverageOptions options) {
  return accumulated("precision_score", [options](const torch::Tensor& pred, const torch::Tensor& target) {
    return precision_value(pred, target, options);
  });
}

MetricPtr recall(AverageOptions options) {
  return accumulated("recall_score", [options](const torch::Tensor& pred, const torch::Tensor& target) {
    return recall_value(pred, target, options);
  });
}

MetricPtr f1_score(AverageOptions options) {
  return accumulated("f1_score", [options](const torch::Tensor& pred, const torch::Tensor& target) {
    return fbeta_value(pred, target, 1, options);
  });
}

MetricPtr fbeta(double beta, AverageOptions options) {
  check_beta(beta);
  return accumulated("fbeta_score", [beta, options](const torch::Tensor& pred, const torch::Tensor& target) {
    return fbeta_value(pred, target, beta, options);
  });
}

MetricPtr matthews_corrcoef() { return accumulated("matthews_corrcoef", matthews_corrcoef_value); }

MetricPtr balanced_accuracy() { return accumulated("balanced_accuracy_score", balanced_accuracy_value); }

MetricPtr precision_multi(MultiOptions options) {
  return accumulated("precision_score", [options](const torch::Tensor& pred, const torch::Tensor& target) {
    return multi_label_score(Score::precision, 0, "precision_score", pred, target, options);
  });
}

MetricPtr recall_multi(MultiOptions options) {
  return accumulated("recall_score", [options](const torch::Tensor& pred, const torch::Tensor& target) {
    return multi_label_score(Score::recall, 0, "recall_score", pred, target, options);
  });
}

MetricPtr f1_score_multi(MultiOptions options) {
  return accumulated("f1_score", [options](const torch::Tensor& pred, const torch::Tensor& target) {
    return multi_label_score(Score::fbeta, 1, "f1_score", pred, target, options);
  });
}

MetricPtr fbeta_multi(double beta, MultiOptions options) {
  check_beta(beta);
  return accumulated("fbeta_score", [beta, options](const torch::Tensor& pred, const torch::Tensor& target) {
    return multi_label_score(Score::fbeta, beta, "fbeta_score", pred, target, options);
  });
}

MetricPtr cohen_kappa(KappaWeights weights) {
  return accumulated("cohen_kappa_score", [weights](const torch::Tensor& pred, const torch::Tensor& target) {
    return cohen_kappa_value(pred, target, weights);
  });
}

MetricPtr roc_auc_binary() {
  return accumulated("roc_auc_score", [](const torch::Tensor& pred, const torch::Tensor& target) {
    const auto [probs, classes] = probabilities(pred, target);
    if (probs.size(1) != 2)
      throw Error("roc_auc_score: roc_auc_binary takes two outputs an item, got " + std::to_string(probs.size(1)) +
                  " (roc_auc: one class against the rest)");
    return binary_roc_auc(probs.select(1, 1), classes);
  });
}

MetricPtr roc_auc() {
  return accumulated("roc_auc_score", [](const torch::Tensor& pred, const torch::Tensor& target) {
    const auto [probs, classes] = probabilities(pred, target);
    const int64_t n = probs.size(1);
    const auto among_targets = std::get<0>(torch::_unique(classes)).numel();
    if (among_targets != n || classes.min().item<int64_t>() < 0 || classes.max().item<int64_t>() >= n)
      throw Error("roc_auc_score: one class against the rest needs each of the " + std::to_string(n) +
                  " classes among the targets, which hold " + std::to_string(among_targets));
    double total = 0;
    for (int64_t c = 0; c < n; ++c) total += binary_roc_auc(probs.select(1, c), classes.eq(c).to(torch::kLong));
    return total / static_cast<double>(n);
  });
}

}  // namespace fastcpp::metrics
