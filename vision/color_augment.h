#pragma once
// fastai's Saturation and Hue as batch augmentations, for aug_tfms after aug_transforms
// (fastai puts them in aug_transforms' xtra_tfms):
//
//   .aug_tfms = {vision::aug_transforms(), vision::saturation(), vision::hue()}
//
// Saturation blends each item's logits with their grey (ITU-R 601-2 luma) by a factor
// drawn log-uniform in [1 - max, 1 / (1 - max)] (above 1: more colourful); Hue turns each
// item's hue, in HSV, by a draw fastai makes the same way (its neutral is 0: the turn is
// the draw less a whole turn, within about [-max, max]). Each item draws with probability
// p (`batch`: one draw, taken or not, for the whole batch), from the batch's seed. Images
// come out as float in [0, 1] (uint8 read as x / 255); RGB images only; training only.
#include <cstdint>
#include <vector>

#include "data/batch_augment.h"

namespace fastcpp::vision {

struct ColorOptions {
  double max = 0.2;  // max_lighting for saturation (fastai's default 0.2); max_hue for hue (0.1)
  double p = 0.75;
  bool batch = false;
};

enum class ColorChange { saturation, hue };

class ColorAugment : public BatchAugment {
 public:
  ColorAugment(ColorChange change, ColorOptions options);
  Batch apply(Batch batch, uint64_t seed) const override;

  // Each of n items' factor (saturation; 1: unchanged) or turn (hue; 0: unchanged).
  std::vector<double> draw(size_t n, uint64_t seed) const;
  Batch apply_draws(Batch batch, const std::vector<double>& draws) const;

 private:
  ColorChange change_;
  ColorOptions options_;
};

BatchAugmentPtr saturation(ColorOptions options = {});
BatchAugmentPtr hue(ColorOptions options = {.max = 0.1});

}  // namespace fastcpp::vision
