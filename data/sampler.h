#pragma once
// Samplers: the item indices of an epoch, in the order a DataLoader serves them.
// Each is a pure function of the epoch (and its seed), so any process or thread
// asking for the same epoch gets the same indices.
//   SequentialSampler   0, 1, ..., n-1
//   RandomSampler       a permutation from (seed, epoch)
//   WeightedSampler     n draws with replacement, probability proportional to weight
//   DistributedSampler  a rank's share of another sampler's epoch (the same seed), padded
//                       to ceil(n/world)*world by repeating from the start: every
//                       world-th index from the rank's own (none of an empty epoch)
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace fastcpp {

class Sampler {
 public:
  virtual ~Sampler() = default;
  virtual std::vector<int64_t> indices(int64_t epoch) const = 0;
  virtual size_t size() const = 0;  // indices per epoch
  // Which share of a larger epoch this sampler serves (a rank's: DistributedSampler); 0 for
  // the whole. The loader draws each share's random transforms apart from the others'.
  virtual uint64_t shard() const { return 0; }
};

using SamplerPtr = std::shared_ptr<const Sampler>;

class SequentialSampler : public Sampler {
 public:
  explicit SequentialSampler(size_t n) : n_(n) {}
  std::vector<int64_t> indices(int64_t epoch) const override;
  size_t size() const override { return n_; }

 private:
  size_t n_;
};

class RandomSampler : public Sampler {
 public:
  RandomSampler(size_t n, uint64_t seed) : n_(n), seed_(seed) {}
  std::vector<int64_t> indices(int64_t epoch) const override;
  size_t size() const override { return n_; }

 private:
  size_t n_;
  uint64_t seed_;
};

class WeightedSampler : public Sampler {
 public:
  // n_samples draws per epoch (default: as many as weights).
  WeightedSampler(std::vector<double> weights, uint64_t seed, size_t n_samples = 0);
  std::vector<int64_t> indices(int64_t epoch) const override;
  size_t size() const override { return n_samples_; }

 private:
  std::vector<double> cumulative_;
  uint64_t seed_;
  size_t n_samples_;
};

// One rank's share of another sampler's epoch: the epoch (the same on every rank, as
// samplers draw from (seed, epoch)) padded by its first indices to a multiple of the
// world, then positions rank, rank + world, ... (PyTorch's DistributedSampler; fastai's
// DistributedDL gives each rank a contiguous block instead). So the ranks' batch b
// together hold positions b*bs*world up to (b+1)*bs*world: one process's batch b at
// world times the batch size, which a gather puts back in order by a transpose.
class DistributedSampler : public Sampler {
 public:
  DistributedSampler(SamplerPtr base, int rank, int world_size);
  // Over n items, shuffled from seed or in order.
  DistributedSampler(size_t n, int rank, int world_size, bool shuffle, uint64_t seed);
  std::vector<int64_t> indices(int64_t epoch) const override;
  size_t size() const override { return per_rank_; }
  uint64_t shard() const override { return static_cast<uint64_t>(rank_); }
  const SamplerPtr& base() const { return base_; }
  int rank() const { return rank_; }
  int world_size() const { return world_size_; }

 private:
  SamplerPtr base_;
  int rank_, world_size_;
  size_t per_rank_;
};

}  // namespace fastcpp
