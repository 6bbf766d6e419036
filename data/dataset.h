#pragma once
// Dataset: a map-style collection of (x, y) examples. get is const and must be
// thread-safe: the DataLoader calls it from worker threads. An augmenting dataset
// draws its randomness from the Rng it is given, never from global state, so a
// batch depends only on (seed, epoch, batch index). get_batch builds a whole batch;
// override it where a dataset can do better than item by item (TensorDataset
// gathers with one index_select).
#include <torch/types.h>

#include <memory>
#include <string>
#include <vector>

#include "data/random.h"

namespace fastcpp {

struct Example {
  torch::Tensor x;
  torch::Tensor y;
};

class DeviceStage;  // data/device_stage.h

struct Batch {
  torch::Tensor x;
  torch::Tensor y;
  std::shared_ptr<const DeviceStage> x_stage;  // set: x is made on the loader's device by this
};

// Stacks the examples' x and y along a new first dimension. Examples of different shapes
// are an Error naming two, by their positions in `examples` (Dataset::get_batch names
// them by their positions in the dataset).
Batch collate(const std::vector<Example>& examples);

class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual size_t size() const = 0;
  // The item without augmentation.
  virtual Example get(size_t index) const = 0;
  // The item with its own random stream (augmenting datasets override this).
  virtual Example get(size_t index, Rng& rng) const { return get(index); }
  // Items indices[k] with streams Rng(mix_seed(seed, k)), collated. Errors name the item.
  virtual Batch get_batch(const std::vector<int64_t>& indices, uint64_t seed = 0) const;
  // Items into a batch: stacked (collate); items of different shapes (box lists) are
  // padded by their dataset here.
  virtual Batch collate_items(const std::vector<Example>& examples) const { return collate(examples); }
  // The same items with their training-time random transforms acting (a validation
  // set's augmented twin, for test-time augmentation); nullptr where there are none.
  virtual std::shared_ptr<const Dataset> augmented() const { return nullptr; }
  // The text forms of the item transforms (vision::item_transform_from_spec reads them),
  // which an exported model carries to make items of new inputs; none by default.
  virtual std::vector<std::string> item_transform_specs() const { return {}; }
};

using DatasetPtr = std::shared_ptr<const Dataset>;

// Examples are x[i], y[i]. Items keep the tensors' dtype (images stay uint8).
class TensorDataset : public Dataset {
 public:
  TensorDataset(torch::Tensor x, torch::Tensor y);
  using Dataset::get;
  size_t size() const override { return static_cast<size_t>(x_.size(0)); }
  Example get(size_t index) const override;
  Batch get_batch(const std::vector<int64_t>& indices, uint64_t seed = 0) const override;

  const torch::Tensor& x() const { return x_; }
  const torch::Tensor& y() const { return y_; }
  // These data on `device`: copied at the first call and shared by every later one while
  // any caller holds it, so that loaders over one dataset (train and valid cut from it by
  // samplers) keep one copy on the GPU between them. Thread-safe.
  std::shared_ptr<const TensorDataset> on(torch::Device device) const;

 private:
  torch::Tensor x_, y_;
  struct DeviceCopies;
  std::shared_ptr<DeviceCopies> copies_;  // shared by copies of this dataset: the same tensors
};

}  // namespace fastcpp
