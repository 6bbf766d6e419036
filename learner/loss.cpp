#include "learner/loss.h"

#include <torch/torch.h>

#include <sstream>

#include "core/error.h"
#include "learner/class_indices.h"
#include "learner/few_class_cross_entropy.h"

namespace fastcpp {
namespace {

std::string label_error(int64_t label, int64_t position, const char* batch, int64_t n_classes) {
  std::ostringstream msg;
  msg << "label " << label << " at position " << position << " of " << batch << " is outside [0, " << n_classes
      << "): the model has " << n_classes << " outputs; check the dataset's labels or the model's output size";
  return msg.str();
}

// Checks the targets; returns them as the kernel may read them.
torch::Tensor check_class_targets(const torch::Tensor& pred, const torch::Tensor& target, DeviceCheck& checks) {
  if (pred.dim() != 2)
    throw Error("CrossEntropyLoss: expected model output [batch, n_classes], got " + c10::str(pred.sizes()));
  if (target.dim() != 1 || target.size(0) != pred.size(0))
    throw Error("CrossEntropyLoss: expected " + std::to_string(pred.size(0)) + " class indices, got targets of shape " +
                c10::str(target.sizes()));
  if (!c10::isIntegralType(target.scalar_type(), /*includeBool=*/false))
    throw Error(std::string("CrossEntropyLoss: targets must be integer class indices, got ") +
                c10::toString(target.scalar_type()));
  const int64_t n_classes = pred.size(1);
  return checked_class_indices(target, n_classes, std::nullopt, checks,
                               [n_classes](int64_t label, int64_t position, const char* batch) {
                                 return label_error(label, position, batch, n_classes);
                               });
}

void check_same_shape(const torch::Tensor& pred, const torch::Tensor& target, const char* loss = "MSELoss") {
  if (pred.sizes() != target.sizes())
    throw Error(std::string(loss) + ": prediction shape " + c10::str(pred.sizes()) + " differs from target shape " +
                c10::str(target.sizes()));
}

// Multi-hot targets as the loss reads them (float, of pred's type).
torch::Tensor check_multi_hot(const torch::Tensor& pred, const torch::Tensor& target) {
  check_same_shape(pred, target, "BCEWithLogitsLoss");
  return target.to(pred.scalar_type());
}

}  // namespace

torch::Tensor Loss::per_item(const torch::Tensor& pred, const torch::Tensor& target) const {
  if (per_item_) {
    // An unreduced form that keeps each item's positions ([batch, H, W], a user's): each item's mean.
    const auto losses = per_item_(pred, target);
    return losses.dim() > 1 ? losses.flatten(1).mean(1) : losses;
  }
  std::vector<torch::Tensor> losses;
  for (int64_t i = 0; i < pred.size(0); ++i) losses.push_back(fn_(pred.narrow(0, i, 1), target.narrow(0, i, 1)).reshape({}));
  return torch::stack(losses);
}

Loss CrossEntropyLoss(CrossEntropyOptions options) {
  if (!(options.label_smoothing >= 0 && options.label_smoothing <= 1))
    throw Error("CrossEntropyLoss: label_smoothing must be in [0, 1], got " + c10::str(options.label_smoothing));
  auto checks = std::make_shared<DeviceCheck>();
  auto with_reduction = [options, checks](torch::nn::functional::CrossEntropyFuncOptions::reduction_t reduction) {
    return [options, reduction, checks](const torch::Tensor& pred, const torch::Tensor& target) {
      const auto labels = check_class_targets(pred, target, *checks);
      if (takes_few_class_path(pred) && labels.is_cpu())  // else torch's error for labels elsewhere
        return few_class_cross_entropy(pred, labels, options.label_smoothing,
                                       std::holds_alternative<torch::enumtype::kMean>(reduction));
      return torch::nn::functional::cross_entropy(
          pred, labels,
          torch::nn::functional::CrossEntropyFuncOptions().label_smoothing(options.label_smoothing).reduction(reduction));
    };
  };
  return Loss(with_reduction(torch::kMean), [](const torch::Tensor& pred) { return torch::softmax(pred, -1); },
              with_reduction(torch::kNone), "softmax")
      .share_checks(checks);
}

Loss BCEWithLogitsLoss() {
  return Loss(
      [](const torch::Tensor& pred, const torch::Tensor& target) {
        return torch::binary_cross_entropy_with_logits(pred, check_multi_hot(pred, target));
      },
      [](const torch::Tensor& pred) { return torch::sigmoid(pred); },
      [](const torch::Tensor& pred, const torch::Tensor& target) {  // per_item averages each item's classes
        return torch::binary_cross_entropy_with_logits(pred, check_multi_hot(pred, target), {}, {}, at::Reduction::None);
      },
      "sigmoid");
}

Loss MSELoss() {
  return Loss(
      [](const torch::Tensor& pred, const torch::Tensor& target) {
        check_same_shape(pred, target);
        return torch::mse_loss(pred, target);
      },
      nullptr,
      [](const torch::Tensor& pred, const torch::Tensor& target) {  // per_item averages each item's elements
        check_same_shape(pred, target);
        return torch::mse_loss(pred, target, at::Reduction::None);
      });
}

}  // namespace fastcpp
