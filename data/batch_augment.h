#pragma once
// BatchAugment: a random transform of whole batches (fastai's batch transforms with
// draws, such as vision::aug_transforms) that acts on x and y together, on the batch's
// device, before the loader's batch_tfms (or after them, where it says so). Its draws
// come from the batch's seed, which (loader seed, epoch, batch index) alone decide, so an
// augmented run is as reproducible as an item-transformed one, on any device and with any
// worker count.
//
// Augmentation belongs to training data: put it in the training loader's aug_tfms, and
// its validation() form (nothing, or only its resize) in the validation loader's, as the
// data factories do (fastai's split_idx).
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/dataset.h"

namespace fastcpp {

class BatchAugment {
 public:
  virtual ~BatchAugment() = default;
  // The batch with this transform's draws for `seed`. Must be thread-safe (const).
  virtual Batch apply(Batch batch, uint64_t seed) const = 0;
  // What validation batches get instead: nullptr for nothing.
  virtual std::shared_ptr<const BatchAugment> validation() const { return nullptr; }
  // Its text form, which an exported model carries for its validation batches; empty: none.
  virtual std::string spec() const { return ""; }
  // Whether it runs after the loader's batch_tfms (fastai's order past Normalize: the
  // values it writes are in normalized units) rather than before.
  virtual bool after_batch_tfms() const { return false; }
};

using BatchAugmentPtr = std::shared_ptr<const BatchAugment>;

// The validation forms of a training loader's aug_tfms (those that have one).
inline std::vector<BatchAugmentPtr> validation_forms(const std::vector<BatchAugmentPtr>& augments) {
  std::vector<BatchAugmentPtr> forms;
  for (const auto& augment : augments)
    if (auto form = augment->validation()) forms.push_back(std::move(form));
  return forms;
}

}  // namespace fastcpp
