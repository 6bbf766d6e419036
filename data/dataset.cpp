#include "data/dataset.h"

#include <torch/torch.h>

#include "core/error.h"

namespace fastcpp {

Batch collate(const std::vector<Example>& examples) {
  if (examples.empty()) throw Error("collate: empty batch");
  std::vector<torch::Tensor> xs, ys;
  xs.reserve(examples.size());
  ys.reserve(examples.size());
  for (const auto& example : examples) {
    xs.push_back(example.x);
    ys.push_back(example.y);
  }
  return {torch::stack(xs), torch::stack(ys)};
}

Batch Dataset::get_batch(const std::vector<int64_t>& indices, uint64_t seed) const {
  std::vector<Example> examples;
  examples.reserve(indices.size());
  for (size_t k = 0; k < indices.size(); ++k) {
    Rng rng(mix_seed(seed, k));
    try {
      examples.push_back(get(static_cast<size_t>(indices[k]), rng));
    } catch (const Error& e) {
      throw Error("item " + std::to_string(indices[k]) + ": " + e.what());
    }
  }
  return collate(examples);
}

TensorDataset::TensorDataset(torch::Tensor x, torch::Tensor y) : x_(std::move(x)), y_(std::move(y)) {
  if (x_.dim() == 0 || y_.dim() == 0 || x_.size(0) != y_.size(0))
    throw Error("TensorDataset: x and y need the same first dimension, got x " + c10::str(x_.sizes()) + " and y " +
                c10::str(y_.sizes()));
}

Example TensorDataset::get(size_t index) const {
  if (index >= size())
    throw Error("TensorDataset: index " + std::to_string(index) + " out of range for " + std::to_string(size()) +
                " items");
  const auto i = static_cast<int64_t>(index);
  return {x_[i], y_[i]};
}

Batch TensorDataset::get_batch(const std::vector<int64_t>& indices, uint64_t) const {
  auto index = torch::tensor(indices, torch::kLong).to(x_.device());  // the data may live on a GPU
  return {x_.index_select(0, index), y_.index_select(0, index.to(y_.device()))};
}

}  // namespace fastcpp
