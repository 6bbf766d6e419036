#pragma once
// random_erasing: fastai's RandomErasing (Zhong et al., 2017) as a batch augmentation. With
// probability p an item gets 1 to max_count rectangles (uniform), each of sl to sh of the
// image's area divided by the count, of an aspect ratio log-uniform in [min_aspect,
// 1/min_aspect], at a random place (cut where it would pass the edge), its pixels
// replaced by N(0, 1) noise in every channel. It runs after the loader's batch_tfms, as
// fastai's (order 100, after Normalize): the noise is in normalized units.
//
//   .aug_tfms = {vision::aug_transforms(), vision::random_erasing()}
//
// Each item draws its own rectangles and its own noise (fastai's erases the same
// rectangles in every item of a batch, all or none: `batch`). Training only: validation
// batches get nothing. Masks and boxes stay as they are (only the pixels change).
#include <cstdint>
#include <vector>

#include "data/batch_augment.h"

namespace fastcpp::vision {

struct RandomErasingOptions {
  double p = 0.5;            // an item's chance of being erased
  double sl = 0.0;           // the smallest share of the area (per rectangle: of area / count)
  double sh = 0.3;           // the largest
  double min_aspect = 0.3;   // height / width drawn log-uniform in [min_aspect, 1 / min_aspect]
  int max_count = 1;         // rectangles per erased item: 1 to max_count
  bool batch = false;        // one draw for the whole batch, as fastai's
};

// One rectangle in pixels.
struct ErasedArea {
  int64_t row = 0, col = 0, height = 0, width = 0;
};

class RandomErasing : public BatchAugment {
 public:
  explicit RandomErasing(RandomErasingOptions options = {});
  Batch apply(Batch batch, uint64_t seed) const override;
  bool after_batch_tfms() const override { return true; }

  // The rectangles of each of n items of `height` x `width` (none: not erased).
  std::vector<std::vector<ErasedArea>> draw(size_t n, int64_t height, int64_t width, uint64_t seed) const;
  // The batch with these rectangles filled with noise drawn from `seed`.
  Batch apply_draws(Batch batch, const std::vector<std::vector<ErasedArea>>& draws, uint64_t seed) const;
  const RandomErasingOptions& options() const { return options_; }

 private:
  RandomErasingOptions options_;
};

BatchAugmentPtr random_erasing(RandomErasingOptions options = {});

}  // namespace fastcpp::vision
