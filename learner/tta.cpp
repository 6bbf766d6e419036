// Learner::tta: predictions averaged over augmented copies of the items, blended with
// the plain predictions (fastai's defaults: 4 passes, beta 0.25).
#include "core/error.h"
#include "learner/learner.h"

namespace fastcpp {

Preds Learner::tta(TtaOptions options) {
  DataLoader& plain = options.dl ? *options.dl : dls.valid;
  if (options.n < 1) throw Error("tta: n must be at least 1, got " + std::to_string(options.n));
  if (options.beta < 0 || options.beta > 1) throw Error("tta: beta must be in [0, 1], got " + std::to_string(options.beta));
  // A target laid out over the image (a mask, boxes, points) would be compared with
  // predictions of flipped, cropped or warped copies, nothing mapping them back.
  if (plain.n_items() == 0) throw Error("tta: the loader has no items");
  if (const auto y = plain.dataset().get(0).y; y.dim() >= 2)
    throw Error("tta: the targets have a place in the image (an item's is " + c10::str(y.sizes()) +
                "): averaged predictions of flipped or cropped copies would be out of place; use get_preds");
  // As fastai's, which runs the loader in training mode: the items' training transforms
  // and the training batches' augmentation (flips, warps, lighting), where there are any.
  auto augmented_items = plain.dataset().augmented();
  const auto& batch_augments = dls.train.options().aug_tfms;
  if (!augmented_items && batch_augments.empty())
    throw Error("tta: there are no random transforms to apply (the loader's dataset has no augmented() form and "
                "the training loader no aug_tfms); give the items training-time transforms (ImageFolder's "
                "item_tfms) or the loaders batch augmentation (vision::aug_transforms)");
  auto loader_options = plain.options();
  if (!batch_augments.empty()) loader_options.aug_tfms = batch_augments;
  DataLoader augmented(augmented_items ? augmented_items : plain.dataset_ptr(), loader_options);
  augmented.to(plain.device());

  // get_preds draws the transforms of the Learner's epoch: pass i is epoch i (as in
  // fastai), whatever fits came before, so each pass sees other draws and every call, in
  // any process, the same ones.
  struct RestoreEpoch {
    Learner& learn;
    int epoch;
    int64_t epochs_before;
    ~RestoreEpoch() {
      learn.epoch = epoch;
      learn.epochs_before = epochs_before;
    }
  } restore{*this, epoch, epochs_before};
  std::vector<torch::Tensor> passes;
  epochs_before = 0;
  for (epoch = 0; epoch < options.n; ++epoch) passes.push_back(get_preds(&augmented).preds);
  epoch = restore.epoch;
  epochs_before = restore.epochs_before;
  Preds result = get_preds(&plain);
  if (options.use_max) {
    passes.push_back(result.preds);
    result.preds = std::get<0>(torch::stack(passes).max(0));
  } else {
    result.preds = torch::lerp(torch::stack(passes).mean(0), result.preds, options.beta);
  }
  return result;
}

}  // namespace fastcpp
