#pragma once
// Single-label classification metrics over the whole validation set, as fastai's
// wrappers of scikit-learn (Precision, Recall, F1Score, FBeta, MatthewsCorrCoef,
// BalancedAccuracy, CohenKappa, RocAuc, RocAucBinary): AccumMetrics, since they do not decompose
// over batches. The predicted class is the argmax of the last axis; averages, the
// classes they run over and the cases without a value (0) are scikit-learn's.
//
//   Learner learn(dls, model, CrossEntropyLoss(),
//                 {metrics::f1_score({.average = metrics::Average::macro}), metrics::roc_auc()});
#include <torch/types.h>

#include "learner/metrics.h"

namespace fastcpp::metrics {

// How the classes' scores combine (scikit-learn's `average`).
enum class Average {
  binary,    // pos_label's score alone; the targets and predictions hold at most two classes
  macro,     // the mean over the classes in the targets or the predictions
  micro,     // one score from all classes' counts together (single-label: the accuracy)
  weighted,  // the mean weighted by each class's number of targets
};

struct AverageOptions {
  Average average = Average::binary;  // fastai's default
  int64_t pos_label = 1;
};

MetricPtr precision(AverageOptions options = {});  // shown as fastai's: "precision_score"
MetricPtr recall(AverageOptions options = {});     // "recall_score"
MetricPtr f1_score(AverageOptions options = {});   // "f1_score"
MetricPtr fbeta(double beta, AverageOptions options = {});  // "fbeta_score"
MetricPtr matthews_corrcoef();  // multi-class too (scikit-learn's generalisation)
MetricPtr balanced_accuracy();  // the mean recall over the classes in the targets

// Cohen's kappa: agreement of predictions and targets beyond chance. Weighted, a
// disagreement costs the distance between the two classes' places among those present
// (linear) or its square (quadratic): for ordered classes (a grade, a severity).
enum class KappaWeights { none, linear, quadratic };
MetricPtr cohen_kappa(KappaWeights weights = KappaWeights::none);  // "cohen_kappa_score"; NaN where undefined
// The area under the ROC curve of softmax(pred)[:, 1] (two outputs, fastai's
// RocAucBinary), and of each class's probability against the rest, averaged over the
// classes (RocAuc: one-vs-rest, macro; every class must be among the targets).
MetricPtr roc_auc_binary();
MetricPtr roc_auc();

// Multi-label targets ([N, labels] of 0 and 1; fastai's PrecisionMulti, RecallMulti,
// F1ScoreMulti, FBetaMulti): a label is predicted where sigmoid(pred) >= thresh (the raw
// scores where sigmoid is false); named as the single-label ones, as fastai names them.
//   metrics::fbeta_multi(2, {.average = metrics::MultiAverage::samples})
enum class MultiAverage {
  macro,     // the mean over every label (fastai's default)
  micro,     // one score from all labels' counts together
  weighted,  // the mean weighted by each label's number of targets
  samples,   // each item's score over its labels, averaged over the items
};
struct MultiOptions {
  double thresh = 0.5;
  bool sigmoid = true;
  MultiAverage average = MultiAverage::macro;
};
MetricPtr precision_multi(MultiOptions options = {});
MetricPtr recall_multi(MultiOptions options = {});
MetricPtr f1_score_multi(MultiOptions options = {});
MetricPtr fbeta_multi(double beta, MultiOptions options = {});

// What they compute, from pred [N, C] scores and target [N] class indices.
double fbeta_value(const torch::Tensor& pred, const torch::Tensor& target, double beta, AverageOptions options = {});
double precision_value(const torch::Tensor& pred, const torch::Tensor& target, AverageOptions options = {});
double recall_value(const torch::Tensor& pred, const torch::Tensor& target, AverageOptions options = {});
double matthews_corrcoef_value(const torch::Tensor& pred, const torch::Tensor& target);
double balanced_accuracy_value(const torch::Tensor& pred, const torch::Tensor& target);
double cohen_kappa_value(const torch::Tensor& pred, const torch::Tensor& target,
                         KappaWeights weights = KappaWeights::none);
// From scores of the positive class [N] and 0/1 targets [N]: ties count a half.
double binary_roc_auc(const torch::Tensor& scores, const torch::Tensor& target);

}  // namespace fastcpp::metrics
