#pragma once
// DataLoader: batches of a Dataset, built on worker threads, delivered in order,
// moved to a device and passed through the batch transforms there.
//
// The order of an epoch comes from the sampler (default: sequential, or random
// when shuffle) and batch b of epoch e draws its randomness from
// (seed, e, b) alone: the same seed gives bitwise the same batches with 0, 1 or 8
// workers. set_epoch chooses the epoch (the Learner sets it each epoch);
// otherwise every new iteration advances it by one, as a reshuffle.
//
//   for (const Batch& b : loader) { ... b.x, b.y on loader.device() ... }
//
// Workers build whole batches (item transforms and collate included) at most
// workers*prefetch batches ahead of the consumer; host memory is pinned when the
// device is CUDA so the copy can overlap. A batch whose x its dataset leaves to the
// device (data/device_stage.h: JPEGs decoded on the GPU) is finished there by the
// consumer; then the random batch transforms (aug_tfms) and the batch transforms run. In-memory data (a TensorDataset) small enough
// go to the GPU once instead, and each batch is cut there (options.resident). Breaking
// out of the loop or an error stops and joins the workers. An iteration works on a copy
// of the loader taken when it begins: changing, moving or destroying the loader mid-epoch
// (to(), set_sampler, add_batch_tfms) reaches the next iteration, never this one.
#include <torch/types.h>

#include <memory>
#include <optional>
#include <vector>

#include "data/batch_augment.h"
#include "data/batch_pipeline.h"
#include "data/batch_transforms.h"
#include "data/dataset.h"
#include "data/sampler.h"

namespace fastcpp {

struct DataLoaderOptions {
  int64_t bs = 64;
  bool shuffle = false;
  bool drop_last = false;
  int workers = 0;       // threads building batches; 0: on the consumer's thread
  int prefetch = 2;      // batches in flight per worker
  bool pin_memory = true;  // pin host batches when the device is CUDA (overlapped copies)
  // A TensorDataset on the host copied to the GPU once, its batches cut there (the same
  // order and bytes as from the host, no copy per batch; loaders over one dataset share
  // the copy). Default: when the device is CUDA and the data take at most a quarter of
  // its memory; false: never; true: always.
  std::optional<bool> resident;
  uint64_t seed = 0;
  SamplerPtr sampler;    // overrides shuffle
  std::vector<BatchTransform> batch_tfms;
  // Random batch transforms (vision::aug_transforms), before batch_tfms (those that say
  // so, vision::random_erasing, after them), on the device; see data/batch_augment.h.
  std::vector<BatchAugmentPtr> aug_tfms;
};

class DataLoader {
 public:
  class Iterator;

  DataLoader(DatasetPtr dataset, DataLoaderOptions options = {});

  size_t size() const;  // batches per epoch
  size_t n_items() const { return sampler_->size(); }
  int64_t bs() const { return options_.bs; }
  const Dataset& dataset() const { return *dataset_; }
  const DatasetPtr& dataset_ptr() const { return dataset_; }
  const DataLoaderOptions& options() const { return options_; }
  const Sampler& sampler() const { return *sampler_; }
  const SamplerPtr& sampler_ptr() const { return sampler_; }
  // A copy on the same device that serves every item once in the dataset's order (fastai's
  // dl.new(shuffle=False, drop_last=False)), where this one shuffles, drops its last batch
  // or has a sampler of its own (weighted draws too); nullopt where it already serves them so.
  // A rank's share (a DistributedSampler) becomes its share of the items in order.
  std::optional<DataLoader> in_order() const;
  // Replaces the sampler; nullptr restores the one the options give.
  void set_sampler(SamplerPtr sampler);
  // The sampler the options give: theirs, else random from the seed or sequential.
  SamplerPtr own_sampler() const;

  void set_epoch(int64_t epoch) { epoch_ = epoch; }
  int64_t epoch() const { return epoch_; }
  void to(torch::Device device) { device_ = device; }
  // Appends to the batch transforms (fastai's add_tfms(..., 'after_batch')).
  void add_batch_tfms(const std::vector<BatchTransform>& tfms);
  // Whether batches are cut from a copy of the data on the device (set by the first iteration).
  bool resident() const { return resident_ != nullptr; }
  torch::Device device() const { return device_; }

  // Item indices of an epoch, in the order they are served.
  std::vector<int64_t> order(int64_t epoch) const { return sampler_->indices(epoch); }
  // Batch b of an epoch as a worker builds it: on the host, or cut from the resident
  // copy on the device (batch transforms included when the device is the CPU).
  Batch make_batch(const std::vector<int64_t>& order, int64_t epoch, size_t b) const;
  // Batch b of an epoch from a worker, moved to the device and transformed there, as the
  // consumer finishes it.
  Batch finish(Batch batch, int64_t epoch, size_t b) const;
  // Where every random draw of batch b of an epoch comes from (item and batch transforms);
  // a sharded sampler's shard too, so that ranks draw apart.
  uint64_t batch_seed(int64_t epoch, size_t b) const;

  Iterator begin();
  Iterator end();

  // A batch as this loader's come out of it: its batch augmentations (a valid loader's are
  // their validation forms, a resize at most), then its batch transforms, on the batch's device.
  Batch apply_batch_tfms(Batch batch, uint64_t seed) const;

 private:
  // The dataset batches are cut from: the resident copy on the device, or the dataset.
  const Dataset& source() const;
  void place_resident();
  DatasetPtr dataset_;
  std::shared_ptr<const TensorDataset> resident_;  // on device_, when options.resident allows
  DataLoaderOptions options_;
  SamplerPtr sampler_;
  int64_t epoch_ = 0;
  torch::Device device_ = torch::kCPU;
};

class DataLoader::Iterator {
 public:
  Iterator() = default;
  Iterator(std::shared_ptr<const DataLoader> loader, int64_t epoch);

  const Batch& operator*() const { return batch_; }
  const Batch* operator->() const { return &batch_; }
  Iterator& operator++();
  bool operator==(const Iterator& other) const { return done_ == other.done_; }
  bool operator!=(const Iterator& other) const { return !(*this == other); }

 private:
  void fetch();
  std::shared_ptr<const DataLoader> loader_;  // the copy this iteration reads (its producer holds it too)
  std::shared_ptr<BatchPipeline> pipeline_;
  Batch batch_;
  int64_t epoch_ = 0;
  size_t next_batch_ = 0;
  bool done_ = true;
};

// The train and valid loaders of a Learner (the valid loader needs no shuffle and
// can take a larger batch), and the class names when the data have them.
struct DataLoaders {
  DataLoader train;
  DataLoader valid;
  std::vector<std::string> vocab;
  bool multi_label = false;  // targets are one-hot [batch, classes], several classes an item
  // Segmentation: the mask value of pixels that count nowhere (unlabelled, borders). Set
  // once here by the mask loaders; the default loss, the metrics and the pictures take it.
  std::optional<int64_t> void_index;

  void to(torch::Device device) {
    train.to(device);
    valid.to(device);
  }
  void add_batch_tfms(const std::vector<BatchTransform>& tfms) {
    train.add_batch_tfms(tfms);
    valid.add_batch_tfms(tfms);
  }
  size_t num_classes() const { return vocab.size(); }
};

}  // namespace fastcpp
