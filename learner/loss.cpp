#include "learner/loss.h"

#include <torch/torch.h>

#include <sstream>

#include "core/error.h"

namespace fastcpp {
namespace {

void check_class_targets(const torch::Tensor& pred, const torch::Tensor& target) {
  if (pred.dim() != 2)
    throw Error("CrossEntropyLoss: expected model output [batch, n_classes], got " + c10::str(pred.sizes()));
  if (target.dim() != 1 || target.size(0) != pred.size(0))
    throw Error("CrossEntropyLoss: expected " + std::to_string(pred.size(0)) + " class indices, got targets of shape " +
                c10::str(target.sizes()));
  if (!c10::isIntegralType(target.scalar_type(), /*includeBool=*/false))
    throw Error(std::string("CrossEntropyLoss: targets must be integer class indices, got ") +
                c10::toString(target.scalar_type()));
  const int64_t n_classes = pred.size(1);
  auto bad = (target < 0).logical_or_(target >= n_classes);
  if (!bad.any().item<bool>()) return;  // the one host sync of the check
  const int64_t position = bad.nonzero()[0][0].item<int64_t>();
  std::ostringstream msg;
  msg << "label " << target[position].item<int64_t>() << " at position " << position
      << " of the batch is outside [0, " << n_classes << "): the model has " << n_classes
      << " outputs; check the dataset's labels or the model's output size";
  throw Error(msg.str());
}

void check_same_shape(const torch::Tensor& pred, const torch::Tensor& target) {
  if (pred.sizes() != target.sizes())
    throw Error("MSELoss: prediction shape " + c10::str(pred.sizes()) + " differs from target shape " +
                c10::str(target.sizes()));
}

}  // namespace

torch::Tensor Loss::per_item(const torch::Tensor& pred, const torch::Tensor& target) const {
  if (per_item_) return per_item_(pred, target);
  std::vector<torch::Tensor> losses;
  for (int64_t i = 0; i < pred.size(0); ++i) losses.push_back(fn_(pred.narrow(0, i, 1), target.narrow(0, i, 1)).reshape({}));
  return torch::stack(losses);
}

Loss CrossEntropyLoss(CrossEntropyOptions options) {
  auto with_reduction = [options](torch::nn::functional::CrossEntropyFuncOptions::reduction_t reduction) {
    return [options, reduction](const torch::Tensor& pred, const torch::Tensor& target) {
      check_class_targets(pred, target);
      return torch::nn::functional::cross_entropy(
          pred, target.to(torch::kLong),
          torch::nn::functional::CrossEntropyFuncOptions().label_smoothing(options.label_smoothing).reduction(reduction));
    };
  };
  return Loss(with_reduction(torch::kMean), [](const torch::Tensor& pred) { return torch::softmax(pred, -1); },
              with_reduction(torch::kNone), "softmax");
}

Loss MSELoss() {
  return Loss(
      [](const torch::Tensor& pred, const torch::Tensor& target) {
        check_same_shape(pred, target);
        return torch::mse_loss(pred, target);
      },
      nullptr,
      [](const torch::Tensor& pred, const torch::Tensor& target) {  // the mean over each item's elements
        check_same_shape(pred, target);
        return torch::mse_loss(pred, target, at::Reduction::None).reshape({pred.size(0), -1}).mean(1);
      });
}

}  // namespace fastcpp
