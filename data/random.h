#pragma once
// Rng: the random stream of one item of one batch. Every random draw of the data
// pipeline comes from an Rng seeded by (loader seed, epoch, batch index, position in
// the batch), so batches are bitwise the same whatever the number of workers.
#include <cmath>
#include <cstdint>

namespace fastcpp {

// splitmix64 of a combination: a well-spread seed for stream `stream` of `seed`.
inline uint64_t mix_seed(uint64_t seed, uint64_t stream) {
  uint64_t z = seed + 0x9E3779B97F4A7C15ULL * (stream + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}

  uint64_t next() {  // splitmix64
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  }
  // Uniform in [0, 1).
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  double uniform(double low, double high) { return low + (high - low) * uniform(); }
  // Uniform integer in [low, high] (inclusive).
  int64_t integer(int64_t low, int64_t high) {
    return low + static_cast<int64_t>(uniform() * static_cast<double>(high - low + 1));
  }
  bool bernoulli(double p) { return uniform() < p; }

 private:
  uint64_t state_;
};

}  // namespace fastcpp
