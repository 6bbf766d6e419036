#pragma once
// ClassificationInterpretation: where a classifier goes wrong, as fastai's.
//
//   auto interp = vision::ClassificationInterpretation::from_learner(learn);
//   std::cout << interp.confusion_matrix_text();
//   interp.plot_confusion_matrix("confusion.png");   // needs OpenCV
//   interp.plot_top_losses(9, "top_losses.png");     // needs OpenCV
#include <string>
#include <vector>

#include "learner/learner.h"

namespace fastcpp::vision {

struct TopLoss {
  int64_t index;   // item of the dataset
  double loss;
  int64_t actual, predicted;
  double probability;  // of the predicted class
};

struct Confusion {
  std::string actual, predicted;
  int64_t count;
};

class ClassificationInterpretation {
 public:
  // Predictions and per-item losses over `dl` (default: the validation loader).
  static ClassificationInterpretation from_learner(Learner& learn, DataLoader* dl = nullptr);
  ClassificationInterpretation(DataLoader dl, std::vector<std::string> vocab, Preds preds);

  // [n_classes, n_classes] counts: row = actual class, column = predicted.
  torch::Tensor confusion_matrix() const;
  // Off-diagonal cells with at least min_count items, most frequent first.
  std::vector<Confusion> most_confused(int64_t min_count = 1) const;
  // The k items with the highest loss, highest first.
  std::vector<TopLoss> top_losses(size_t k) const;

  std::string confusion_matrix_text() const;
  std::string top_losses_text(size_t k) const;
  // PNG files (OpenCV builds): the matrix as a heat map with counts, and a grid of the
  // top-loss images captioned predicted/actual/loss/probability.
  void plot_confusion_matrix(const std::string& path) const;
  void plot_top_losses(size_t k, const std::string& path) const;

  const std::vector<std::string>& vocab() const { return vocab_; }
  const Preds& preds() const { return preds_; }

 private:
  std::string label(int64_t c) const;
  DataLoader dl_;
  std::vector<std::string> vocab_;
  Preds preds_;
  torch::Tensor decoded_;  // argmax of the predictions
};

}  // namespace fastcpp::vision
