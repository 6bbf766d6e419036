#include "vision/segmentation_interpretation.h"

#include <torch/torch.h>

#include <algorithm>
#include <cstdio>

#include "core/error.h"

namespace fastcpp::vision {
namespace {

// The model in eval mode for a scope, as it was after.
class EvalMode {
 public:
  explicit EvalMode(torch::nn::Module& module) : module_(module), was_training_(module.is_training()) { module.eval(); }
  ~EvalMode() { module_.train(was_training_); }

 private:
  torch::nn::Module& module_;
  bool was_training_;
};

}  // namespace

SegmentationInterpretation SegmentationInterpretation::from_learner(Learner& learn, DataLoader* dl) {
  const DataLoader& source = dl ? *dl : learn.dls.valid;
  DataLoader loader = source.in_order().value_or(source);  // each item once, as fastai's
  const auto items = loader.order(loader.epoch());  // iterating moves the loader to its next epoch
  torch::NoGradGuard no_grad;
  EvalMode eval(learn.model.module());
  std::vector<torch::Tensor> losses;
  for (const auto& batch : loader) {
    const auto pred = learn.model(batch.x.to(learn.device));
    losses.push_back(learn.loss_func.per_item(pred, batch.y.to(learn.device)).to(torch::kCPU, torch::kFloat));
  }
  learn.loss_func.finish_checks();  // targets checked on the device: an out-of-range one is an error here
  if (losses.empty()) throw Error("SegmentationInterpretation: the loader has no items");
  return {learn, loader, torch::cat(losses), items};
}

SegmentationInterpretation::SegmentationInterpretation(Learner& learn, DataLoader dl, torch::Tensor losses,
                                                       std::vector<int64_t> items)
    : learn_(&learn), dl_(std::move(dl)), losses_(std::move(losses)), items_(std::move(items)) {
  items_.resize(static_cast<size_t>(losses_.size(0)));  // a short last batch dropped: fewer losses than items
}

std::vector<ItemLoss> SegmentationInterpretation::top_losses(size_t k, bool largest) const {
  k = std::min<size_t>(k, static_cast<size_t>(losses_.size(0)));
  const auto [values, positions] = losses_.topk(static_cast<int64_t>(k), 0, largest);
  std::vector<ItemLoss> top;
  for (size_t i = 0; i < k; ++i)
    top.push_back({items_[static_cast<size_t>(positions[static_cast<int64_t>(i)].item<int64_t>())],
                   values[static_cast<int64_t>(i)].item<double>()});
  return top;
}

std::string SegmentationInterpretation::top_losses_text(size_t k) const {
  std::string text = "item      loss\n";
  char line[64];
  for (const auto& [index, loss] : top_losses(k)) {
    std::snprintf(line, sizeof line, "%-8lld %.4f\n", static_cast<long long>(index), loss);
    text += line;
  }
  return text;
}

void SegmentationInterpretation::plot_top_losses(size_t k, const std::string& path, ShowOptions options) const {
  const auto top = top_losses(k);
  std::vector<int64_t> order;
  std::vector<std::string> captions;
  char caption[64];
  for (const auto& [index, loss] : top) {
    order.push_back(index);
    std::snprintf(caption, sizeof caption, "item %lld  loss %.3f", static_cast<long long>(index), loss);
    captions.emplace_back(caption);
  }
  if (!options.void_index) options.void_index = learn_->dls.void_index;
  torch::NoGradGuard no_grad;
  EvalMode eval(learn_->model.module());
  std::vector<torch::Tensor> images, targets, decided;
  const size_t batches = (order.size() + static_cast<size_t>(dl_.bs()) - 1) / static_cast<size_t>(dl_.bs());
  for (size_t b = 0; b < batches; ++b) {  // the loader's own batches of these items
    const auto batch = dl_.finish(dl_.make_batch(order, dl_.epoch(), b), dl_.epoch(), b);
    decided.push_back(learn_->model(batch.x.to(learn_->device)).argmax(1).to(torch::kCPU));
    images.push_back(decode_images(batch.x, dl_.options().batch_tfms));
    targets.push_back(batch.y.to(torch::kCPU));
  }
  write_mask_rows(path, torch::cat(images), {torch::cat(targets), torch::cat(decided)}, {"image", "target", "prediction"},
                  captions, options);
}

}  // namespace fastcpp::vision
