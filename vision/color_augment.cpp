#include "vision/color_augment.h"

#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "core/error.h"
#include "data/random.h"
#include "vision/lighting.h"

namespace fastcpp::vision {
namespace {

const char* name_of(ColorChange change) { return change == ColorChange::saturation ? "saturation" : "hue"; }

// fastai's rgb2hsv: hue in [0, 1), saturation, value; a grey pixel has hue 0.
torch::Tensor rgb_to_hsv(const torch::Tensor& rgb) {
  const auto r = rgb.select(1, 0), g = rgb.select(1, 1), b = rgb.select(1, 2);
  const auto max = std::get<0>(rgb.max(1)), min = std::get<0>(rgb.min(1));
  const auto grey = max == min, range = max - min;
  const auto one = torch::ones({}, rgb.options());
  const auto s = range / torch::where(grey, one, max);
  const auto divisor = torch::where(grey, one, range);
  const auto rc = (max - r) / divisor, gc = (max - g) / divisor, bc = (max - b) / divisor;
  const auto h = (max == r) * (bc - gc) + ((max == g) & (max != r)) * (2.0 + rc - bc) +
                 ((max != g) & (max != r)) * (4.0 + gc - rc);
  return torch::stack({torch::fmod(h / 6.0 + 1.0, 1.0), s, max}, 1);
}

// fastai's hsv2rgb: each channel one of v, p, q, t by the hue's sixth.
torch::Tensor hsv_to_rgb(const torch::Tensor& hsv) {
  const auto h = hsv.select(1, 0), s = hsv.select(1, 1), v = hsv.select(1, 2);
  const auto sixth = torch::floor(h * 6.0);
  const auto f = h * 6.0 - sixth;
  const auto p = (v * (1.0 - s)).clamp(0, 1), q = (v * (1.0 - s * f)).clamp(0, 1),
             t = (v * (1.0 - s * (1.0 - f))).clamp(0, 1);
  const auto which = torch::remainder(sixth.to(torch::kInt), 6).to(torch::kLong).unsqueeze(1);
  const auto pick = [&](std::initializer_list<torch::Tensor> by_sixth) {
    return torch::stack(std::vector<torch::Tensor>(by_sixth), 1).gather(1, which).squeeze(1);
  };
  return torch::stack({pick({v, q, p, p, t, v}), pick({t, v, v, q, p, p}), pick({p, p, t, v, v, q})}, 1);
}

}  // namespace

ColorAugment::ColorAugment(ColorChange change, ColorOptions options) : change_(change), options_(options) {
  const std::string who = name_of(change);
  if (!(options.max >= 0 && options.max < 1)) throw Error(who + ": max must be in [0, 1), got " + c10::str(options.max));
  if (!(options.p >= 0 && options.p <= 1)) throw Error(who + ": p must be in [0, 1], got " + c10::str(options.p));
}

std::vector<double> ColorAugment::draw(size_t n, uint64_t seed) const {
  const double low = std::log(1 - options_.max), neutral = change_ == ColorChange::saturation ? 1 : 0;
  std::vector<double> draws(n, neutral);
  for (size_t k = 0; k < n; ++k) {
    if (options_.batch && k > 0) {
      draws[k] = draws[0];
      continue;
    }
    Rng rng(mix_seed(seed, k));
    if (rng.bernoulli(options_.p)) draws[k] = std::exp(rng.uniform(low, -low));
  }
  return draws;
}

Batch ColorAugment::apply_draws(Batch batch, const std::vector<double>& draws) const {
  const std::string who = name_of(change_);
  if (!batch.x.defined() || batch.x.dim() != 4 || batch.x.size(1) != 3)
    throw Error(who + ": expects RGB images [batch, 3, height, width], got " +
                (batch.x.defined() ? c10::str(batch.x.sizes()) : std::string("none")));
  const int64_t n = batch.x.size(0);
  if (draws.size() != static_cast<size_t>(n))
    throw Error(who + ": " + std::to_string(draws.size()) + " draws for a batch of " + std::to_string(n));
  auto x = to_unit_float(batch.x);
  const double neutral = change_ == ColorChange::saturation ? 1 : 0;
  if (std::all_of(draws.begin(), draws.end(), [&](double d) { return d == neutral; })) {
    batch.x = x;
    return batch;
  }
  const auto change = torch::tensor(draws, torch::kDouble).to(x.scalar_type()).to(x.device(), /*non_blocking=*/true);
  if (change_ == ColorChange::saturation) {  // in logit space, toward the grey or away from it
    const auto logits = clamped_logit(x);
    const auto luma = torch::tensor({0.2989, 0.5870, 0.1140}, x.options()).view({1, 3, 1, 1});
    const auto grey = (logits * luma).sum(1, /*keepdim=*/true);
    const auto c = change.view({n, 1, 1, 1});
    batch.x = torch::sigmoid(logits * c + grey * (1 - c));
  } else {
    auto hsv = rgb_to_hsv(x);
    const auto turned = torch::remainder(hsv.select(1, 0) + change.view({n, 1, 1}), 1.0);
    batch.x = hsv_to_rgb(torch::stack({turned, hsv.select(1, 1), hsv.select(1, 2)}, 1));
  }
  return batch;
}

Batch ColorAugment::apply(Batch batch, uint64_t seed) const {
  if (!batch.x.defined() || batch.x.dim() != 4) return apply_draws(std::move(batch), {});  // names the shape
  const auto stream = mix_seed(seed, change_ == ColorChange::saturation ? 0x736174ULL : 0x687565ULL);
  const auto draws = draw(static_cast<size_t>(batch.x.size(0)), stream);
  return apply_draws(std::move(batch), draws);
}

BatchAugmentPtr saturation(ColorOptions options) {
  return std::make_shared<ColorAugment>(ColorChange::saturation, options);
}
BatchAugmentPtr hue(ColorOptions options) { return std::make_shared<ColorAugment>(ColorChange::hue, options); }

}  // namespace fastcpp::vision
