#include "data/dataloader.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <numeric>

#include "learner/error.h"

namespace fastcpp {
namespace {

// splitmix64: spreads (seed, epoch) into an independent generator seed.
uint64_t mix_seed(uint64_t seed, uint64_t stream) {
  uint64_t z = seed + 0x9E3779B97F4A7C15ULL * (stream + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

}  // namespace

DataLoader::DataLoader(DatasetPtr dataset, DataLoaderOptions options)
    : dataset_(std::move(dataset)), options_(std::move(options)) {
  if (!dataset_) throw Error("DataLoader: no dataset");
  if (options_.bs <= 0) throw Error("DataLoader: batch size must be positive, got " + std::to_string(options_.bs));
}

size_t DataLoader::size() const {
  const auto n = n_items();
  const auto bs = static_cast<size_t>(options_.bs);
  return options_.drop_last ? n / bs : (n + bs - 1) / bs;
}

std::vector<int64_t> DataLoader::order(int64_t epoch) const {
  const auto n = static_cast<int64_t>(n_items());
  if (!options_.shuffle) {
    std::vector<int64_t> indices(static_cast<size_t>(n));
    std::iota(indices.begin(), indices.end(), 0);
    return indices;
  }
  auto generator = at::make_generator<at::CPUGeneratorImpl>(mix_seed(options_.seed, static_cast<uint64_t>(epoch)));
  auto perm = torch::randperm(n, generator, torch::kLong);
  return {perm.data_ptr<int64_t>(), perm.data_ptr<int64_t>() + n};
}

Batch DataLoader::load(const std::vector<int64_t>& order, size_t b) const {
  const auto bs = static_cast<size_t>(options_.bs);
  const auto first = order.begin() + static_cast<std::ptrdiff_t>(b * bs);
  const auto last = order.begin() + static_cast<std::ptrdiff_t>(std::min(order.size(), (b + 1) * bs));
  Batch batch = dataset_->get_batch(std::vector<int64_t>(first, last));
  if (batch.x.device() != device_) {
    batch.x = batch.x.to(device_, /*non_blocking=*/true);
    batch.y = batch.y.to(device_, /*non_blocking=*/true);
  }
  for (const auto& tfm : options_.batch_tfms) batch.x = tfm(batch.x);
  return batch;
}

DataLoader::Iterator DataLoader::begin() {
  auto indices = std::make_shared<const std::vector<int64_t>>(order(epoch_++));
  return Iterator(this, std::move(indices));
}

DataLoader::Iterator DataLoader::end() { return Iterator(); }

DataLoader::Iterator::Iterator(const DataLoader* loader, std::shared_ptr<const std::vector<int64_t>> order)
    : loader_(loader), order_(std::move(order)), position_(0) {
  fetch();
}

DataLoader::Iterator& DataLoader::Iterator::operator++() {
  ++position_;
  fetch();
  return *this;
}

void DataLoader::Iterator::fetch() {
  if (position_ >= loader_->size()) {
    position_ = SIZE_MAX;
    batch_ = {};
    return;
  }
  batch_ = loader_->load(*order_, position_);
}

}  // namespace fastcpp
