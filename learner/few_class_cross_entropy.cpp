#include "learner/few_class_cross_entropy.h"

#include <ATen/Parallel.h>
#include <ATen/Version.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>

namespace fastcpp {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Rows a thread takes at least: below this a batch stays on one thread, where waking the
// others would cost more than the rows.
int64_t rows_per_task(int64_t classes) { return std::max<int64_t>(1, 16384 / classes); }

// One row's loss: log-sum-exp minus the smoothed target's share of the logits, (1 - eps) of
// the label's and eps of their mean. Its softmax goes to `probs` where given.
float row_loss(const float* x, int64_t label, int64_t classes, float smoothing, float* probs) {
  float max = x[0], logit_sum = 0, exp_sum = 0;
  for (int64_t j = 1; j < classes; ++j) max = std::max(max, x[j]);
  for (int64_t j = 0; j < classes; ++j) {
    const float e = std::exp(x[j] - max);
    if (probs) probs[j] = e;
    exp_sum += e;
    logit_sum += x[j];
  }
  if (probs)
    for (int64_t j = 0; j < classes; ++j) probs[j] /= exp_sum;
  const float log_sum_exp = max + std::log(exp_sum);
  return log_sum_exp - (1 - smoothing) * x[label] - smoothing * logit_sum / static_cast<float>(classes);
}

// Each row's loss, and each row's softmax into `probs` where defined; then their mean, or
// the losses themselves.
torch::Tensor cross_entropy(const torch::Tensor& pred, const torch::Tensor& labels, double label_smoothing,
                            bool mean, const torch::Tensor& probs) {
  const int64_t rows = pred.size(0), classes = pred.size(1);
  auto losses = torch::empty({rows}, pred.options());
  const float* x = pred.const_data_ptr<float>();
  const int64_t* label = labels.const_data_ptr<int64_t>();
  float* p = probs.defined() ? probs.data_ptr<float>() : nullptr;
  float* loss = losses.data_ptr<float>();
  const auto smoothing = static_cast<float>(label_smoothing);
  at::parallel_for(0, rows, rows_per_task(classes), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r)
      loss[r] = row_loss(x + r * classes, label[r], classes, smoothing, p ? p + r * classes : nullptr);
  });
  if (!mean) return losses;
  double total = 0;
  for (int64_t r = 0; r < rows; ++r) total += loss[r];
  return torch::full({}, total / static_cast<double>(rows), pred.options());
}

struct FewClassCrossEntropy : torch::autograd::Function<FewClassCrossEntropy> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& pred, const torch::Tensor& labels,
                               double label_smoothing, bool mean) {
    auto probs = torch::empty_like(pred);
    auto loss = cross_entropy(pred, labels, label_smoothing, mean, probs);
    ctx->save_for_backward({pred, labels, probs});
    ctx->saved_data["smoothing"] = label_smoothing;
    ctx->saved_data["mean"] = mean;
    return loss;
  }

  // d loss_r / d x_rj = p_rj - target_rj, where the smoothed target is (1 - eps) at the label
  // and eps / classes everywhere.
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto &pred = saved[0], &labels = saved[1], &probs = saved[2];
    const auto smoothing = ctx->saved_data["smoothing"].toDouble();
    const bool mean = ctx->saved_data["mean"].toBool();
    const int64_t rows = probs.size(0), classes = probs.size(1);
    const auto& grad = grads[0];
    if (torch::GradMode::is_enabled()) {  // a second derivative asked for: the same in differentiable operators
      const auto target =
          torch::one_hot(labels, classes).to(pred.scalar_type()) * (1 - smoothing) + smoothing / classes;
      const auto scale = mean ? grad / static_cast<double>(rows) : grad.unsqueeze(1);
      return {(torch::softmax(pred, 1) - target) * scale, {}, {}, {}};
    }
    auto dx = torch::empty_like(probs);
    const auto row_grads = (mean ? grad.expand({rows}) : grad).to(torch::kFloat).contiguous();
    const float* g = row_grads.const_data_ptr<float>();
    const float* p = probs.const_data_ptr<float>();
    const int64_t* label = labels.const_data_ptr<int64_t>();
    float* d = dx.data_ptr<float>();
    const float spread = static_cast<float>(smoothing / classes), at_label = static_cast<float>(1 - smoothing);
    const float per_row = mean ? 1.0f / static_cast<float>(rows) : 1.0f;
    at::parallel_for(0, rows, rows_per_task(classes), [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const float scale = g[r] * per_row;
        const float* pr = p + r * classes;
        float* dr = d + r * classes;
        for (int64_t j = 0; j < classes; ++j) dr[j] = scale * (pr[j] - spread);
        dr[label[r]] -= scale * at_label;
      }
    });
    return {dx, {}, {}, {}};
  }
};

}  // namespace

bool takes_few_class_path(const torch::Tensor& pred) {
  static const int64_t vector_width = at::get_cpu_capability() == "AVX512" ? 16 : 8;  // floats
  return pred.device().is_cpu() && pred.scalar_type() == torch::kFloat && pred.dim() == 2 && pred.size(1) > 0 &&
         pred.size(1) < vector_width && pred.is_contiguous();
}

torch::Tensor few_class_cross_entropy(const torch::Tensor& pred, const torch::Tensor& labels, double label_smoothing,
                                      bool mean) {
  if (torch::GradMode::is_enabled() && pred.requires_grad())
    return FewClassCrossEntropy::apply(pred, labels.contiguous(), label_smoothing, mean);
  return cross_entropy(pred, labels.contiguous(), label_smoothing, mean, {});  // validation: no graph, no softmax kept
}

}  // namespace fastcpp
