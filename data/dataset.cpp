#include "data/dataset.h"

#include <torch/torch.h>

#include <algorithm>
#include <mutex>
#include <numeric>
#include <utility>

#include "core/device.h"
#include "core/error.h"
#include "core/exception_text.h"

namespace fastcpp {
namespace {

// The first of the examples whose x (or y) has another shape than the first's; 0 if none.
size_t first_unlike(const std::vector<Example>& examples, bool targets) {
  if (examples.empty()) return 0;
  const auto& first = targets ? examples[0].y : examples[0].x;
  for (size_t k = 1; k < examples.size(); ++k) {
    const auto& other = targets ? examples[k].y : examples[k].x;
    if (first.defined() && other.defined() && first.sizes() != other.sizes()) return k;
  }
  return 0;
}

// Examples 0 and k do not stack; `indices` name them by their positions in the dataset.
std::string shape_mismatch(const std::vector<Example>& examples, size_t k, bool targets,
                           const std::vector<int64_t>& indices) {
  const auto item = [&](size_t i) { return "item " + std::to_string(indices[i]); };
  if (targets)
    return "targets of one batch differ in shape: " + item(k) + "'s is " + c10::str(examples[k].y.sizes()) + ", " +
           item(0) + "'s " + c10::str(examples[0].y.sizes()) +
           ": a dataset of such targets pads them in its collate_items";
  return "items of one batch differ in shape: " + item(k) + " is " + c10::str(examples[k].x.sizes()) + ", " + item(0) +
         " " + c10::str(examples[0].x.sizes()) + ": add a Resize or crop to the item transforms";
}

// collate's, naming the examples by their positions in the batch: get_batch names them
// by their positions in the dataset instead.
class ShapeMismatch : public Error {
 public:
  ShapeMismatch(const std::vector<Example>& examples, size_t k, bool targets, const std::vector<int64_t>& positions)
      : Error(shape_mismatch(examples, k, targets, positions)), k(k), targets(targets) {}
  size_t k;
  bool targets;
};

}  // namespace

Batch collate(const std::vector<Example>& examples) {
  if (examples.empty()) throw Error("collate: empty batch");
  for (const bool targets : {false, true})
    if (const auto k = first_unlike(examples, targets)) {
      std::vector<int64_t> positions(examples.size());
      std::iota(positions.begin(), positions.end(), 0);
      throw ShapeMismatch(examples, k, targets, positions);
    }
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
    } catch (const std::exception& e) {  // a transform's OpenCV or libtorch error too
      throw Error("item " + std::to_string(indices[k]) + ": " + exception_text(e));
    }
  }
  try {
    return collate_items(examples);
  } catch (const ShapeMismatch& e) {
    if (first_unlike(examples, e.targets) != e.k) throw;  // about examples of a dataset's own making
    throw Error(shape_mismatch(examples, e.k, e.targets, indices));
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {  // libtorch's, from a dataset's own collate_items
    if (const auto k = first_unlike(examples, /*targets=*/false))
      throw Error(shape_mismatch(examples, k, /*targets=*/false, indices));
    throw Error("collate: " + exception_text(e));
  }
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
