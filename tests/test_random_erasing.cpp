// vision::random_erasing: fastai's RandomErasing drawn per item, its noise, and its place
// in the loader (after Normalize).
#include "helpers.h"
#include "vision/random_erasing.h"

using namespace fastcpp;
using namespace fastcpp::testing;

TEST_SUITE("augment") {
  TEST_CASE("random_erasing draws fastai's rectangles: p, count, area share and aspect, from the seed alone") {
    const vision::RandomErasing square({.p = 0.5, .sl = 0.0, .sh = 0.3, .min_aspect = 1.0});
    const auto draws = square.draw(4000, 64, 64, 7);
    int erased = 0;
    double share = 0;
    for (const auto& areas : draws) {
      if (areas.empty()) continue;
      REQUIRE(areas.size() == 1);
      const auto& r = areas[0];
      CHECK(r.height == r.width);  // aspect 1: a square of side round(sqrt(area))
      CHECK(r.height <= 35);       // sqrt(0.3 * 64 * 64) = 35.05
      CHECK((r.row >= 0 && r.col >= 0 && r.row + r.height <= 64 && r.col + r.width <= 64));
      ++erased;
      share += static_cast<double>(r.height * r.width) / (64 * 64);
    }
    CHECK(erased / 4000.0 == doctest::Approx(0.5).epsilon(0.06));
    CHECK(share / erased == doctest::Approx(0.15).epsilon(0.05));  // uniform in [0, 0.3]
    CHECK(square.draw(50, 64, 64, 7).size() == 50);
    const auto again = square.draw(4000, 64, 64, 7), other = square.draw(4000, 64, 64, 8);
    const auto same = [](const auto& a, const auto& b) {
      if (a.size() != b.size()) return false;
      for (size_t k = 0; k < a.size(); ++k) {
        if (a[k].size() != b[k].size()) return false;
        for (size_t i = 0; i < a[k].size(); ++i)
          if (a[k][i].row != b[k][i].row || a[k][i].col != b[k][i].col || a[k][i].height != b[k][i].height ||
              a[k][i].width != b[k][i].width)
            return false;
      }
      return true;
    };
    CHECK(same(draws, again));
    CHECK_FALSE(same(draws, other));

    // 1 to 3 rectangles, each a share of area / count; tall and wide ones within the aspect's range.
    const vision::RandomErasing several({.p = 1.0, .sl = 0.1, .sh = 0.3, .min_aspect = 0.3, .max_count = 3});
    std::vector<int> counts(4);
    bool tall = false, wide = false;
    for (const auto& areas : several.draw(3000, 200, 200, 1)) {
      REQUIRE((areas.size() >= 1 && areas.size() <= 3));
      ++counts[areas.size()];
      for (const auto& r : areas) {
        const double aspect = static_cast<double>(r.height) / static_cast<double>(r.width);
        CHECK((aspect > 0.3 * 0.8 && aspect < 1 / 0.3 * 1.25));  // the sides round to whole pixels
        tall = tall || aspect > 2;
        wide = wide || aspect < 0.5;
        CHECK(r.height * r.width <= 0.3 * 200 * 200 / static_cast<double>(areas.size()) * 1.1);
      }
    }
    for (int c = 1; c <= 3; ++c) CHECK(counts[c] / 3000.0 == doctest::Approx(1 / 3.0).epsilon(0.1));
    CHECK((tall && wide));

    // batch: fastai's one draw for the whole batch.
    const vision::RandomErasing batched({.p = 1.0, .batch = true});
    const auto one = batched.draw(5, 32, 32, 3);
    REQUIRE(one[0].size() == 1);
    CHECK(same(one, std::vector<std::vector<vision::ErasedArea>>(5, one[0])));
  }

  TEST_CASE("random_erasing fills exactly its rectangles with N(0, 1) noise, its own in each item") {
    const vision::RandomErasing erasing;
    const auto images = torch::full({3, 3, 40, 40}, 7.0f);
    const std::vector<std::vector<vision::ErasedArea>> draws{{{2, 3, 20, 30}}, {}, {{0, 0, 5, 5}, {30, 30, 10, 10}}};
    const auto view = images.narrow(0, 0, 3);  // a view of the caller's tensor: written into a copy
    const auto out = erasing.apply_draws({view, torch::Tensor()}, draws, 11).x;
    CHECK(torch::equal(images, torch::full({3, 3, 40, 40}, 7.0f)));
    auto inside = torch::zeros({3, 1, 40, 40}, torch::kBool);
    inside[0].narrow(1, 2, 20).narrow(2, 3, 30).fill_(true);
    inside[2].narrow(1, 0, 5).narrow(2, 0, 5).fill_(true);
    inside[2].narrow(1, 30, 10).narrow(2, 30, 10).fill_(true);
    inside = inside.expand({3, 3, 40, 40});
    CHECK(torch::equal(out.masked_select(inside.logical_not()), torch::full({3 * 3 * 1600 - 3 * (600 + 25 + 100)}, 7.0f)));
    const auto noise = out[0].narrow(1, 2, 20).narrow(2, 3, 30);
    CHECK(std::abs(noise.mean().item<double>()) < 0.08);  // 1800 values: the mean's std is 0.024
    CHECK(noise.std().item<double>() == doctest::Approx(1).epsilon(0.08));
    CHECK_FALSE(torch::equal(out[2].narrow(1, 0, 5).narrow(2, 0, 5), out[2].narrow(1, 30, 5).narrow(2, 30, 5)));
    CHECK(torch::equal(erasing.apply_draws({images.clone(), torch::Tensor()}, draws, 11).x, out));
    CHECK_FALSE(torch::equal(erasing.apply_draws({images.clone(), torch::Tensor()}, draws, 12).x, out));
  }

  TEST_CASE("random_erasing in a loader runs after Normalize (noise in normalized units), the same with any workers, "
            "and not on validation batches") {
    const auto images = torch::full({16, 3, 48, 48}, 100, torch::kUInt8);
    auto data = std::make_shared<TensorDataset>(images, torch::zeros({16}, torch::kLong));
    const Normalize normalize{{0.5, 0.5, 0.5}, {0.1, 0.1, 0.1}};
    const auto erasing = vision::random_erasing({.p = 1.0, .sl = 0.2, .sh = 0.3, .min_aspect = 1.0});
    const auto batch_of = [&](int workers) {
      DataLoader loader(data, {.bs = 16, .workers = workers, .seed = 5, .batch_tfms = {normalize},
                               .aug_tfms = {erasing}});
      return (*loader.begin()).x;
    };
    const auto x = batch_of(0);
    const auto clean = normalize(images);
    const auto kept = x.eq(clean);
    const auto erased = x.masked_select(kept.logical_not());
    CHECK(kept.to(torch::kFloat).mean().item<double>() == doctest::Approx(0.75).epsilon(0.1));  // 20-30% erased
    // Erased before Normalize, N(0, 1) would have come out with a std of 10.
    CHECK(erased.std().item<double>() == doctest::Approx(1).epsilon(0.05));
    CHECK(torch::equal(x, batch_of(2)));
    CHECK(validation_forms({erasing}).empty());
  }

  TEST_CASE("random_erasing: bad options and batches are errors that say what is wrong") {
    CHECK(error_of([] { vision::RandomErasing({.p = 1.5}); }) == "random_erasing: p must be in [0, 1], got 1.500000");
    CHECK(error_of([] { vision::RandomErasing({.sl = 0.4, .sh = 0.3}); }) ==
          "random_erasing: sl and sh must satisfy 0 <= sl <= sh <= 1, got 0.400000 and 0.300000");
    CHECK(error_of([] { vision::RandomErasing({.min_aspect = 0}); }) ==
          "random_erasing: min_aspect must be in (0, 1], got 0.000000");
    CHECK(error_of([] { vision::RandomErasing({.max_count = 0}); }) == "random_erasing: max_count must be at least 1, got 0");
    const vision::RandomErasing erasing({.p = 1.0});
    CHECK(error_of([&] { erasing.apply({torch::zeros({2, 3, 8, 8}, torch::kUInt8), torch::Tensor()}, 0); }) ==
          "random_erasing: the images are Byte; it fills with N(0, 1) noise, in normalized units: put a Normalize in "
          "the loader's batch_tfms");
    CHECK(error_of([&] { erasing.apply({torch::zeros({3, 8, 8}), torch::Tensor()}, 0); }) ==
          "random_erasing: expects images [batch, channels, height, width], got [3, 8, 8]");
  }
}
