// Samplers: sequential, random, weighted, and the distributed sampler's padding
// and every world-th position (PyTorch's DistributedSampler).
#include <map>
#include <set>

#include "helpers.h"

using namespace fastcpp;
using fastcpp::testing::error_of;

TEST_SUITE("samplers") {
  TEST_CASE("DistributedSampler: same permutation on every rank, padded, every world-th position") {
    const size_t n = 10;
    const int world = 4;  // ceil(10/4) = 3 per rank, 12 in all: 2 repeated from the start
    std::vector<int64_t> position_by_position(12);  // the ranks' item j side by side: the padded epoch
    for (int rank = 0; rank < world; ++rank) {
      DistributedSampler sampler(n, rank, world, /*shuffle=*/true, /*seed=*/9);
      CHECK(sampler.size() == 3);
      const auto mine = sampler.indices(2);
      REQUIRE(mine.size() == 3);
      for (size_t j = 0; j < mine.size(); ++j) position_by_position[j * world + static_cast<size_t>(rank)] = mine[j];
    }
    const auto perm = RandomSampler(n, 9).indices(2);
    std::vector<int64_t> expected(perm);
    expected.push_back(perm[0]);
    expected.push_back(perm[1]);
    CHECK(position_by_position == expected);
    CHECK(std::set<int64_t>(expected.begin(), expected.end()).size() == n);
    DistributedSampler sequential(n, 3, world, false, 0);
    CHECK(sequential.indices(0) == std::vector<int64_t>{3, 7, 1});  // position 11 is padding: item 1
  }

  TEST_CASE("DistributedSampler shares out any sampler's epoch: a WeightedSampler's draws over 3 ranks") {
    auto weighted = std::make_shared<WeightedSampler>(std::vector<double>{1.0, 2.0, 3.0, 4.0}, 5, 10);
    std::vector<int64_t> position_by_position(12);
    for (int rank = 0; rank < 3; ++rank) {
      DistributedSampler share(weighted, rank, 3);
      CHECK(share.size() == 4);
      const auto part = share.indices(1);
      REQUIRE(part.size() == 4);
      for (size_t j = 0; j < part.size(); ++j) position_by_position[j * 3 + static_cast<size_t>(rank)] = part[j];
    }
    auto expected = weighted->indices(1);
    expected.push_back(expected[0]);
    expected.push_back(expected[1]);  // padded to 12 by the epoch's first draws
    CHECK(position_by_position == expected);
  }

  TEST_CASE("DistributedSampler rejects a rank outside the world") {
    CHECK(testing::error_of([] { DistributedSampler(10, 2, 2, true, 0); }) ==
          "DistributedSampler: rank 2 is not in [0, 2)");
  }

  TEST_CASE("WeightedSampler draws in proportion to the weights") {
    WeightedSampler sampler({0.0, 1.0, 3.0}, 1, 8000);
    std::map<int64_t, int> counts;
    for (auto i : sampler.indices(0)) ++counts[i];
    CHECK(counts[0] == 0);
    CHECK(counts[2] / double(counts[1]) == doctest::Approx(3.0).epsilon(0.1));
    CHECK(sampler.indices(0) == WeightedSampler({0.0, 1.0, 3.0}, 1, 8000).indices(0));
    CHECK(error_of([] { WeightedSampler({1.0, INFINITY}, 0); }) ==
          "WeightedSampler: weight 1 is inf (weights are finite and >= 0)");
    CHECK(error_of([] { WeightedSampler({-1.0}, 0); }) ==
          "WeightedSampler: weight 0 is -1 (weights are finite and >= 0)");
  }

  TEST_CASE("DistributedSampler of an empty epoch serves nothing on every rank") {
    DistributedSampler empty(std::make_shared<SequentialSampler>(0), 1, 2);
    CHECK(empty.size() == 0);
    CHECK(empty.indices(3).empty());
  }

  TEST_CASE("a rank's batches draw apart from the other ranks' (rank 0 as one process), from its loader's seed") {
    auto ds = std::make_shared<TensorDataset>(torch::arange(10), torch::arange(10));
    const auto seed_of = [&](int rank) {
      const auto shard = std::make_shared<DistributedSampler>(10, rank, 2, true, 9);
      DataLoader loader(ds, {.bs = 4, .seed = 9, .sampler = shard});
      return loader.batch_seed(2, 1);
    };
    const DataLoader whole(ds, {.bs = 4, .seed = 9});
    CHECK(seed_of(0) == whole.batch_seed(2, 1));
    CHECK(seed_of(1) != seed_of(0));
  }

  TEST_CASE("in_order of a rank's shuffled share (get_preds under to_distributed): its share of the items in order") {
    auto ds = std::make_shared<TensorDataset>(torch::arange(10), torch::arange(10));
    DataLoader loader(ds, {.bs = 4, .shuffle = true, .seed = 1});
    loader.set_sampler(std::make_shared<DistributedSampler>(loader.sampler_ptr(), 1, 2));
    const auto in_order = loader.in_order();
    REQUIRE(in_order);
    CHECK(in_order->order(0) == std::vector<int64_t>{1, 3, 5, 7, 9});
    DataLoader sequential(ds, {.bs = 4});
    sequential.set_sampler(std::make_shared<DistributedSampler>(sequential.sampler_ptr(), 1, 2));
    CHECK_FALSE(sequential.in_order());  // in order already
  }

  TEST_CASE("a DataLoader serves its sampler's indices") {
    auto ds = std::make_shared<TensorDataset>(torch::arange(10), torch::arange(10));
    DataLoader loader(ds, {.bs = 4, .sampler = std::make_shared<DistributedSampler>(10, 1, 2, false, 0)});
    CHECK(loader.size() == 2);
    std::vector<int64_t> seen;
    for (const auto& b : loader)
      for (int64_t i = 0; i < b.y.size(0); ++i) seen.push_back(b.y[i].item<int64_t>());
    CHECK(seen == std::vector<int64_t>{1, 3, 5, 7, 9});
  }
}
