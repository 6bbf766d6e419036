#pragma once
// Regression metrics, as fastai's: mse, mae and msle averaged over the batches
// (AvgMetrics, weighted by batch size), rmse, exp_rmspe and r2_score computed once over
// the whole set (AccumMetrics). Predictions and targets are flattened and must hold as
// many values.
#include "learner/metrics.h"

namespace fastcpp::metrics {

MetricPtr mse();        // mean squared error
MetricPtr rmse();       // its square root, over the set
MetricPtr mae();        // mean absolute error
MetricPtr msle();       // mean squared error of log(1 + x)
MetricPtr exp_rmspe();  // root mean squared percentage error of exp(x): for log targets (Rossmann's)
MetricPtr r2_score();   // 1 - residual / total sum of squares, scikit-learn's (1 or 0 for constant targets)

}  // namespace fastcpp::metrics
