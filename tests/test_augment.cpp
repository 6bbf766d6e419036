// Batch augmentation (vision::aug_transforms) in the loader: its draws, its
// reproducibility, masks moved with their images, the validation form, host reads and
// errors. The equality with fastai's for the same draws is in the fastai suite.
#include <set>

#include "helpers.h"
#include "operator_count.h"
#include "vision/augment.h"

using namespace fastcpp;
using namespace fastcpp::testing;

namespace {

// Images whose first channel is 200 where the mask is 1 and 0 where it is 0 (blocks of
// 4x4), the other channels a gradient; masks [n, h, w] of 0 and 1.
Batch blocks(int64_t n, int64_t h, int64_t w) {
  const auto rows = torch::arange(h).div(4, "floor").view({1, h, 1}), cols = torch::arange(w).div(4, "floor").view({1, 1, w});
  const auto item = torch::arange(n).view({n, 1, 1});
  const auto mask = (rows + cols + item).remainder(2).to(torch::kLong);
  const auto gradient = (torch::arange(h * w).view({1, 1, h, w}).remainder(251)).expand({n, 2, h, w});
  const auto x = torch::cat({(mask * 200).unsqueeze(1), gradient}, 1).to(torch::kUInt8);
  return {x, mask};
}

}  // namespace

TEST_SUITE("augment") {
  TEST_CASE("aug_transforms draws with fastai's probabilities and ranges, from the batch's seed alone") {
    const vision::AugTransforms aug;
    const auto draws = aug.draw(4000, 11);
    int flipped = 0, rotated = 0, zoomed = 0, warped_x = 0, brighter = 0, contrasted = 0;
    for (const auto& d : draws) {
      CHECK((d.dihedral == 0 || d.dihedral == 1));
      CHECK(std::abs(d.rotate) <= 10);
      CHECK((d.zoom >= 1 && d.zoom <= 1.1));
      CHECK((d.zoom_col >= 0 && d.zoom_col < 1 && d.zoom_row >= 0 && d.zoom_row < 1));
      CHECK((std::abs(d.warp_x) <= 0.2 && std::abs(d.warp_y) <= 0.2));
      CHECK((d.brightness >= 0.4 && d.brightness <= 0.6));
      CHECK((d.contrast >= 0.8 - 1e-12 && d.contrast <= 1.25 + 1e-12));
      flipped += d.dihedral;
      rotated += d.rotate != 0;
      zoomed += d.zoom != 1;
      warped_x += d.warp_x != 0;
      brighter += d.brightness != 0.5;
      contrasted += d.contrast != 1;
    }
    CHECK(flipped / 4000.0 == doctest::Approx(0.5).epsilon(0.06));
    for (int count : {rotated, zoomed, warped_x, brighter, contrasted}) CHECK(count / 4000.0 == doctest::Approx(0.75).epsilon(0.04));

    auto same = [](const std::vector<vision::AugDraw>& a, const std::vector<vision::AugDraw>& b) {
      for (size_t i = 0; i < a.size(); ++i)
        if (a[i].dihedral != b[i].dihedral || a[i].rotate != b[i].rotate || a[i].zoom != b[i].zoom ||
            a[i].warp_y != b[i].warp_y || a[i].contrast != b[i].contrast)
          return false;
      return true;
    };
    CHECK(same(aug.draw(64, 3), aug.draw(64, 3)));
    CHECK_FALSE(same(aug.draw(64, 3), aug.draw(64, 4)));

    const auto one_for_all = vision::AugTransforms({.batch = true}).draw(16, 5);
    CHECK(same(one_for_all, std::vector<vision::AugDraw>(16, one_for_all[0])));
    std::set<int> orientations;
    for (const auto& d : vision::AugTransforms({.flip_vert = true}).draw(400, 1)) orientations.insert(d.dihedral);
    CHECK(orientations.size() == 8);
    const auto nothing = vision::AugTransforms({.do_flip = false, .max_rotate = 0, .max_zoom = 1, .max_lighting = 0, .max_warp = 0});
    CHECK(same(nothing.draw(8, 1), std::vector<vision::AugDraw>(8)));
  }

  TEST_CASE("aug_transforms in a DataLoader: bitwise the same batches with 0 or 2 workers, new ones each epoch") {
    const auto b = blocks(12, 16, 20);
    auto data = std::make_shared<TensorDataset>(b.x, b.y);
    auto loader = [&](int workers) {
      return DataLoader(data, {.bs = 4, .shuffle = true, .workers = workers, .seed = 9, .aug_tfms = {vision::aug_transforms()}});
    };
    auto serial = loader(0), threaded = loader(2);
    std::vector<Batch> first;
    for (const auto& batch : serial) first.push_back(batch);
    size_t i = 0;
    for (const auto& batch : threaded) {
      CHECK((batch.x.scalar_type() == torch::kFloat));
      CHECK(torch::equal(batch.x, first[i].x));
      CHECK(torch::equal(batch.y, first[i].y));
      ++i;
    }
    CHECK(i == 3);
    const auto next_epoch = *serial.begin();
    CHECK_FALSE(torch::equal(next_epoch.x, first[0].x));
  }

  TEST_CASE("two augmentations in one loader draw apart: two flips do not flip the same items back") {
    const auto b = blocks(16, 8, 12);
    auto data = std::make_shared<TensorDataset>(b.x, b.y);
    const vision::AugOptions flip_only{.max_rotate = 0, .max_zoom = 1, .max_lighting = 0, .max_warp = 0};
    auto first_batch = [&](std::vector<BatchAugmentPtr> augs) {
      return *DataLoader(data, {.bs = 16, .seed = 3, .aug_tfms = std::move(augs)}).begin();
    };
    const auto once = first_batch({vision::aug_transforms(flip_only)});
    const auto twice = first_batch({vision::aug_transforms(flip_only), vision::aug_transforms(flip_only)});
    const auto unflipped = first_batch({vision::aug_transforms({.do_flip = false, .max_rotate = 0, .max_zoom = 1,
                                                                .max_lighting = 0, .max_warp = 0})});
    int flipped_twice = 0;
    for (int64_t i = 0; i < 16; ++i)  // a resample that moves nothing is exact to rounding
      flipped_twice += !torch::allclose(twice.x[i], unflipped.x[i], 0, 1e-3);
    CHECK(flipped_twice > 0);
    CHECK_FALSE(torch::equal(twice.x, once.x));
  }

  TEST_CASE("aug_transforms moves masks with their images: nearest classes where the image is not blended") {
    const auto b = blocks(8, 24, 32);
    const vision::AugTransforms aug({.max_lighting = 0});
    auto draws = aug.draw(8, 21);
    draws[0] = {.dihedral = 1};  // a flip alone moves whole pixels: exact
    draws[1] = {.rotate = 30, .zoom = 1.3, .warp_x = 0.2, .warp_y = -0.1};
    const auto out = aug.apply_draws(b, draws);
    REQUIRE((out.y.scalar_type() == torch::kLong));
    REQUIRE((out.y.sizes() == b.y.sizes()));
    CHECK(torch::equal(out.y[0], b.y[0].flip(-1)));
    CHECK((out.x[0] - b.x[0].flip(-1).to(torch::kFloat) / 255).abs().max().item<double>() < 1e-4);
    // Where bilinear sampling met one class only, the image's first channel is 0 or 200
    // exactly, and the mask must hold that class.
    const auto channel = out.x.select(1, 0) * 255;
    const auto pure_zero = (channel < 1e-3), pure_one = (channel - 200).abs() < 1e-3;
    CHECK(pure_zero.sum().item<int64_t>() + pure_one.sum().item<int64_t>() > out.y.numel() / 2);
    CHECK(torch::equal(out.y.masked_select(pure_zero), torch::zeros({pure_zero.sum().item<int64_t>()}, torch::kLong)));
    CHECK(torch::equal(out.y.masked_select(pure_one), torch::ones({pure_one.sum().item<int64_t>()}, torch::kLong)));
    CHECK_FALSE(torch::equal(out.y[1], b.y[1]));  // it did move
    // Labels that are not masks stay as they are.
    const auto labelled = aug.apply_draws({b.x, torch::arange(8)}, draws);
    CHECK(torch::equal(labelled.y, torch::arange(8)));
  }

  TEST_CASE("aug_transforms moves boxes with their images: each box bounds its object's pixels, those leaving are dropped") {
    // 6 black images of 40 x 48 with a white rectangle at (14, 10)-(34, 28); a second
    // box row of padding.
    auto x = torch::zeros({6, 3, 40, 48}, torch::kByte);
    x.narrow(2, 10, 18).narrow(3, 14, 20).fill_(255);
    auto y = torch::full({6, 2, 5}, -1.0f);
    y.select(1, 0).copy_(torch::tensor({14.0f, 10.0f, 34.0f, 28.0f, 2.0f}).expand({6, 5}));
    const auto bright_box = [](const torch::Tensor& image) {  // x1 y1 x2 y2 of the pixels above half
      const auto on = image[0] > 0.5;
      const auto rows = torch::nonzero(on.any(1)).flatten(), cols = torch::nonzero(on.any(0)).flatten();
      return torch::stack({cols.min(), rows.min(), cols.max() + 1, rows.max() + 1}).to(torch::kFloat);
    };
    for (const auto& size : {std::optional<std::pair<int64_t, int64_t>>{}, std::optional(std::pair<int64_t, int64_t>{32, 36})}) {
      CAPTURE(size.has_value());
      const vision::AugTransforms aug({.max_lighting = 0, .size = size, .pad_mode = vision::PadMode::Zeros});
      auto draws = aug.draw(6, 5);
      draws[0] = {.dihedral = 1};
      draws[1] = {.rotate = 25};
      draws[2] = {.zoom = 1.3, .zoom_col = 0.3, .zoom_row = 0.6};
      draws[3] = {.warp_x = 0.2, .warp_y = -0.15};
      draws[4] = {.dihedral = 5, .rotate = -15, .zoom = 1.1, .warp_x = -0.1};
      draws[5] = {.zoom = 4, .zoom_col = 1, .zoom_row = 1};  // the bottom right corner: the rectangle leaves
      const auto out = aug.apply_draws({x, y}, draws);
      REQUIRE((out.y.sizes() == y.sizes()));
      CHECK(torch::equal(aug.apply_draws({x, y.to(torch::kLong)}, draws).y, out.y));  // whole-pixel boxes move too
      for (int i = 0; i < 5; ++i) {
        CAPTURE(i);
        CHECK(out.y[i][0][4].item<float>() == 2.0f);
        const auto difference = (out.y[i][0].narrow(0, 0, 4) - bright_box(out.x[i])).abs().max().item<double>();
        CHECK(difference <= 1.0);
        CHECK(torch::equal(out.y[i][1], torch::full({5}, -1.0f)));  // padding stays padding
      }
      CHECK(out.x[5].max().item<float>() == 0.0f);
      CHECK(torch::equal(out.y[5], torch::full({2, 5}, -1.0f)));
      if (!size)  // a flip alone: mirrored exactly
        CHECK(torch::allclose(out.y[0][0], torch::tensor({14.0f, 10.0f, 34.0f, 28.0f, 2.0f}), 1e-5, 1e-4));
    }
  }

  TEST_CASE("aug_transforms on validation data: nothing, or the resize alone") {
    CHECK(vision::AugTransforms().validation() == nullptr);
    CHECK(validation_forms({vision::aug_transforms()}).empty());
    const vision::AugTransforms resizing({.size = std::pair<int64_t, int64_t>{6, 8}});
    const auto forms = validation_forms({std::make_shared<vision::AugTransforms>(resizing)});
    REQUIRE(forms.size() == 1);
    const auto b = blocks(3, 24, 32);
    const auto valid = forms[0]->apply(b, 1), again = forms[0]->apply(b, 2);
    CHECK((valid.x.sizes() == torch::IntArrayRef({3, 3, 6, 8})));
    CHECK((valid.y.sizes() == torch::IntArrayRef({3, 6, 8})));
    CHECK(torch::equal(valid.x, again.x));  // no draws
    const vision::AugTransforms geometry_only({.max_lighting = 0, .size = std::pair<int64_t, int64_t>{6, 8}});
    CHECK(torch::equal(valid.x, geometry_only.apply_draws(b, std::vector<vision::AugDraw>(3)).x));
  }

  TEST_CASE("predict resizes an item as the valid loader's batches are: aug_transforms' validation form, then the "
            "batch transforms") {
    const auto b = blocks(4, 24, 32);
    const auto data = std::make_shared<TensorDataset>(b.x, b.y.select(1, 0).select(1, 0));
    const auto resize = validation_forms({vision::aug_transforms({.size = std::pair<int64_t, int64_t>{6, 8}})});
    const std::vector<BatchTransform> to_float{IntToFloat{}};
    DataLoaders dls{DataLoader(data, {.bs = 2, .batch_tfms = to_float}),
                    DataLoader(data, {.bs = 2, .batch_tfms = to_float, .aug_tfms = resize})};
    torch::manual_seed(0);
    // Flattening: a model that takes only the resized shape.
    Learner learn(dls, torch::nn::Sequential(torch::nn::Flatten(), torch::nn::Linear(3 * 6 * 8, 2)),
                  CrossEntropyLoss(), {}, quiet());
    silence(learn);
    const auto preds = learn.get_preds();
    CHECK(torch::allclose(learn.predict(b.x[3]), preds.preds[3], 1e-6, 1e-7));
  }

  TEST_CASE("aug_transforms reads nothing back to the host") {
    const auto b = blocks(4, 32, 32);
    for (const auto& options : {vision::AugOptions{}, vision::AugOptions{.size = std::pair<int64_t, int64_t>{12, 12}}}) {
      const vision::AugTransforms aug(options);
      OperatorCount count;
      count.start();
      aug.apply(b, 3);
      CHECK(count.stop().count("aten::_local_scalar_dense") == 0);
    }
  }

  TEST_CASE("min_scale: a random square crop of the moved image resized to size, as fastai's RandomResizedCropGPU "
            "(a slice, then a resize with align_corners); validation takes the centre square") {
    namespace F = torch::nn::functional;
    const auto resize = [](const torch::Tensor& image, int64_t size) {  // fastai's affine_coord(sz) of a slice
      return F::interpolate(image.unsqueeze(0), F::InterpolateFuncOptions()
                                                    .size(std::vector<int64_t>{size, size})
                                                    .mode(torch::kBilinear)
                                                    .align_corners(true))
          .squeeze(0);
    };
    torch::manual_seed(0);
    const auto x = torch::rand({64, 3, 10, 10});
    const vision::AugTransforms crop({.do_flip = false, .max_rotate = 0, .max_zoom = 1, .max_lighting = 0,
                                      .max_warp = 0, .size = std::pair<int64_t, int64_t>{6, 6}, .min_scale = 0.5});
    const auto draws = crop.draw(64, 7);
    const auto out = crop.apply_draws({x, torch::Tensor()}, draws).x;
    std::set<int64_t> sides, tops;
    for (int64_t i = 0; i < 64; ++i) {
      const auto& d = draws[size_t(i)];
      CHECK(d.crop_area >= 0.5);
      CHECK(d.crop_area < 1);
      const auto side = std::llround(std::sqrt(d.crop_area * 100));
      const auto top = int64_t(std::floor(d.crop_row * double(10 - side + 1)));
      const auto left = int64_t(std::floor(d.crop_col * double(10 - side + 1)));
      sides.insert(side);
      tops.insert(top);
      using torch::indexing::Slice;
      const auto expected = resize(x[i].index({Slice(), Slice(top, top + side), Slice(left, left + side)}), 6);
      CHECK(torch::allclose(out[i], expected, 0, 1e-5));
    }
    CHECK(sides == std::set<int64_t>{7, 8, 9, 10});
    CHECK(tops.size() >= 3);

    // Validation: the centre square of a wide image (fastai's (w - h) // 2), resized; its spec carries it.
    const auto wide = torch::rand({2, 3, 8, 13});
    const auto valid = crop.validation();
    REQUIRE(valid);
    CHECK(valid->spec() == "AugResize 6 6 reflection 1 centre_square");
    const auto centre = valid->apply({wide, torch::Tensor()}, 1).x;
    using torch::indexing::Slice;
    CHECK(torch::allclose(centre[1], resize(wide[1].index({Slice(), Slice(), Slice(2, 10)}), 6), 0, 1e-5));
    CHECK(torch::equal(vision::batch_augment_from_spec(valid->spec())->apply({wide, torch::Tensor()}, 1).x, centre));
    // A detector's boxes through it go back to the item's pixels: the output's outer pixel centres are
    // the square's (align_corners), 2.5 and 9.5, and its edges half an output pixel (7/5 / 2) beyond.
    const auto& centre_resize = dynamic_cast<const vision::AugTransforms&>(*valid);
    CHECK(torch::allclose(centre_resize.boxes_to_input(torch::tensor({{0.5, 0.5, 5.5, 5.5}, {0.0, 0.0, 6.0, 6.0}}), 8, 13),
                          torch::tensor({{2.5, 0.5, 9.5, 7.5}, {1.8, 0.0, 10.2, 8.0}})));
    CHECK(error_of([&] { crop.apply({x, torch::zeros({64, 1, 10, 10}, torch::kLong)}, 1); }) ==
          "aug_transforms: cannot move targets [64, 1, 10, 10] with images [64, 3, 10, 10]: masks are [batch, height, "
          "width] of the images' height and width, boxes [batch, boxes, 5]");
    CHECK(error_of([] { vision::AugTransforms({.min_scale = 0.75}); }) ==
          "aug_transforms: min_scale below 1 (a crop) needs a size to resize it to");
    CHECK(error_of([] { vision::AugTransforms({.size = std::pair<int64_t, int64_t>{4, 4}, .min_scale = 0}); }) ==
          "aug_transforms: min_scale must be in (0, 1], got 0.000000");
  }

  TEST_CASE("aug_transforms: bad options and batches are errors that say what is wrong") {
    CHECK_THROWS_WITH_AS(vision::AugTransforms({.min_zoom = 1.2, .max_zoom = 1.1}),
                         "aug_transforms: min_zoom must be positive and at most max_zoom, got 1.200000 and 1.100000", Error);
    CHECK_THROWS_WITH_AS(vision::AugTransforms({.max_lighting = 1}),
                         "aug_transforms: max_lighting (times mult) must be in [0, 1), got 1.000000", Error);
    CHECK_THROWS_WITH_AS(vision::AugTransforms({.mult = 2, .max_warp = 0.5}),
                         "aug_transforms: max_warp (times mult) must be in [0, 1), got 1.000000", Error);
    CHECK_THROWS_WITH_AS(vision::AugTransforms({.p_affine = 1.5}), "aug_transforms: a probability must be in [0, 1], got 1.500000",
                         Error);
    const vision::AugTransforms aug;
    CHECK_THROWS_WITH_AS(aug.apply({torch::zeros({3, 8, 8}), torch::zeros({3})}, 1),
                         "aug_transforms: expects images [batch, channels, height, width], got 3 dimensions", Error);
    const auto b = blocks(2, 8, 8);
    CHECK_THROWS_WITH_AS(aug.apply_draws(b, std::vector<vision::AugDraw>(3)), "aug_transforms: 3 draws for a batch of 2", Error);
    CHECK_THROWS_WITH_AS(aug.apply_draws(b, {vision::AugDraw{.dihedral = 8}, vision::AugDraw{}}),
                         "aug_transforms: a dihedral index must be in [0, 7], got 8", Error);
  }
}
