// Detection data: boxes moved with their images by every item transform, COCO's JSON and
// box files read into batches of padded box lists, and their errors.
#include <opencv2/imgproc.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>

#include "helpers.h"
#include "vision/augment.h"
#include "vision/datasets/coco.h"
#include "vision/datasets/detection_data.h"
#include "vision/detection/detection_learner.h"
#include "vision/predictor.h"
#include "vision/image.h"
#include "vision/mask_png.h"
#include "vision/show.h"

using namespace fastcpp;
using namespace fastcpp::testing;

namespace {

namespace fs = std::filesystem;

// Whether `found` holds the detections of `expected` (labels equal, scores to 1e-5, boxes
// to 1e-4), in any order: a batch of 2 and a batch of 1 round the scores apart in the last
// bits, which may order nearly equal scores otherwise.
bool same_detections_in_any_order(const vision::Detections& found, const vision::Detections& expected) {
  const int64_t n = expected.scores.size(0);
  if (found.scores.size(0) != n) return false;
  std::vector<bool> taken(static_cast<size_t>(n), false);
  for (int64_t i = 0; i < n; ++i) {
    bool matched = false;
    for (int64_t j = 0; j < n && !matched; ++j) {
      if (taken[static_cast<size_t>(j)] || !torch::equal(found.labels[j], expected.labels[i])) continue;
      matched = torch::allclose(found.scores[j], expected.scores[i], 1e-5, 1e-6) &&
                torch::allclose(found.boxes[j], expected.boxes[i], 1e-4, 1e-4);
      if (matched) taken[static_cast<size_t>(j)] = true;
    }
    if (!matched) return false;
  }
  return true;
}

// A black width x height picture with a white box (x1 y1 x2 y2, whole pixels).
cv::Mat picture_with_box(int width, int height, cv::Rect box) {
  cv::Mat image(height, width, CV_8UC3, cv::Scalar::all(0));
  image(box).setTo(cv::Scalar::all(255));
  return image;
}

// The bounding box (x1 y1 x2 y2) of the pixels brighter than half; empty where none are.
torch::Tensor bright_box(const cv::Mat& image) {
  cv::Mat gray, bright;
  cv::cvtColor(image, gray, cv::COLOR_BGR2GRAY);
  cv::threshold(gray, bright, 127, 255, cv::THRESH_BINARY);
  const auto r = cv::boundingRect(bright);
  if (r.area() == 0) return torch::zeros({0, 4});
  return torch::tensor({{float(r.x), float(r.y), float(r.x + r.width), float(r.y + r.height)}});
}

void write_text(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

}  // namespace

TEST_SUITE("detection") {
  TEST_CASE("every item transform moves boxes with the image, drawing what the image's transform draws") {
    using vision::ItemTransform;
    const std::vector<std::pair<std::string, std::vector<ItemTransform>>> cases{
        {"Resize squish", {vision::Resize(32, vision::ResizeMethod::Squish)}},
        {"Resize crop", {vision::Resize(32, vision::ResizeMethod::Crop)}},
        {"Resize pad", {vision::Resize(32, vision::ResizeMethod::Pad, vision::PadMode::Zeros)}},
        {"RandomResizedCrop", {vision::RandomResizedCrop(32, {0.5, 1.0})}},
        {"CenterCrop", {vision::CenterCrop(40)}},
        {"RandomCrop padded", {vision::RandomCrop(48, 6)}},
        {"flip, then crop and resize", {vision::FlipItem(0.5), vision::Resize(36, vision::ResizeMethod::Crop)}},
    };
    const cv::Rect box(14, 10, 24, 18);  // in a 64 x 48 picture
    const auto image = picture_with_box(64, 48, box);
    const auto boxes = torch::tensor({{14.0f, 10.0f, 38.0f, 28.0f}});
    for (const auto& [name, tfms] : cases)
      for (const bool train : {true, false})
        for (uint64_t seed = 0; seed < 6; ++seed) {
          CAPTURE(name);
          CAPTURE(train);
          CAPTURE(seed);
          Rng rng(seed);
          const auto moved = vision::transform_boxes(tfms, boxes, image.size(), rng, train);
          cv::Mat out = image;
          for (const auto& tfm : tfms) out = tfm(out, rng, train);
          CHECK(moved.size == out.size());
          const auto expected = bright_box(out);
          REQUIRE(moved.boxes.size(0) == expected.size(0));
          if (expected.size(0)) CHECK((moved.boxes - expected).abs().max().item<double>() <= 1.0);
        }
    // The way back (a detector's boxes to the picture's pixels): the validation form's
    // boxes return where they were.
    const auto central = torch::tensor({{26.0f, 18.0f, 38.0f, 30.0f}});
    for (const auto& [name, tfms] : cases) {
      CAPTURE(name);
      Rng any(0);
      const auto moved = vision::transform_boxes(tfms, central, {64, 48}, any, false);
      REQUIRE(moved.boxes.size(0) == 1);
      CHECK(torch::allclose(vision::boxes_to_image(tfms, moved.boxes, {64, 48}), central, 1e-4, 1e-4));
    }
    // Flipped: x mirrored; a box left outside a crop is dropped, one cut by it is clipped.
    Rng rng(0);
    const auto flipped = vision::transform_boxes({vision::FlipItem(1.0)}, boxes, {64, 48}, rng, true);
    CHECK(torch::equal(flipped.boxes, torch::tensor({{26.0f, 10.0f, 50.0f, 28.0f}})));
    const auto two = torch::tensor({{0.0f, 0.0f, 6.0f, 6.0f}, {10.0f, 10.0f, 30.0f, 30.0f}});
    const auto cropped = vision::transform_boxes({vision::CenterCrop(40)}, two, {64, 48}, rng, false);
    CHECK(torch::equal(cropped.kept, torch::tensor({1}, torch::kLong)));
    CHECK(torch::equal(cropped.boxes, torch::tensor({{0.0f, 6.0f, 18.0f, 26.0f}})));
  }

  TEST_CASE("COCO's JSON: classes by category id, boxes in corners, crowd regions apart, batches padded with -1") {
    const auto root = temp_path("coco");
    fs::create_directories(root + "/images");
    vision::write_png(root + "/images/a.png", picture_with_box(64, 48, {10, 10, 20, 20}));
    vision::write_png(root + "/images/b.png", picture_with_box(32, 40, {0, 0, 8, 8}));
    write_text(root + "/instances.json", R"({
      "images": [{"id": 7, "file_name": "a.png", "width": 64, "height": 48},
                 {"id": 3, "file_name": "b.png", "width": 32, "height": 40}],
      "categories": [{"id": 18, "name": "dog"}, {"id": 1, "name": "person"}],
      "annotations": [
        {"id": 1, "image_id": 7, "category_id": 18, "bbox": [10, 10, 20, 20], "iscrowd": 0},
        {"id": 2, "image_id": 7, "category_id": 1, "bbox": [30.5, 5, 10, 12.5]},
        {"id": 3, "image_id": 7, "category_id": 18, "bbox": [0, 0, 32, 48], "iscrowd": 1},
        {"id": 4, "image_id": 3, "category_id": 1, "bbox": [2, 3, 0, 5]},
        {"id": 5, "image_id": 3, "category_id": 18, "bbox": [20, 30, 20, 20]},
        {"id": 6, "image_id": 3, "category_id": 18, "bbox": [40, 1, 5, 5]}]})");
    const auto coco = vision::read_coco(root + "/instances.json", root + "/images");
    CHECK(coco.classes == std::vector<std::string>{"person", "dog"});
    CHECK(coco.category_ids == std::vector<int64_t>{1, 18});
    CHECK(coco.image_ids == std::vector<int64_t>{7, 3});
    REQUIRE(coco.images.size() == 2);
    CHECK(coco.images[0].image == root + "/images/a.png");
    CHECK(torch::equal(coco.images[0].boxes, torch::tensor({{10.0f, 10.0f, 30.0f, 30.0f}, {30.5f, 5.0f, 40.5f, 17.5f}})));
    CHECK(torch::equal(coco.images[0].labels, torch::tensor({1, 0}, torch::kLong)));
    CHECK(torch::equal(coco.images[0].crowd_boxes, torch::tensor({{0.0f, 0.0f, 32.0f, 48.0f}})));
    CHECK(torch::equal(coco.images[0].crowd_labels, torch::tensor({1}, torch::kLong)));
    // Boxes are cut to their image (b.png is 32 x 40): one without width, or wholly outside, is left out.
    CHECK(torch::equal(coco.images[1].boxes, torch::tensor({{20.0f, 30.0f, 32.0f, 40.0f}})));
    CHECK(coco.images[1].crowd_boxes.sizes() == torch::IntArrayRef{0, 4});

    auto dls = vision::DetectionDataLoaders::from_coco(
        root + "/instances.json", root + "/images",
        {.bs = 2, .workers = 0, .item_tfms = {vision::Resize(32, vision::ResizeMethod::Squish)},
         .splitter = [](const std::vector<std::string>& paths) { return Split{{0, 1}, {0, 1}}; }});
    CHECK(dls.vocab == coco.classes);
    auto batch = *dls.valid.begin();
    CHECK(batch.x.sizes() == torch::IntArrayRef{2, 3, 32, 32});
    REQUIRE(batch.y.sizes() == torch::IntArrayRef{2, 3, 5});
    // a.png squished from 64 x 48 to 32 x 32: x halves, y times 2/3; its crowd region of
    // class 1 after its boxes, as label crowd_label(1) = -3
    CHECK(torch::allclose(batch.y[0], torch::tensor({{5.0f, 20.0f / 3, 15.0f, 20.0f, 1.0f},
                                                     {15.25f, 10.0f / 3, 20.25f, 35.0f / 3, 0.0f},
                                                     {0.0f, 0.0f, 16.0f, 32.0f, -3.0f}})));
    CHECK(torch::allclose(batch.y[1][0], torch::tensor({20.0f, 24.0f, 32.0f, 32.0f, 1.0f})));  // y times 32/40
    CHECK(torch::equal(batch.y[1].narrow(0, 1, 2), torch::full({2, 5}, -1.0f)));
    const auto truth = vision::image_boxes(batch.y, 0);
    CHECK(torch::equal(truth.labels, torch::tensor({1, 0}, torch::kLong)));
    CHECK(torch::equal(truth.crowd_boxes, torch::tensor({{0.0f, 0.0f, 16.0f, 32.0f}})));
    CHECK(torch::equal(truth.crowd_labels, torch::tensor({1}, torch::kLong)));
    CHECK(vision::image_boxes(batch.y, 1).crowd_labels.size(0) == 0);
    // The training batches' flips move crowd regions with their images.
    auto train = vision::DetectionDataLoaders::from_coco(
        root + "/instances.json", root + "/images",
        {.bs = 2, .workers = 0, .item_tfms = {vision::Resize(32, vision::ResizeMethod::Squish)},
         .aug_tfms = {vision::aug_transforms({.max_rotate = 0, .max_zoom = 1, .max_lighting = 0, .max_warp = 0,
                                              .pad_mode = vision::PadMode::Zeros})},
         .splitter = [](const std::vector<std::string>& paths) { return Split{{0, 1}, {0, 1}}; }});
    std::set<float> lefts;
    for (int epoch = 0; epoch < 10; ++epoch)
      for (const auto& b : train.train) {
        const auto crowds = b.y.index({b.y.select(2, 4) == -3});
        REQUIRE(crowds.size(0) == 1);
        const float left = crowds[0][0].item<float>();
        CHECK(torch::allclose(crowds[0], torch::tensor({left, 0.0f, left + 16, 32.0f, -3.0f}), 1e-4, 1e-3));
        lefts.insert(std::round(left));
      }
    CHECK(lefts == std::set<float>{0, 16});  // as it was, and flipped

    const auto error = [&](const std::string& text) {
      write_text(root + "/bad.json", text);
      return error_of([&] { vision::read_coco(root + "/bad.json", root + "/images"); });
    };
    const std::string bad = "'" + root + "/bad.json'";
    CHECK(error("{\"images\": [").rfind(bad + " is not JSON: ", 0) == 0);
    CHECK(error(R"({"images": [], "annotations": []})") == bad + " is not COCO's instances format: no \"categories\" list");
    const std::string head = R"({"images": [{"id": 1, "file_name": "a.png", "width": 64, "height": 48}],
                                 "categories": [{"id": 1, "name": "person"}], "annotations": [)";
    CHECK(error(head + R"({"id": 5, "image_id": 1, "category_id": 2, "bbox": [1, 1, 5, 5]}]})") ==
          bad + ": annotation 5 names category 2, which \"categories\" lacks");
    CHECK(error(head + R"({"id": 6, "image_id": 1, "category_id": 1, "bbox": [1, 1, -5, 5]}]})") ==
          bad + ": annotation 6: bbox [1, 1, -5, 5] has a negative width");
    CHECK(error(R"({"images": [{"id": 1, "file_name": "a.png", "width": 0, "height": 48}], "categories": [],
                    "annotations": []})") ==
          bad + ": image {\"file_name\":\"a.png\",\"height\":48,\"id\":1,\"width\":0} has no size (width and height "
                "must be > 0)");
    CHECK(error(head + R"({"id": 8, "image_id": 2, "category_id": 1, "bbox": [1, 1, 5, 5]}]})") ==
          bad + ": annotation 8 is of image 2, which \"images\" lacks");
    CHECK(error(head + R"({"id": 9, "image_id": 1, "category_id": 1, "bbox": "wide"}]})") ==
          bad + ": annotation 9: \"bbox\" is \"wide\", not of the expected type");
    fs::remove_all(root);
  }

  TEST_CASE("DetectionDataset refuses boxes without area, naming the image and box (x y w h given for corners)") {
    const auto boxed = [](std::vector<float> corners) {  // a good box, then these corners
      const auto boxes = torch::tensor({0.0f, 0.0f, 8.0f, 8.0f, corners[0], corners[1], corners[2], corners[3]});
      return vision::BoxedImage{"a.png", boxes.view({2, 4}), torch::tensor({0, 0}, torch::kLong)};
    };
    CHECK_NOTHROW(vision::DetectionDataset({boxed({10, 10, 20, 40})}, {"dog"}));
    CHECK(error_of([&] { vision::DetectionDataset({boxed({50, 10, 20, 40})}, {"dog"}); }) ==
          "DetectionDataset: image 'a.png' has box 1 [50, 10, 20, 40] with no area or a corner that is not finite "
          "(boxes are x1 y1 x2 y2, x2 > x1 and y2 > y1)");
    CHECK(error_of([&] { vision::DetectionDataset({boxed({10, 10, 20, NAN})}, {"dog"}); }) ==
          "DetectionDataset: image 'a.png' has box 1 [10, 10, 20, nan] with no area or a corner that is not finite "
          "(boxes are x1 y1 x2 y2, x2 > x1 and y2 > y1)");
    // Crowd regions too, counted apart from the boxes.
    auto crowded = boxed({10, 10, 20, 40});
    crowded.crowd_boxes = torch::tensor({{1.0f, 1.0f, 30.0f, 30.0f}, {5.0f, 5.0f, 5.0f, 9.0f}});
    crowded.crowd_labels = torch::tensor({0, 0}, torch::kLong);
    CHECK(error_of([&] { vision::DetectionDataset({crowded}, {"dog"}); }) ==
          "DetectionDataset: image 'a.png' has crowd box 1 [5, 5, 5, 9] with no area or a corner that is not finite "
          "(boxes are x1 y1 x2 y2, x2 > x1 and y2 > y1)");
    crowded.crowd_labels = torch::tensor({0, 1}, torch::kLong);
    CHECK(error_of([&] { vision::DetectionDataset({crowded}, {"dog"}); }) ==
          "DetectionDataset: image 'a.png' has a crowd label outside [0, 1)");
    crowded.crowd_labels = torch::Tensor();
    CHECK(error_of([&] { vision::DetectionDataset({crowded}, {"dog"}); }) ==
          "DetectionDataset: image 'a.png' has crowd boxes without labels");
  }

  TEST_CASE("box files: one per image, classes sorted by name, bad lines named") {
    const auto root = temp_path("box_files");
    fs::create_directories(root + "/images");
    fs::create_directories(root + "/boxes");
    vision::write_png(root + "/images/one.png", picture_with_box(40, 30, {5, 5, 10, 10}));
    vision::write_png(root + "/images/two.png", picture_with_box(40, 30, {5, 5, 10, 10}));
    write_text(root + "/boxes/one.txt", "square 5 5 15 15\ncircle 20 1 30 11\n");
    write_text(root + "/boxes/two.txt", "\n");
    auto dls = vision::DetectionDataLoaders::from_box_files(
        root + "/images", root + "/boxes",
        {.bs = 2, .workers = 0, .splitter = [](const std::vector<std::string>&) { return Split{{0, 1}, {0, 1}}; }});
    CHECK(dls.vocab == std::vector<std::string>{"circle", "square"});
    const auto batch = *dls.valid.begin();
    CHECK(torch::equal(batch.y[0], torch::tensor({{5.0f, 5.0f, 15.0f, 15.0f, 1.0f}, {20.0f, 1.0f, 30.0f, 11.0f, 0.0f}})));
    CHECK(torch::equal(batch.y[1], torch::full({2, 5}, -1.0f)));
    write_text(root + "/boxes/two.txt", "circle 1 2 3\n");
    CHECK(error_of([&] { vision::DetectionDataLoaders::from_box_files(root + "/images", root + "/boxes"); }) ==
          "box file '" + root + "/boxes/two.txt' line 1: expected \"class x1 y1 x2 y2\", got \"circle 1 2 3\"");
    CHECK(error_of([&] { vision::read_box_file("x.png", root + "/boxes/one.txt", {"square"}); }) ==
          "box file '" + root + "/boxes/one.txt' box 2: unknown class 'circle'");
    fs::remove_all(root);
  }

  TEST_CASE("show_batch draws each box in its class's colour; show_results draws targets beside detections") {
    // Two 64 x 64 grey images: a box of class 1 at (10, 20)-(50, 40) in the first, none in the second.
    auto y = torch::full({2, 1, 5}, -1.0f);
    y[0][0] = torch::tensor({10.0f, 20.0f, 50.0f, 40.0f, 1.0f});
    DataLoaders dls{DataLoader(std::make_shared<TensorDataset>(torch::full({2, 3, 64, 64}, 0.5f), y), {.bs = 2}),
                    DataLoader(std::make_shared<TensorDataset>(torch::full({2, 3, 64, 64}, 0.5f), y), {.bs = 2}),
                    {"square", "circle"}};
    const auto path = temp_path("show_boxes.png");
    vision::show_batch(dls, path, {.ncols = 2});
    const auto picture = vision::read_image(path);  // RGB
    // 8 px margins, images enlarged twice (to at least 96 px), side by side
    CHECK(picture.cols == 8 + 2 * (128 + 8));
    CHECK(picture.rows == 8 + 128 + 8);
    const auto colour = vision::class_colour(2);
    const auto top_edge = picture.at<cv::Vec3b>(8 + 2 * 20, 8 + 2 * 30);
    CHECK((top_edge == cv::Vec3b(colour[0], colour[1], colour[2])));
    CHECK((picture.at<cv::Vec3b>(8 + 2 * 30, 8 + 2 * 30) == cv::Vec3b(128, 128, 128)));  // inside: the image
    CHECK((picture.at<cv::Vec3b>(8 + 2 * 20, 8 + 136 + 2 * 30) == cv::Vec3b(128, 128, 128)));  // no box in the second

    auto learn = vision::detection_learner(dls, vision::resnet18, {}, {.width = 8, .fpn_channels = 16}, quiet());
    vision::show_results(learn, path, {.min_score = 0.0});
    const auto results = vision::read_image(path);
    CHECK(results.cols == 8 + 2 * (128 + 8));                  // target, prediction
    CHECK(results.rows == 8 + 5 * 2 + 6 + 2 * (128 + 8));      // titles, two rows
    std::filesystem::remove(path);
  }

  TEST_CASE("DetectionDataLoaders with aug_transforms: the training batches' boxes move with their images") {
    const auto root = temp_path("boxes_augmented");
    fs::create_directories(root + "/images");
    fs::create_directories(root + "/boxes");
    for (const auto* name : {"a", "b", "c", "d"}) {
      vision::write_png(root + "/images/" + name + ".png", picture_with_box(48, 40, {14, 10, 20, 18}));
      write_text(root + "/boxes/" + name + ".txt", "square 14 10 34 28\n");
    }
    auto dls = vision::DetectionDataLoaders::from_box_files(
        root + "/images", root + "/boxes",
        {.bs = 4, .workers = 0,
         .aug_tfms = {vision::aug_transforms({.max_lighting = 0, .pad_mode = vision::PadMode::Zeros})},
         .splitter = [](const std::vector<std::string>&) { return Split{{0, 1, 2, 3}, {0}}; }});
    const auto batch = *dls.train.begin();
    int moved = 0;
    for (int64_t i = 0; i < 4; ++i) {
      CAPTURE(i);
      const auto on = batch.x[i][0] > 0.5;  // the white pixels' bounding box
      const auto rows = torch::nonzero(on.any(1)).flatten(), cols = torch::nonzero(on.any(0)).flatten();
      const auto expected = torch::stack({cols.min(), rows.min(), cols.max() + 1, rows.max() + 1}).to(torch::kFloat);
      CHECK((batch.y[i][0].narrow(0, 0, 4) - expected).abs().max().item<double>() <= 1.0);
      moved += !torch::allclose(batch.y[i][0], torch::tensor({14.0f, 10.0f, 34.0f, 28.0f, 0.0f}));
    }
    CHECK(moved > 0);
    const auto valid = *dls.valid.begin();  // validation: as it was
    CHECK(torch::equal(valid.y[0][0], torch::tensor({14.0f, 10.0f, 34.0f, 28.0f, 0.0f})));
    fs::remove_all(root);
  }

  TEST_CASE("a detector's export: load_learner finds what the Learner finds in image files, boxes in the files' pixels") {
    const auto root = temp_path("export_detector");
    fs::create_directories(root + "/images");
    fs::create_directories(root + "/boxes");
    for (const auto* name : {"a", "b", "c"}) {
      vision::write_png(root + "/images/" + name + ".png", picture_with_box(96, 64, {20, 10, 40, 30}));
      write_text(root + "/boxes/" + name + ".txt", "square 20 10 60 40\n");
    }
    // Without and with fastai's presizing (aug_transforms' size): the model sees the 64 x 64
    // items, or them resized again to 32 x 96 on the batch (multiples of 32: RetinaNet pads
    // others, and the near-equal scores of the padding would make ties to order).
    for (const bool presized : {false, true}) {
      CAPTURE(presized);
      std::vector<BatchAugmentPtr> aug;
      if (presized)
        aug.push_back(vision::aug_transforms(
            {.max_lighting = 0, .size = std::pair<int64_t, int64_t>{32, 96}, .pad_mode = vision::PadMode::Zeros}));
      auto dls = vision::DetectionDataLoaders::from_box_files(
          root + "/images", root + "/boxes",
          {.bs = 2, .workers = 0, .item_tfms = {vision::Resize(64, vision::ResizeMethod::Squish)}, .aug_tfms = aug,
           .splitter = [](const std::vector<std::string>&) { return Split{{0, 1}, {0, 1, 2}}; }});
      torch::manual_seed(0);
      auto learn = vision::detection_learner(dls, vision::resnet18, {}, {.width = 8, .fpn_channels = 16}, quiet());
      {
        // An untrained head scores every anchor at its prior, 0.01: ties that a batch of 2
        // and a batch of 1 may order otherwise (they did on AVX2). Wider weights give each
        // anchor a score of its own.
        torch::NoGradGuard no_grad;
        learn.model.module().named_parameters()["head.classification_head.cls_logits.weight"].normal_(0, 0.1);
      }
      const auto path = root + "/export.pt";
      learn.export_learner(path);
      const auto predictor = vision::load_learner(path, {.device = torch::kCPU, .detections = {.score_threshold = 0.005}});
      const auto& valid = dynamic_cast<const vision::DetectionDataset&>(dls.valid.dataset());
      const auto files = std::vector<std::string>{root + "/images/a.png", root + "/images/b.png", root + "/images/c.png"};
      // Batches of 2 where the scores are far enough apart for a batch's rounding not to reorder
      // them; the presized model's small maps score many anchors alike.
      const auto predictions = predictor.predict(files, /*bs=*/presized ? 1 : 2);
      REQUIRE(predictions.size() == 3);
      for (size_t i = 0; i < 3; ++i) {
        CAPTURE(i);
        const auto expected = vision::detect(learn, valid.get(i).x, {.score_threshold = 0.005});
        const auto& found = predictions[i].detections;
        REQUIRE(found.scores.size(0) > 0);
        // detect's and a tensor item's detections are in the item's pixels (presized: the batch's
        // 96 x 32 back to 64 x 64).
        auto scaled = expected.boxes.clone().to(torch::kDouble);
        CHECK(same_detections_in_any_order(predictor.predict(valid.get(i).x).detections,
                                           {scaled.to(torch::kFloat), expected.scores, expected.labels}));
        if (presized) {  // by hand: pixel centres to pixel centres (align_corners)
          const auto in_batch = vision::detections(learn.predict(valid.get(i).x).unsqueeze(0), {.score_threshold = 0.005});
          auto by_hand = in_batch.front().boxes.clone().to(torch::kDouble);
          for (int c : {0, 2}) by_hand.select(1, c).sub_(0.5).mul_(63.0 / 95).add_(0.5).clamp_(0, 64);
          for (int c : {1, 3}) by_hand.select(1, c).sub_(0.5).mul_(63.0 / 31).add_(0.5).clamp_(0, 64);
          CHECK(torch::allclose(by_hand, scaled, 1e-4, 1e-4));
        }
        // the item is the 96 x 64 file squished to 64 x 64: x comes back 1.5 times wider
        scaled.select(1, 0).mul_(1.5);
        scaled.select(1, 2).mul_(1.5);
        CHECK(same_detections_in_any_order(found, {scaled.to(torch::kFloat), expected.scores, expected.labels}));
        CHECK(predictions[i].label == "square");
      }
    }
    fs::remove_all(root);
  }
}
