// Detection's box arithmetic against torchvision.ops on the same inputs
// (tests/fixtures/torchvision_models.py writes boxes.pt).
#include "helpers.h"
#include "vision/detection/anchors.h"
#include "vision/detection/boxes.h"

using namespace fastcpp;
using namespace fastcpp::testing;

namespace {

const std::string kBoxes = std::string(FASTCPP_MODEL_FIXTURES) + "/boxes.pt";

torch::Tensor entry(const c10::impl::GenericDict& fixtures, const std::string& key) {
  return fixtures.at(c10::IValue(key)).toTensor();
}

bool close(const torch::Tensor& got, const torch::Tensor& expected, double tolerance = 1e-5) {
  REQUIRE(got.sizes() == expected.sizes());
  return torch::allclose(got, expected, tolerance, tolerance);
}

}  // namespace

TEST_SUITE("detection") {
  TEST_CASE("box formats, areas, IoU, generalized IoU, clipping and small boxes equal torchvision.ops'") {
    const auto f = read_torch_file(read_file(kBoxes)).toGenericDict();
    const auto a = entry(f, "a"), b = entry(f, "b");
    using vision::BoxFormat;
    CHECK(close(vision::box_area(a), entry(f, "area")));
    CHECK(close(vision::box_iou(a, b), entry(f, "iou")));
    CHECK(close(vision::generalized_box_iou(a, b), entry(f, "giou")));
    CHECK(close(vision::box_convert(a, BoxFormat::xyxy, BoxFormat::xywh), entry(f, "to_xywh")));
    CHECK(close(vision::box_convert(a, BoxFormat::xyxy, BoxFormat::cxcywh), entry(f, "to_cxcywh")));
    CHECK(close(vision::box_convert(a, BoxFormat::xywh, BoxFormat::xyxy), entry(f, "xywh_to_xyxy")));
    CHECK(close(vision::box_convert(a, BoxFormat::cxcywh, BoxFormat::xyxy), entry(f, "cxcywh_to_xyxy")));
    CHECK(close(vision::box_convert(a, BoxFormat::xywh, BoxFormat::cxcywh), entry(f, "xywh_to_cxcywh")));
    CHECK(close(vision::box_convert(a, BoxFormat::cxcywh, BoxFormat::xywh), entry(f, "cxcywh_to_xywh")));
    CHECK(close(vision::clip_boxes_to_image(a - 30, 50, 40), entry(f, "clipped")));
    CHECK(torch::equal(vision::remove_small_boxes(a, 8.0), entry(f, "large")));
    CHECK(error_of([] { vision::box_iou(torch::zeros({3, 5}), torch::zeros({2, 4})); }) ==
          "box_area: expected floating boxes [N, 4], got Float [3, 5]");
  }

  TEST_CASE("BoxCoder encodes and decodes as torchvision's, with its weights and the clip of large codes") {
    const auto f = read_torch_file(read_file(kBoxes)).toGenericDict();
    const auto anchors = entry(f, "anchors"), targets = entry(f, "targets"), codes = entry(f, "codes");
    const std::map<std::string, std::array<double, 4>> coders{{"unit", {1, 1, 1, 1}}, {"rcnn", {10, 10, 5, 5}}};
    for (const auto& [name, weights] : coders) {
      CAPTURE(name);
      const vision::BoxCoder coder{weights};
      CHECK(close(coder.encode(targets, anchors), entry(f, name + ".encoded")));
      CHECK(close(coder.decode(codes, anchors), entry(f, name + ".decoded"), 1e-4));
      // decode(encode(boxes)) gives the boxes back
      CHECK(close(coder.decode(coder.encode(targets, anchors), anchors), targets, 1e-4));
    }
    CHECK(error_of([&] { vision::BoxCoder{}.decode(codes.narrow(1, 0, 6), anchors); }) ==
          "BoxCoder::decode: expected codes [6, 4 * K], got [6, 6]");
  }

  TEST_CASE("nms and batched_nms keep exactly torchvision's indices, in its order") {
    const auto f = read_torch_file(read_file(kBoxes)).toGenericDict();
    const auto many = entry(f, "many"), scores = entry(f, "scores");
    CHECK(torch::equal(vision::nms(many, scores, 0.5), entry(f, "nms.5")));
    CHECK(torch::equal(vision::nms(many, scores, 0.3), entry(f, "nms.3")));
    CHECK(entry(f, "nms.3").size(0) < entry(f, "nms.5").size(0));  // the fixture suppresses
    CHECK(torch::equal(vision::batched_nms(many, scores, entry(f, "classes"), 0.5), entry(f, "batched")));
    CHECK(torch::equal(vision::batched_nms(entry(f, "more"), entry(f, "more_scores"), entry(f, "more_classes"), 0.4),
                       entry(f, "batched_per_class")));
    CHECK(torch::equal(vision::nms(many.to(torch::kDouble), scores, 0.5), entry(f, "nms.5")));
    CHECK(vision::nms(torch::zeros({0, 4}), torch::zeros({0}), 0.5).numel() == 0);
    CHECK(error_of([&] { vision::nms(many, scores.narrow(0, 0, 9), 0.5); }) ==
          "nms: expected a score for each of the 300 boxes, got scores [9]");
  }

  TEST_CASE("sigmoid_focal_loss equals torchvision's, per element and as a mean") {
    const auto f = read_torch_file(read_file(kBoxes)).toGenericDict();
    const auto logits = entry(f, "logits"), labels = entry(f, "labels");
    CHECK(close(vision::sigmoid_focal_loss(logits, labels), entry(f, "focal")));
    CHECK(close(vision::sigmoid_focal_loss(logits, labels, -1, 1.5, vision::Reduction::mean), entry(f, "focal.mean")));
  }

  TEST_CASE("RetinaNet's anchors and Matcher equal torchvision's") {
    const auto f = read_torch_file(read_file(kBoxes)).toGenericDict();
    const auto generator = vision::retinanet_anchor_generator();
    const auto anchors = generator.grid_anchors({{12, 16}, {6, 8}, {3, 4}, {2, 2}, {1, 1}}, {96, 128});
    CHECK(torch::equal(anchors, entry(f, "anchors.retinanet")));
    CHECK(anchors.size(0) == (12 * 16 + 6 * 8 + 3 * 4 + 2 * 2 + 1) * 9);
    const auto quality = vision::box_iou(entry(f, "gt"), anchors);
    const auto matches = vision::Matcher{}(quality);
    CHECK(torch::equal(matches, entry(f, "matches")));
    CHECK(torch::equal(vision::Matcher{.allow_low_quality_matches = false}(quality), entry(f, "matches.strict")));
    CHECK((matches == 2).any().item<bool>());  // the small box keeps its best anchor, under the thresholds
    CHECK(error_of([&] { vision::Matcher{}(quality.narrow(0, 0, 0)); }) == "Matcher: an image has no ground-truth boxes");
    CHECK(error_of([&] { generator.grid_anchors({{12, 16}}, {96, 128}); }) ==
          "AnchorGenerator: 1 feature maps but sizes for 5");
  }
}
