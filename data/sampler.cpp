#include "data/sampler.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "data/random.h"
#include "core/error.h"
#include "core/spec_text.h"

namespace fastcpp {

std::vector<int64_t> SequentialSampler::indices(int64_t) const {
  std::vector<int64_t> all(n_);
  std::iota(all.begin(), all.end(), 0);
  return all;
}

std::vector<int64_t> RandomSampler::indices(int64_t epoch) const {
  auto generator = at::make_generator<at::CPUGeneratorImpl>(mix_seed(seed_, static_cast<uint64_t>(epoch)));
  auto perm = torch::randperm(static_cast<int64_t>(n_), generator, torch::kLong);
  return {perm.data_ptr<int64_t>(), perm.data_ptr<int64_t>() + n_};
}

WeightedSampler::WeightedSampler(std::vector<double> weights, uint64_t seed, size_t n_samples)
    : seed_(seed), n_samples_(n_samples ? n_samples : weights.size()) {
  if (weights.empty()) throw Error("WeightedSampler: no weights");
  double total = 0;
  for (size_t i = 0; i < weights.size(); ++i) {
    if (!(weights[i] >= 0 && std::isfinite(weights[i])))
      throw Error("WeightedSampler: weight " + std::to_string(i) + " is " + spec_text::number(weights[i]) +
                  " (weights are finite and >= 0)");
    cumulative_.push_back(total += weights[i]);
  }
  if (total <= 0) throw Error("WeightedSampler: the weights sum to 0");
}

std::vector<int64_t> WeightedSampler::indices(int64_t epoch) const {
  Rng rng(mix_seed(seed_, static_cast<uint64_t>(epoch)));
  std::vector<int64_t> drawn(n_samples_);
  for (auto& index : drawn) {
    const double target = rng.uniform() * cumulative_.back();
    index = std::upper_bound(cumulative_.begin(), cumulative_.end(), target) - cumulative_.begin();
    index = std::min<int64_t>(index, static_cast<int64_t>(cumulative_.size()) - 1);
  }
  return drawn;
}

DistributedSampler::DistributedSampler(SamplerPtr base, int rank, int world_size)
    : base_(std::move(base)), rank_(rank), world_size_(world_size) {
  if (world_size < 1 || rank < 0 || rank >= world_size)
    throw Error("DistributedSampler: rank " + std::to_string(rank) + " is not in [0, " + std::to_string(world_size) + ")");
  if (!base_) throw Error("DistributedSampler: no sampler to share out");
  per_rank_ = (base_->size() + static_cast<size_t>(world_size) - 1) / static_cast<size_t>(world_size);
}

DistributedSampler::DistributedSampler(size_t n, int rank, int world_size, bool shuffle, uint64_t seed)
    : DistributedSampler(shuffle ? SamplerPtr(std::make_shared<RandomSampler>(n, seed))
                                 : SamplerPtr(std::make_shared<SequentialSampler>(n)),
                         rank, world_size) {}

std::vector<int64_t> DistributedSampler::indices(int64_t epoch) const {
  auto all = base_->indices(epoch);
  const size_t n = all.size(), padded = per_rank_ * static_cast<size_t>(world_size_);
  for (size_t i = 0; all.size() < padded; ++i) all.push_back(all[i % n]);
  std::vector<int64_t> mine;
  mine.reserve(per_rank_);
  for (size_t i = static_cast<size_t>(rank_); i < padded; i += static_cast<size_t>(world_size_)) mine.push_back(all[i]);
  return mine;
}

}  // namespace fastcpp
