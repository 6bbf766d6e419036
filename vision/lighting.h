#pragma once
// The lighting transforms' space (fastai's LightingTfm): images as float in [0, 1], and
// their logits, where brightness, contrast and saturation are changed.
#include <torch/torch.h>

#include <algorithm>
#include <cmath>

namespace fastcpp::vision {

// fastai's logit, clamped away from 0 and 1.
inline torch::Tensor clamped_logit(const torch::Tensor& x) { return -(1 / x.clamp(1e-7, 1 - 1e-7) - 1).log(); }
inline double clamped_logit(double v) {
  v = std::clamp(v, 1e-7, 1 - 1e-7);
  return -std::log(1 / v - 1);
}

// An image batch as float in [0, 1] (uint8 read as x / 255).
inline torch::Tensor to_unit_float(const torch::Tensor& x) {
  if (x.is_floating_point()) return x;
  return x.to(torch::kFloat).div_(255);
}

}  // namespace fastcpp::vision
