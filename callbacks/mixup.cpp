#include "callbacks/mixup.h"

#include <torch/torch.h>

#include "core/device.h"
#include "core/error.h"
#include "learner/learner.h"

namespace fastcpp {

MixHandler::MixHandler(double alpha) : alpha_(alpha) {
  if (alpha <= 0) throw Error("MixUp/CutMix: alpha must be positive, got " + std::to_string(alpha));
  run_valid = false;
}

void MixHandler::before_train() {
  auto& l = learn();
  plain_loss_ = l.loss_func;
  const Loss plain = l.loss_func;
  l.loss_func = Loss(
      [batch = batch_, plain](const torch::Tensor& pred, const torch::Tensor& y) {
        if (!batch->shuffled_y.defined()) return plain(pred, y);
        // The batch's own labels checked first: a bad one is named at its own position.
        const auto own = plain.per_item(pred, y);
        return torch::lerp(plain.per_item(pred, batch->shuffled_y), own, batch->lam).mean();
      },
      [plain](const torch::Tensor& pred) { return plain.activation(pred); },
      [plain](const torch::Tensor& pred, const torch::Tensor& y) { return plain.per_item(pred, y); },
      plain.activation_name());
  l.loss_func.share_checks(plain.checks());
}

void MixHandler::after_train() {
  if (plain_loss_) learn().loss_func = *plain_loss_;
  plain_loss_.reset();
  batch_->shuffled_y = torch::Tensor();
}

torch::Tensor MixHandler::sample_beta(int64_t n) const {
  // Beta(a, b) is the first coordinate of Dirichlet(a, b): torch.distributions' way.
  torch::NoGradGuard no_grad;
  const auto concentration = torch::tensor({alpha_, alpha_}, torch::kFloat).expand({n, 2});
  return at::_sample_dirichlet(concentration).select(-1, 0);
}

void MixHandler::mix_targets(const torch::Tensor& shuffle) {
  auto& l = learn();
  const auto shuffled = l.yb.index_select(0, shuffle);
  if (c10::isIntegralType(l.yb.scalar_type(), /*includeBool=*/true)) {
    batch_->shuffled_y = shuffled;
    if (plain_loss_ && !plain_loss_->has_per_item() && !said_per_item_ && l.logger) {
      l.logger("MixUp/CutMix: the loss has no unreduced form, so each item's loss is a call of its own (" +
               std::to_string(l.yb.size(0)) + " a batch): give Loss its per_item function to make them one call");
      said_per_item_ = true;
    }
    return;
  }
  batch_->shuffled_y = torch::Tensor();
  auto weight = batch_->lam;
  while (weight.dim() < l.yb.dim()) weight = weight.unsqueeze(-1);
  l.yb = torch::lerp(shuffled, l.yb, weight.to(l.yb.dtype()));
}

void MixUp::before_batch() {
  auto& l = learn();
  const int64_t bs = l.yb.size(0);
  const auto draws = to_device_async(sample_beta(bs), l.xb.device());
  batch_->lam = torch::max(draws, 1 - draws);
  const auto shuffle = to_device_async(torch::randperm(bs, torch::kLong), l.xb.device());
  auto weight = batch_->lam;
  while (weight.dim() < l.xb.dim()) weight = weight.unsqueeze(-1);
  l.xb = torch::lerp(l.xb.index_select(0, shuffle), l.xb, weight.to(l.xb.dtype()));
  mix_targets(shuffle);
}

void CutMix::before_batch() {
  auto& l = learn();
  if (l.xb.dim() != 4) throw Error("CutMix: expected image batches [bs, c, h, w], got " + c10::str(l.xb.sizes()));
  const int64_t bs = l.xb.size(0), height = l.xb.size(2), width = l.xb.size(3);
  const auto draw = sample_beta(1);
  const auto shuffle = to_device_async(torch::randperm(bs, torch::kLong), l.xb.device());
  // The box: sides sqrt(1 - draw) of the image's (in float32, as fastai), centred at a
  // uniform pixel, clipped.
  const auto cut = torch::sqrt(1 - draw);
  const int64_t cut_w = torch::round(cut * width).item<int64_t>(), cut_h = torch::round(cut * height).item<int64_t>();
  const int64_t cx = torch::randint(0, width, {1}, torch::kLong).item<int64_t>();
  const int64_t cy = torch::randint(0, height, {1}, torch::kLong).item<int64_t>();
  const int64_t x1 = std::clamp<int64_t>(cx - cut_w / 2, 0, width), x2 = std::clamp<int64_t>(cx + cut_w / 2, 0, width);
  const int64_t y1 = std::clamp<int64_t>(cy - cut_h / 2, 0, height), y2 = std::clamp<int64_t>(cy + cut_h / 2, 0, height);
  l.xb = l.xb.clone();
  l.xb.narrow(2, y1, y2 - y1).narrow(3, x1, x2 - x1).copy_(
      l.xb.index_select(0, shuffle).narrow(2, y1, y2 - y1).narrow(3, x1, x2 - x1));
  batch_->lam = torch::full({1}, 1 - static_cast<double>((x2 - x1) * (y2 - y1)) / static_cast<double>(width * height),
                    l.xb.options().dtype(torch::kFloat));
  mix_targets(shuffle);
}

}  // namespace fastcpp
