#include "vision/interpret.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "core/device_check.h"
#include "core/error.h"
#include "learner/class_indices.h"

namespace fastcpp::vision {

ClassificationInterpretation ClassificationInterpretation::from_learner(Learner& learn, DataLoader* dl) {
  DataLoader& loader = dl ? *dl : learn.dls.valid;
  return {loader, learn.dls.vocab, learn.get_preds(&loader, /*with_loss=*/true)};
}

ClassificationInterpretation::ClassificationInterpretation(DataLoader dl, std::vector<std::string> vocab, Preds preds)
    : dl_(std::move(dl)), vocab_(std::move(vocab)), preds_(std::move(preds)) {
  if (!preds_.preds.defined())
    throw Error("ClassificationInterpretation: expected [items, classes] predictions (is the loader empty?)");
  if (preds_.targets.dim() != 1)
    throw Error("ClassificationInterpretation: expected one class an item, got targets " +
                c10::str(preds_.targets.sizes()) + " (several classes an item have no confusion matrix)");
  if (!c10::isIntegralType(preds_.targets.scalar_type(), /*includeBool=*/false))
    throw Error("ClassificationInterpretation: targets must be class indices, got " +
                std::string(c10::toString(preds_.targets.scalar_type())) + " ones (a regression or single-logit "
                "target has no confusion matrix)");
  if (preds_.preds.dim() != 2)
    throw Error("ClassificationInterpretation: expected [items, classes] predictions, got " +
                c10::str(preds_.preds.sizes()));
  preds_.preds = preds_.preds.to(torch::kCPU, torch::kFloat);
  const int64_t n = preds_.preds.size(1);
  DeviceCheck checks;  // the targets are on the CPU: a bad one throws at once
  preds_.targets = checked_class_indices(preds_.targets.to(torch::kCPU), n, std::nullopt, checks,
                                         [n](int64_t value, int64_t item, const char*) {
                                           return "ClassificationInterpretation: the target of item " +
                                                  std::to_string(item) + " is " + std::to_string(value) +
                                                  ", not a class index in [0, " + std::to_string(n) + ")";
                                         });
  preds_.losses = preds_.losses.defined() ? preds_.losses.to(torch::kCPU, torch::kFloat) : torch::Tensor();
  decoded_ = preds_.preds.argmax(1);
  if (vocab_.empty())
    for (int64_t c = 0; c < preds_.preds.size(1); ++c) vocab_.push_back(std::to_string(c));
}

std::string ClassificationInterpretation::label(int64_t c) const {
  return c >= 0 && c < static_cast<int64_t>(vocab_.size()) ? vocab_[c] : std::to_string(c);
}

torch::Tensor ClassificationInterpretation::confusion_matrix() const {
  const int64_t n = preds_.preds.size(1);
  return torch::bincount(preds_.targets * n + decoded_, {}, n * n).view({n, n});
}

std::vector<Confusion> ClassificationInterpretation::most_confused(int64_t min_count) const {
  const auto cm = confusion_matrix();
  const auto counts = cm.accessor<int64_t, 2>();
  std::vector<Confusion> cells;
  for (int64_t a = 0; a < cm.size(0); ++a)
    for (int64_t p = 0; p < cm.size(1); ++p)
      if (a != p && counts[a][p] >= min_count) cells.push_back({label(a), label(p), counts[a][p]});
  std::stable_sort(cells.begin(), cells.end(), [](const auto& x, const auto& y) { return x.count > y.count; });
  return cells;
}

std::vector<TopLoss> ClassificationInterpretation::top_losses(size_t k) const {
  if (!preds_.losses.defined()) throw Error("top_losses: no per-item losses (use from_learner)");
  k = std::min<size_t>(k, preds_.losses.size(0));
  const auto top = preds_.losses.topk(static_cast<int64_t>(k));
  const auto values = std::get<0>(top), indices = std::get<1>(top);
  std::vector<TopLoss> result;
  for (size_t i = 0; i < k; ++i) {
    const int64_t index = indices[i].item<int64_t>(), predicted = decoded_[index].item<int64_t>();
    result.push_back({index, values[i].item<double>(), preds_.targets[index].item<int64_t>(), predicted,
                      preds_.preds[index][predicted].item<double>()});
  }
  return result;
}

std::string ClassificationInterpretation::confusion_matrix_text() const {
  const auto cm = confusion_matrix();
  const auto counts = cm.accessor<int64_t, 2>();
  size_t name_width = 6;
  for (const auto& name : vocab_) name_width = std::max(name_width, name.size());
  const int cell = static_cast<int>(std::max<size_t>(6, std::to_string(cm.max().item<int64_t>()).size() + 1));
  std::ostringstream out;
  out << "confusion matrix (rows: actual, columns: predicted)\n" << std::string(name_width, ' ');
  char buffer[64];
  for (int64_t p = 0; p < cm.size(1); ++p) {
    std::snprintf(buffer, sizeof buffer, "%*lld", cell, static_cast<long long>(p));
    out << buffer;
  }
  out << "\n";
  for (int64_t a = 0; a < cm.size(0); ++a) {
    out << label(a) << std::string(name_width - label(a).size(), ' ');
    for (int64_t p = 0; p < cm.size(1); ++p) {
      std::snprintf(buffer, sizeof buffer, "%*lld", cell, static_cast<long long>(counts[a][p]));
      out << buffer;
    }
    out << "   (" << a << ")\n";
  }
  return out.str();
}

std::string ClassificationInterpretation::top_losses_text(size_t k) const {
  std::ostringstream out;
  out << "item      loss  predicted / actual (probability)\n";
  char buffer[64];
  for (const auto& t : top_losses(k)) {
    std::snprintf(buffer, sizeof buffer, "%-6lld %7.3f  ", static_cast<long long>(t.index), t.loss);
    out << buffer << label(t.predicted) << " / " << label(t.actual);
    std::snprintf(buffer, sizeof buffer, " (%.2f)\n", t.probability);
    out << buffer;
  }
  return out.str();
}

#if !FASTCPP_HAS_OPENCV
void ClassificationInterpretation::plot_confusion_matrix(const std::string&) const {
  throw Error("plot_confusion_matrix needs a build with OpenCV; confusion_matrix_text() works without");
}
void ClassificationInterpretation::plot_top_losses(size_t, const std::string&) const {
  throw Error("plot_top_losses needs a build with OpenCV; top_losses_text() works without");
}
#endif

}  // namespace fastcpp::vision
