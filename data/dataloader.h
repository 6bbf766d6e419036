#pragma once
// DataLoader: batches of a Dataset, in a shuffled or sequential order, moved to a
// device and passed through the batch transforms there.
//
// The order of an epoch is a function of (seed, epoch) alone, so a run is
// reproducible; set_epoch chooses the epoch (the Learner sets it each epoch),
// otherwise every new iteration advances it by one, as a reshuffle.
//
//   for (const Batch& b : loader) { ... b.x, b.y on loader.device() ... }
#include <torch/types.h>

#include <memory>
#include <vector>

#include "data/batch_transforms.h"
#include "data/dataset.h"

namespace fastcpp {

struct DataLoaderOptions {
  int64_t bs = 64;
  bool shuffle = false;
  bool drop_last = false;
  uint64_t seed = 0;
  std::vector<BatchTransform> batch_tfms;
};

class DataLoader {
 public:
  class Iterator;

  DataLoader(DatasetPtr dataset, DataLoaderOptions options = {});

  size_t size() const;  // batches per epoch
  size_t n_items() const { return dataset_->size(); }
  int64_t bs() const { return options_.bs; }
  const Dataset& dataset() const { return *dataset_; }
  const DataLoaderOptions& options() const { return options_; }

  void set_epoch(int64_t epoch) { epoch_ = epoch; }
  int64_t epoch() const { return epoch_; }
  void to(torch::Device device) { device_ = device; }
  torch::Device device() const { return device_; }

  // Item indices of an epoch, in the order they are served.
  std::vector<int64_t> order(int64_t epoch) const;
  // Batch b of an order: fetched, moved to the device, transformed.
  Batch load(const std::vector<int64_t>& order, size_t b) const;

  Iterator begin();
  Iterator end();

 private:
  DatasetPtr dataset_;
  DataLoaderOptions options_;
  int64_t epoch_ = 0;
  torch::Device device_ = torch::kCPU;
};

class DataLoader::Iterator {
 public:
  Iterator() = default;
  Iterator(const DataLoader* loader, std::shared_ptr<const std::vector<int64_t>> order);

  const Batch& operator*() const { return batch_; }
  const Batch* operator->() const { return &batch_; }
  Iterator& operator++();
  bool operator==(const Iterator& other) const { return position_ == other.position_; }
  bool operator!=(const Iterator& other) const { return !(*this == other); }

 private:
  void fetch();
  const DataLoader* loader_ = nullptr;
  std::shared_ptr<const std::vector<int64_t>> order_;
  size_t position_ = SIZE_MAX;  // SIZE_MAX is the end
  Batch batch_;
};

// The train and valid loaders of a Learner. The valid loader needs no shuffle
// and can take a larger batch (no gradients to keep).
struct DataLoaders {
  DataLoader train;
  DataLoader valid;
  void to(torch::Device device) {
    train.to(device);
    valid.to(device);
  }
};

}  // namespace fastcpp
