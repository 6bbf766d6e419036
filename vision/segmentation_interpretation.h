#pragma once
// SegmentationInterpretation: the images a segmentation model does worst on, as fastai's.
//
//   auto interp = vision::SegmentationInterpretation::from_learner(learn);
//   std::cout << interp.top_losses_text(5);
//   interp.plot_top_losses(4, "top_losses.png");  // each image, its mask, the prediction
//
// Each image's loss is the loss function's per-item form (CrossEntropyLossFlat: the mean
// over its pixels, as fastai's get_preds(with_loss=True)). from_learner keeps only those
// losses, not the predictions ([items, classes, H, W] would be gigabytes for a
// CamVid-sized validation set); plot_top_losses predicts again for the k it draws.
#include <string>
#include <vector>

#include "learner/learner.h"
#include "vision/show.h"

namespace fastcpp::vision {

struct ItemLoss {
  int64_t index;  // item of the loader's dataset
  double loss;
};

class SegmentationInterpretation {
 public:
  // One pass over `dl` (default: the validation loader) in eval mode.
  static SegmentationInterpretation from_learner(Learner& learn, DataLoader* dl = nullptr);

  // Each item's loss, in the order of the loader's items ([items]).
  const torch::Tensor& losses() const { return losses_; }
  // The k items with the highest loss, highest first (largest = false: the lowest).
  std::vector<ItemLoss> top_losses(size_t k, bool largest = true) const;
  std::string top_losses_text(size_t k) const;
  // A PNG of the top k: rows of image, target mask and predicted mask, each with its loss.
  void plot_top_losses(size_t k, const std::string& path, ShowOptions options = {}) const;

 private:
  SegmentationInterpretation(Learner& learn, DataLoader dl, torch::Tensor losses, std::vector<int64_t> items);
  Learner* learn_;
  DataLoader dl_;
  torch::Tensor losses_;       // float, on the CPU
  std::vector<int64_t> items_;  // the dataset index of each loss
};

}  // namespace fastcpp::vision
