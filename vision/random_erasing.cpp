#include "vision/random_erasing.h"

#include <ATen/Context.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <mutex>
#include <string>

#include "core/error.h"
#include "data/random.h"

namespace fastcpp::vision {
namespace {

// fastai's _slice: a side of sqrt(area) pixels at a random place, cut at the edge.
std::pair<int64_t, int64_t> side_at_random(double area, int64_t size, Rng& rng) {
  const auto side = static_cast<int64_t>(std::lround(std::sqrt(area)));
  const int64_t start = rng.integer(0, std::max<int64_t>(size - side, 0));
  return {start, std::min(side, size - start)};
}

// A generator of the batch's device that starts from `seed`, whatever the device's own
// default generator has drawn: the noise is a function of the batch's seed alone.
at::Generator generator_from(torch::Device device, uint64_t seed) {
  at::Generator shared = at::globalContext().defaultGenerator(device);  // a handle on the device's own
  at::Generator own;
  {
    std::lock_guard<std::mutex> lock(shared.mutex());
    own = shared.clone();
  }
  own.set_current_seed(seed);
  return own;
}

}  // namespace

RandomErasing::RandomErasing(RandomErasingOptions options) : options_(options) {
  const auto& o = options_;
  auto check = [](bool ok, const std::string& what) {
    if (!ok) throw Error("random_erasing: " + what);
  };
  check(o.p >= 0 && o.p <= 1, "p must be in [0, 1], got " + std::to_string(o.p));
  check(o.sl >= 0 && o.sl <= o.sh && o.sh <= 1,
        "sl and sh must satisfy 0 <= sl <= sh <= 1, got " + std::to_string(o.sl) + " and " + std::to_string(o.sh));
  check(o.min_aspect > 0 && o.min_aspect <= 1, "min_aspect must be in (0, 1], got " + std::to_string(o.min_aspect));
  check(o.max_count >= 1, "max_count must be at least 1, got " + std::to_string(o.max_count));
}

std::vector<std::vector<ErasedArea>> RandomErasing::draw(size_t n, int64_t height, int64_t width,
                                                          uint64_t seed) const {
  const auto& o = options_;
  const double log_aspect = std::log(o.min_aspect);
  std::vector<std::vector<ErasedArea>> draws(n);
  for (size_t k = 0; k < n; ++k) {
    if (o.batch && k > 0) {
      draws[k] = draws[0];
      continue;
    }
    Rng rng(mix_seed(seed, k));
    if (!rng.bernoulli(o.p)) continue;
    const auto count = rng.integer(1, o.max_count);
    const double area = static_cast<double>(height * width) / static_cast<double>(count);
    for (int64_t c = 0; c < count; ++c) {
      const double erased = rng.uniform(o.sl, o.sh) * area;
      const double aspect = std::exp(rng.uniform(log_aspect, -log_aspect));
      const auto [row, rows] = side_at_random(erased * aspect, height, rng);
      const auto [col, cols] = side_at_random(erased / aspect, width, rng);
      if (rows > 0 && cols > 0) draws[k].push_back({row, col, rows, cols});
    }
  }
  return draws;
}

Batch RandomErasing::apply_draws(Batch batch, const std::vector<std::vector<ErasedArea>>& draws,
                                 uint64_t seed) const {
  auto& x = batch.x;
  if (!x.defined() || x.dim() != 4)
    throw Error("random_erasing: expects images [batch, channels, height, width], got " +
                (x.defined() ? c10::str(x.sizes()) : std::string("none")));
  if (!x.is_floating_point())
    throw Error("random_erasing: the images are " + std::string(c10::toString(x.scalar_type())) +
                "; it fills with N(0, 1) noise, in normalized units: put a Normalize in the loader's batch_tfms");
  if (draws.size() != static_cast<size_t>(x.size(0)))
    throw Error("random_erasing: " + std::to_string(draws.size()) + " draws for a batch of " + std::to_string(x.size(0)));
  bool any = false;
  for (const auto& areas : draws) any = any || !areas.empty();
  if (!any) return batch;
  // Written in place unless another tensor shares the bytes (a resident dataset's slice, say).
  if (x.is_view() || x.storage().use_count() > 1) x = x.clone();
  for (size_t k = 0; k < draws.size(); ++k)
    for (size_t a = 0; a < draws[k].size(); ++a) {
      const auto& r = draws[k][a];
      auto gen = generator_from(x.device(), mix_seed(mix_seed(seed, k), a));
      auto area = x[static_cast<int64_t>(k)].narrow(1, r.row, r.height).narrow(2, r.col, r.width);
      area.copy_(at::randn(area.sizes(), gen, area.options()));
    }
  return batch;
}

Batch RandomErasing::apply(Batch batch, uint64_t seed) const {
  if (!batch.x.defined() || batch.x.dim() != 4) return apply_draws(std::move(batch), {}, seed);  // names the shape
  const auto stream = mix_seed(seed, 0x65726173ULL);  // apart from the item transforms' streams
  auto draws = draw(static_cast<size_t>(batch.x.size(0)), batch.x.size(2), batch.x.size(3), stream);
  return apply_draws(std::move(batch), draws, mix_seed(stream, 1));
}

BatchAugmentPtr random_erasing(RandomErasingOptions options) { return std::make_shared<RandomErasing>(options); }

}  // namespace fastcpp::vision
