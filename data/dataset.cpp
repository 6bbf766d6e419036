#include "data/dataset.h"

#include <torch/torch.h>

#include <algorithm>
#include <mutex>
#include <utility>

#include "core/device.h"
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
  return collate_items(examples);
}

struct TensorDataset::DeviceCopies {
  std::mutex mutex;
  std::vector<std::pair<torch::Device, std::weak_ptr<const TensorDataset>>> held;
};

TensorDataset::TensorDataset(torch::Tensor x, torch::Tensor y)
    : x_(std::move(x)), y_(std::move(y)), copies_(std::make_shared<DeviceCopies>()) {
  if (x_.dim() == 0 || y_.dim() == 0 || x_.size(0) != y_.size(0))
    throw Error("TensorDataset: x and y need the same first dimension, got x " + c10::str(x_.sizes()) + " and y " +
                c10::str(y_.sizes()));
}

std::shared_ptr<const TensorDataset> TensorDataset::on(torch::Device device) const {
  // Locked through the copy: a second loader asking meanwhile waits for it, not copies too.
  std::lock_guard<std::mutex> lock(copies_->mutex);
  auto& held = copies_->held;
  held.erase(std::remove_if(held.begin(), held.end(), [](const auto& entry) { return entry.second.expired(); }),
             held.end());
  for (const auto& [where, copy] : held)
    if (where == device)
      if (auto shared = copy.lock()) return shared;
  auto copy = std::make_shared<const TensorDataset>(x_.to(device), y_.to(device));
  held.emplace_back(device, copy);
  return copy;
}

namespace {

Error out_of_range(int64_t index, size_t size) {
  return Error("TensorDataset: index " + std::to_string(index) + " out of range for " + std::to_string(size) + " items");
}

}  // namespace

Example TensorDataset::get(size_t index) const {
  if (index >= size()) throw out_of_range(static_cast<int64_t>(index), size());
  const auto i = static_cast<int64_t>(index);
  return {x_[i], y_[i]};
}

Batch TensorDataset::get_batch(const std::vector<int64_t>& indices, uint64_t) const {
  if (indices.empty()) throw Error("TensorDataset: empty batch");
  const auto [low, high] = std::minmax_element(indices.begin(), indices.end());
  if (*low < 0) throw out_of_range(*low, size());  // checked here, not as a device-side assert
  if (*high >= x_.size(0)) throw out_of_range(*high, size());
  // Consecutive items are a view, as a slice in PyTorch: no copy, no allocation.
  const int64_t first = indices.front(), n = static_cast<int64_t>(indices.size());
  bool consecutive = true;
  for (int64_t k = 1; k < n && consecutive; ++k) consecutive = indices[static_cast<size_t>(k)] == first + k;
  if (consecutive) return {x_.narrow(0, first, n), y_.narrow(0, first, n)};
  // The data may live on a GPU: the indices go there without stalling the host.
  const auto index = torch::tensor(indices, torch::kLong);
  const auto x_index = to_device_async(index, x_.device());
  const auto y_index = y_.device() == x_.device() ? x_index : to_device_async(index, y_.device());
  return {x_.index_select(0, x_index), y_.index_select(0, y_index)};
}

}  // namespace fastcpp
