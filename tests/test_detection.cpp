// Detection against torchvision and pycocotools on the same inputs (fixtures from
// tests/fixtures/torchvision_models.py): the box arithmetic, anchors and matching, RetinaNet's
// outputs, losses and detections, COCO's AP; and detection_learner's training, on one and two
// devices and in bf16 (the same on {cuda:0, cuda:0} in the gpu suite).
#include "core/autocast.h"
#include "detection_helpers.h"
#include "helpers.h"
#include "trained_state.h"
#include "vision/detection/anchors.h"
#include "vision/detection/boxes.h"
#include "vision/detection/coco_eval.h"
#include "vision/detection/detection_learner.h"
#include "vision/detection/detector_output.h"
#include "vision/detection/retinanet.h"

using namespace fastcpp;
using namespace fastcpp::testing;

namespace {

const std::string kBoxes = std::string(FASTCPP_MODEL_FIXTURES) + "/boxes.pt";
const std::string kRetinaNet = std::string(FASTCPP_MODEL_FIXTURES) + "/retinanet.pth";
const std::string kRetinaNetIO = std::string(FASTCPP_MODEL_FIXTURES) + "/retinanet_io.pt";
const std::string kCocoEval = std::string(FASTCPP_MODEL_FIXTURES) + "/coco_eval.pt";

// The fixture's RetinaNet: resnet18 + an FPN of 32 channels, 3 classes, torchvision's weights.
vision::RetinaNet fixture_retinanet() {
  auto model = vision::retinanet({.num_classes = 3, .arch = vision::resnet18, .fpn_channels = 32});
  load_state_dict(*model, kRetinaNet);
  return model;
}

// A small RetinaNet (resnet18 of width 8, FPN of 16) trained 2 epochs with SGD on squares,
// on `device` alone or as replicas on `replicas`.
TrainedState train_retinanet(const std::vector<torch::Device>& replicas, torch::Device device = torch::kCPU) {
  DataLoaders dls{DataLoader(squares(12, 1), {.bs = 4, .shuffle = true, .seed = 3}), DataLoader(squares(4, 2), {.bs = 4}),
                  {"red", "green"}};
  torch::manual_seed(0);
  auto options = quiet({.opt_func = sgd({.mom = 0.9})});
  options.device = device;
  auto learn = vision::detection_learner(dls, vision::resnet18, {}, {.width = 8, .fpn_channels = 16}, options);
  silence(learn);
  if (!replicas.empty()) learn.to_parallel(replicas);
  learn.fit_one_cycle(2, 1e-2);
  return trained_state_of(learn);
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
          "box_iou: expected floating boxes [N, 4], got Float [3, 5]");
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
    CHECK(error_of([&] { vision::Matcher{.high = 0.4, .low = 0.5}(quality); }) ==
          "Matcher: low (0.5) must not exceed high (0.4), the IoU from which an anchor is matched");
    CHECK(error_of([&] { vision::box_iou(torch::zeros({3, 5}), torch::zeros({2, 4})); }) ==
          "box_iou: expected floating boxes [N, 4], got Float [3, 5]");
    CHECK(error_of([&] { generator.grid_anchors({{12, 16}}, {96, 128}); }) ==
          "AnchorGenerator: 1 feature maps but sizes for 5");
  }

  TEST_CASE("RetinaNet loads torchvision's state dict; outputs, losses, gradients and detections equal torchvision's") {
    const auto f = read_torch_file(read_file(kRetinaNetIO)).toGenericDict();
    const auto x = entry(f, "input"), targets = entry(f, "targets");
    auto model = fixture_retinanet();

    model->train();
    const auto output = model(x);
    const vision::DetectorOutput out(output, "test");
    CHECK(output.sizes() == torch::IntArrayRef{3, 2313, 12 + 3});
    CHECK(torch::equal(out.anchors()[2], entry(f, "anchors")));
    CHECK((out.image_height() == 96 && out.image_width() == 128));
    CHECK(close(out.logits(), entry(f, "train.cls_logits"), 1e-4));
    CHECK(close(out.codes(), entry(f, "train.bbox_regression"), 1e-4));
    const auto losses = vision::retinanet_losses(output, targets);
    CHECK(torch::allclose(losses.classification, entry(f, "loss.classification"), 1e-5, 1e-5));
    CHECK(torch::allclose(losses.box_regression, entry(f, "loss.bbox_regression"), 1e-5, 1e-5));
    (losses.classification + losses.box_regression).backward();
    CHECK(torch::allclose(model->head->regression_head->final->weight.grad(), entry(f, "grad.bbox_reg"), 1e-4, 1e-6));
    CHECK(torch::allclose(model->backbone->body->named_parameters()["conv1.weight"].grad(), entry(f, "grad.conv1"), 1e-4, 1e-6));
    const auto giou = vision::retinanet_losses(output.detach(), targets, {.box_loss = vision::BoxLoss::giou});
    CHECK(torch::allclose(giou.box_regression, entry(f, "loss.giou"), 1e-5, 1e-5));
    // the Loss is the sum of the two terms
    CHECK(vision::retinanet_loss()(output.detach(), targets).item<double>() ==
          doctest::Approx((losses.classification + losses.box_regression).item<double>()).epsilon(1e-6));

    model->eval();
    torch::NoGradGuard no_grad;
    const auto evaluated = model(x);
    const vision::DetectorOutput eval_out(evaluated, "test");
    CHECK(close(eval_out.logits(), entry(f, "eval.cls_logits"), 1e-4));
    CHECK(close(eval_out.codes(), entry(f, "eval.bbox_regression"), 1e-4));
    const auto found = vision::retinanet_detections(evaluated, {.detections_per_image = 25, .candidates = 40});
    REQUIRE(found.size() == 3);
    for (int i = 0; i < 3; ++i) {
      CAPTURE(i);
      const auto key = "detections." + std::to_string(i) + ".";
      CHECK(torch::equal(found[i].labels, entry(f, key + "labels")));
      CHECK(close(found[i].scores, entry(f, key + "scores")));
      CHECK(close(found[i].boxes, entry(f, key + "boxes"), 1e-4));
    }
  }

  TEST_CASE("RetinaNet in torchvision's v2 layout (P6 from C5, GroupNorm in the head, GIoU loss) equals torchvision's") {
    const auto f = read_torch_file(read_file(kRetinaNetIO)).toGenericDict();
    auto model = vision::retinanet(
        {.num_classes = 3, .arch = vision::resnet18, .fpn_channels = 32, .p6_from_c5 = true, .head_group_norm = true});
    load_state_dict(*model, std::string(FASTCPP_MODEL_FIXTURES) + "/retinanet_v2.pth");
    model->train();
    const auto output = model(entry(f, "input"));
    const vision::DetectorOutput out(output, "test");
    CHECK(close(out.logits(), entry(f, "v2.train.cls_logits"), 1e-4));
    CHECK(close(out.codes(), entry(f, "v2.train.bbox_regression"), 1e-4));
    const auto giou = vision::retinanet_losses(output, entry(f, "targets"), {.box_loss = vision::BoxLoss::giou});
    CHECK(torch::allclose(giou.box_regression, entry(f, "v2.loss.giou"), 1e-5, 1e-5));
    CHECK(error_of([] { vision::retinanet({.num_classes = 3, .fpn_channels = 48, .head_group_norm = true}); }) ==
          "retinanet: a head with GroupNorm needs channels in multiples of 32, got 48");
    // P6 from C5 when asked, also where C5 is as wide as the pyramid (resnet18 of width 4: C5 has 32 channels)
    for (const bool from_c5 : {true, false}) {
      CAPTURE(from_c5);
      auto narrow = vision::retinanet({.num_classes = 3, .arch = vision::resnet18, .backbone = {.width = 4},
                                       .fpn_channels = 32, .p6_from_c5 = from_c5});
      CHECK(narrow->backbone->fpn->extra_blocks->uses_p5() == !from_c5);
      torch::NoGradGuard no_grad;
      narrow->eval();
      const auto x = torch::rand({1, 3, 64, 64});
      const auto c5 = narrow->backbone->body(x).back();
      const auto maps = narrow->backbone->fpn(narrow->backbone->body(x));
      const auto p6 = narrow->backbone->fpn->extra_blocks->p6(from_c5 ? c5 : maps[2]);
      CHECK(torch::allclose(maps[3], p6, 1e-5, 1e-6));
    }
  }

  TEST_CASE("RetinaNet pads its input to a multiple of 32 pixels, as torchvision's: its anchors fit the maps' cells") {
    torch::manual_seed(0);
    auto net = vision::retinanet({.num_classes = 2, .fpn_channels = 16});
    net->eval();
    const auto image = torch::rand({1, 3, 100, 70});
    const auto padded = torch::zeros({1, 3, 128, 96});
    padded.narrow(2, 0, 100).narrow(3, 0, 70).copy_(image);
    torch::NoGradGuard no_grad;
    const vision::DetectorOutput own(net(image), "test"), bigger(net(padded), "test");
    CHECK(torch::equal(own.anchors(), bigger.anchors()));
    CHECK(torch::allclose(own.codes(), bigger.codes(), 1e-5, 1e-6));
    CHECK(torch::allclose(own.logits(), bigger.logits(), 1e-5, 1e-6));
    CHECK((own.image_height() == 100 && own.image_width() == 70));  // what boxes are clipped to
    // the first map: 16 x 12 cells 8 pixels apart, 9 anchors each, the first cell's centred at 0
    const auto first = own.anchors()[0].narrow(0, 0, 16 * 12 * 9);
    const auto centres = (first.narrow(1, 0, 2) + first.narrow(1, 2, 2)) / 2;
    CHECK(centres.select(1, 0).max().item<double>() == 88);
    CHECK(centres.select(1, 1).max().item<double>() == 120);
  }

  TEST_CASE("a RetinaNet's clone has its own copy of every tensor and draws nothing from the global generator") {
    auto model = fixture_retinanet();
    torch::manual_seed(3);
    const auto expected_draw = torch::rand({4});
    torch::manual_seed(3);
    const auto copy = std::dynamic_pointer_cast<vision::RetinaNetImpl>(model->clone());
    CHECK(torch::equal(torch::rand({4}), expected_draw));
    const auto theirs = named_state(*copy), ours = named_state(*model);
    REQUIRE(theirs.size() == ours.size());
    for (size_t i = 0; i < ours.size(); ++i) {
      CAPTURE(ours[i].first);
      CHECK(theirs[i].first == ours[i].first);
      CHECK(torch::equal(theirs[i].second, ours[i].second));
      CHECK(theirs[i].second.data_ptr() != ours[i].second.data_ptr());
    }
    model->eval();
    copy->eval();
    torch::NoGradGuard no_grad;
    const auto x = torch::randn({1, 3, 64, 64});
    CHECK(torch::equal(model(x), copy->forward(x)));
  }

  TEST_CASE("detection targets pack each image's boxes; bad outputs and targets are named") {
    const auto targets = vision::box_targets({{torch::tensor({{1.0, 2.0, 3.0, 4.0}, {5.0, 6.0, 7.0, 8.0}}), torch::tensor({0, 2})},
                                              {torch::zeros({0, 4}), torch::zeros({0}, torch::kLong)}});
    CHECK(targets.sizes() == torch::IntArrayRef{2, 2, 5});
    CHECK(torch::equal(targets[1], torch::full({2, 5}, -1.0)));
    const auto first = vision::image_boxes(targets, 0);
    CHECK(torch::equal(first.labels, torch::tensor({0, 2}, torch::kLong)));
    CHECK(torch::equal(first.boxes, torch::tensor({{1.0f, 2.0f, 3.0f, 4.0f}, {5.0f, 6.0f, 7.0f, 8.0f}})));
    CHECK(vision::image_boxes(targets, 1).boxes.size(0) == 0);
    // Crowd regions after the boxes, as rows of label crowd_label(class) = -2 - class.
    const auto with_crowds = vision::box_targets(
        {{torch::tensor({{1.0, 2.0, 3.0, 4.0}}), torch::tensor({1}), torch::tensor({{0.0, 0.0, 9.0, 9.0}}),
          torch::tensor({2})},
         {torch::zeros({0, 4}), torch::zeros({0}, torch::kLong)}});
    CHECK(torch::equal(with_crowds[0],
                       torch::tensor({{1.0f, 2.0f, 3.0f, 4.0f, 1.0f}, {0.0f, 0.0f, 9.0f, 9.0f, -4.0f}})));
    CHECK(torch::equal(with_crowds[1], torch::full({2, 5}, -1.0f)));
    const auto crowded = vision::image_boxes(with_crowds, 0);
    CHECK(torch::equal(crowded.labels, torch::tensor({1}, torch::kLong)));
    CHECK(torch::equal(crowded.crowd_boxes, torch::tensor({{0.0f, 0.0f, 9.0f, 9.0f}})));
    CHECK(torch::equal(crowded.crowd_labels, torch::tensor({2}, torch::kLong)));
    CHECK(error_of([] {
            vision::box_targets({{torch::zeros({0, 4}), torch::zeros({0}, torch::kLong), {}, torch::tensor({2})}});
          }) == "box_targets: image 0 has crowd boxes none for 1 labels");
    CHECK(error_of([] { vision::retinanet_losses(torch::zeros({2, 5, 3}), torch::zeros({2, 1, 5})); }) ==
          "retinanet_loss: expected a detector's output [images, anchors, 12 + logits], got Float [2, 5, 3]");
    CHECK(error_of([] { vision::retinanet_losses(torch::zeros({2, 5, 15}), torch::zeros({2, 1, 4})); }) ==
          "retinanet_loss: expected targets [2, boxes, 5] (x1 y1 x2 y2 label), got [2, 1, 4]");
    CHECK(error_of([] { vision::retinanet({.num_classes = 0}); }) == "retinanet: num_classes must be positive, got 0");
    CHECK(error_of([] { vision::retinanet({.num_classes = 2, .prior_probability = 1}); }) ==
          "retinanet: prior_probability must be between 0 and 1, got 1");

    // Boxes without area (which would match every anchor: an infinite box loss) and labels
    // beyond the model's classes (a device assert on a GPU) are named, in both losses.
    torch::manual_seed(0);
    auto net = vision::retinanet({.num_classes = 3, .fpn_channels = 16});
    const auto output = net(torch::rand({2, 3, 64, 64}));
    auto with_box = [](std::vector<double> row) {
      auto t = torch::full({2, 2, 5}, -1.0);
      t[0][0] = torch::tensor({4.0, 4.0, 20.0, 20.0, 0.0});
      t[1][1] = torch::tensor(row);
      return t;
    };
    CHECK(std::isfinite(vision::retinanet_losses(output, with_box({8, 8, 30, 40, 2})).box_regression.item<double>()));
    CHECK(error_of([&] { vision::retinanet_losses(output, with_box({10, 10, 10, 20, 1})); }) ==
          "retinanet_loss: image 1's box 1 [10, 10, 10, 20] has no area (x2 <= x1 or y2 <= y1) or a corner that is not "
          "finite");
    CHECK(error_of([&] { vision::retinanet_losses(output, with_box({8, 8, 30, NAN, 1})); }) ==
          "retinanet_loss: image 1's box 1 [8, 8, 30, nan] has no area (x2 <= x1 or y2 <= y1) or a corner that is not "
          "finite");
    // A box partly off the image is clipped by the matching; one wholly off it would take every anchor.
    CHECK(std::isfinite(vision::retinanet_losses(output, with_box({50, 50, 80, 80, 2})).box_regression.item<double>()));
    CHECK(error_of([&] { vision::retinanet_losses(output, with_box({10000, 10000, 10010, 10010, 1})); }) ==
          "retinanet_loss: image 1's box 1 [10000, 10000, 10010, 10010] lies outside the image (64 x 64 pixels, "
          "width x height)");
    CHECK(error_of([&] { vision::retinanet_losses(output, with_box({-20, 8, 0, 40, 1})); }) ==
          "retinanet_loss: image 1's box 1 [-20, 8, 0, 40] lies outside the image (64 x 64 pixels, width x height)");
    CHECK(error_of([&] { vision::retinanet_losses(output, with_box({8, 8, 30, 40, 3})); }) ==
          "retinanet_loss: image 1's box 1 has label 3, not a class of the model's 3 (0 to 2)");
    CHECK(error_of([&] { vision::retinanet_losses(output, with_box({8, 8, 30, 40, 1.5})); }) ==
          "retinanet_loss: image 1's box 1 has label 1.5, not a class of the model's 3 (0 to 2)");
    CHECK(error_of([&] { vision::retinanet_losses(output, with_box({8, 8, 30, 40, NAN})); }) ==
          "retinanet_loss: image 1's box 1 has label nan, not a class of the model's 3 (0 to 2)");
    CHECK(error_of([&] { vision::retinanet_losses(output, with_box({8, 8, 30, 40, -5})); }) ==
          "retinanet_loss: image 1's box 1 has label -5: a crowd region of class 3, not one of the model's 3 (0 to 2)");
    CHECK(error_of([&] { vision::retinanet_losses(output, with_box({8, 8, 30, 40, -1.5})); }) ==
          "retinanet_loss: image 1's box 1 has label -1.5, not a class of the model's 3 (0 to 2)");
    // A crowd region (label -2 - class) is not trained on: the losses are those without it.
    const auto without = vision::retinanet_losses(output, with_box({-1, -1, -1, -1, -1}));
    const auto with_crowd = vision::retinanet_losses(output, with_box({8, 8, 30, 40, -4}));
    CHECK(torch::equal(with_crowd.classification, without.classification));
    CHECK(torch::equal(with_crowd.box_regression, without.box_regression));
    CHECK(error_of([&] { vision::retinanet_detections(output, {.candidates = -1}); }) ==
          "PostprocessOptions: detections_per_image and candidates must be >= 0, got 300 and -1");
  }

  TEST_CASE("detection_learner on one-channel images: the first conv takes one channel, RGB weights summed") {
    const auto grey = [](int64_t n, uint64_t seed) {
      const auto rgb = squares(n, seed);
      return std::make_shared<TensorDataset>(rgb->x().sum(1, /*keepdim=*/true), rgb->y());
    };
    DataLoaders dls{DataLoader(grey(8, 1), {.bs = 4}), DataLoader(grey(4, 2), {.bs = 4}), {"red", "green"}};
    torch::manual_seed(0);
    auto pretrained = vision::resnet18({.width = 8});
    const auto weights = temp_path("retinanet_grey_body.pth");
    save_state_dict(*pretrained, weights);
    const vision::DetectionLearnerOptions options{
        .pretrained_weights = weights, .width = 8, .in_channels = 1, .fpn_channels = 16};
    auto learn = vision::detection_learner(dls, vision::resnet18, {}, options, quiet());
    silence(learn);
    std::filesystem::remove(weights);
    const auto conv1 = learn.model.module().named_parameters()["backbone.body.conv1.weight"];
    CHECK(torch::equal(conv1, pretrained->named_parameters()["conv1.weight"].sum(1, /*keepdim=*/true)));
    CHECK(learn.dls.train.options().batch_tfms.empty());  // ImageNet's Normalize is for 3 channels
    learn.fit(1, 1e-3);
    CHECK(std::isfinite(learn.recorder->values.back()[1]));
    // An exported record without in_channels (older files) builds a 3-channel RetinaNet; with it, this one.
    ModelSpec spec{{"model", std::string("retinanet")}, {"backbone", std::string("resnet18")},
                   {"num_classes", int64_t{2}}, {"width", int64_t{8}}, {"fpn_channels", int64_t{16}},
                   {"p6_from_c5", false}, {"head_group_norm", false}};
    const auto first_conv = [&] {
      const auto model = vision::create_detection_model(spec, "record");
      return model.module().named_parameters()["backbone.body.conv1.weight"];
    };
    CHECK(first_conv().size(1) == 3);
    spec["in_channels"] = int64_t{1};
    CHECK(first_conv().size(1) == 1);
  }

  TEST_CASE("detection_learner trains a RetinaNet: the validation loss falls; pretrained weights load and freeze the body") {
    DataLoaders dls{DataLoader(squares(16, 1), {.bs = 4, .shuffle = true, .seed = 3}), DataLoader(squares(8, 2), {.bs = 4}),
                    {"red", "green"}};
    torch::manual_seed(0);
    auto learn = vision::detection_learner(dls, vision::resnet18, {vision::metrics::coco_map50()},
                                           {.width = 8, .fpn_channels = 16}, quiet());
    silence(learn);
    auto* net = dynamic_cast<vision::RetinaNetImpl*>(&learn.model.module());
    REQUIRE(net != nullptr);
    CHECK(net->options.num_classes == 2);
    const auto before = learn.validate();
    learn.fit_one_cycle(30, 3e-3);
    const auto after = learn.validate();
    CAPTURE(before[1]);
    CAPTURE(after[1]);
    CHECK(after[0] < 0.7 * before[0]);
    CHECK(before[1] < 0.05);  // coco_map50 on the validation squares: none found at first
    CHECK(after[1] > 0.2);
    // detect: one image's detections, as the batch's decoding gives them
    const auto image = dls.valid.dataset().get(3).x;
    const auto found = vision::detect(learn, image, {.score_threshold = 0.01});
    const auto expected = [&] {
      torch::NoGradGuard no_grad;
      return vision::retinanet_detections(learn.model(image.unsqueeze(0)), {.score_threshold = 0.01}).front();
    }();
    REQUIRE(found.scores.size(0) > 0);
    CHECK(torch::equal(found.labels, expected.labels));
    CHECK(torch::allclose(found.boxes, expected.boxes));
    CHECK(error_of([&] { vision::detect(learn, image.unsqueeze(0)); }) == "detect: expected one image [C, H, W], got [1, 3, 64, 64]");
    // A validation augmentation boxes cannot go back through: refused before the model runs.
    const auto kept_valid = learn.dls.valid;
    learn.dls.valid = DataLoader(squares(8, 2), {.bs = 4, .aug_tfms = {vision::aug_transforms()}});
    CHECK(error_of([&] { vision::detect(learn, image); }) ==
          "detect: validation batch augmentation 0 ('aug_transforms') is not a resize alone, so boxes cannot be mapped "
          "back to the image's pixels through it");
    learn.dls.valid = kept_valid;

    torch::manual_seed(0);
    auto pretrained = vision::resnet18({.width = 8});
    const auto weights = temp_path("retinanet_body.pth");
    save_state_dict(*pretrained, weights);
    auto tuned = vision::detection_learner(dls, vision::resnet18, {}, {.pretrained_weights = weights, .width = 8, .fpn_channels = 16},
                                           quiet());
    silence(tuned);
    std::filesystem::remove(weights);
    auto params = tuned.model.module().named_parameters();
    CHECK(torch::equal(params["backbone.body.layer3.1.conv2.weight"], pretrained->named_parameters()["layer3.1.conv2.weight"]));
    const auto conv_before = params["backbone.body.layer2.0.conv1.weight"].clone();
    const auto bn_before = params["backbone.body.layer2.0.bn1.weight"].clone();
    const auto head_before = params["head.regression_head.bbox_reg.weight"].clone();
    tuned.fit(1, 1e-3);
    CHECK(torch::equal(params["backbone.body.layer2.0.conv1.weight"], conv_before));  // frozen
    CHECK(!torch::equal(params["backbone.body.layer2.0.bn1.weight"], bn_before));     // norm layers train
    CHECK(!torch::equal(params["head.regression_head.bbox_reg.weight"], head_before));
    const auto& groups = tuned.opt->param_groups();
    REQUIRE(groups.size() == 3);
    CHECK(groups[0].params.size() + groups[1].params.size() + groups[2].params.size() == params.size());
    auto* body = dynamic_cast<vision::RetinaNetImpl*>(&tuned.model.module())->backbone->body.get();
    const auto layers = body->named_children();
    CHECK(groups[1].params.size() == layers["layer3"]->parameters().size() + layers["layer4"]->parameters().size());
    CHECK(error_of([&] { vision::detection_learner(DataLoaders{dls.train, dls.valid}, vision::resnet18, {}, {}, quiet()); }) ==
          "detection_learner: the data have no classes; give num_classes");
    CHECK(error_of([&] { vision::detection_learner(dls, vision::resnet18, {}, {.num_classes = 1}, quiet()); }) ==
          "detection_learner: num_classes 1 is fewer than the data's 2 classes");
  }

  TEST_CASE("coco_maps: AP and AP50 from one decoding a batch, equal to the two metrics on their own") {
    DataLoaders dls{DataLoader(squares(8, 1), {.bs = 4}), DataLoader(squares(12, 2), {.bs = 4}), {"red", "green"}};
    torch::manual_seed(0);
    int decodes = 0;
    auto shared = vision::metrics::coco_maps([&](const torch::Tensor& output) {
      ++decodes;
      return vision::detections(output, {.score_threshold = 0.005});
    });
    const auto low_threshold = [](const torch::Tensor& output) { return vision::detections(output, {.score_threshold = 0.005}); };
    auto learn = vision::detection_learner(
        dls, vision::resnet18,
        {shared[0], shared[1], vision::metrics::coco_map(low_threshold), vision::metrics::coco_map50(low_threshold)},
        {.width = 8, .fpn_channels = 16}, quiet());
    silence(learn);
    const auto values = learn.validate();  // loss, then the four metrics
    REQUIRE(values.size() == 5);
    CHECK(decodes == 3);  // one a validation batch
    CHECK(values[1] == values[3]);
    CHECK(values[2] == values[4]);
    CHECK(values[2] > 0);
    CHECK(vision::coco_ap(*shared[0]).ap50 == values[2]);
    learn.validate();
    CHECK(decodes == 6);
  }

  TEST_CASE("a RetinaNet trains on 2 CPU replicas as on one device: every weight and BatchNorm buffer, the loss") {
    // As the U-Net's (the parallel suite): the replicas add up BatchNorm's sums in another
    // order, so weights agree to 1e-5 with SGD and the running statistics to ten times that.
    check_trained_alike(train_retinanet({torch::kCPU, torch::kCPU}), train_retinanet({}), 1e-5);
  }

  TEST_CASE("COCO's AP, AP50, AP75 and per-class AP equal pycocotools' on the same detections") {
    const auto f = read_torch_file(read_file(kCocoEval)).toGenericDict();
    vision::CocoEvaluator evaluator(3);
    for (int i = 0; i < 12; ++i) {
      const auto key = std::to_string(i);
      evaluator.add({entry(f, "dt." + key + ".boxes"), entry(f, "dt." + key + ".scores"), entry(f, "dt." + key + ".labels")},
                    {entry(f, "gt." + key + ".boxes"), entry(f, "gt." + key + ".labels")});
    }
    const auto ap = evaluator.evaluate();
    CHECK(ap.ap == doctest::Approx(entry(f, "ap").item<double>()).epsilon(1e-6));
    CHECK(ap.ap50 == doctest::Approx(entry(f, "ap50").item<double>()).epsilon(1e-6));
    CHECK(ap.ap75 == doctest::Approx(entry(f, "ap75").item<double>()).epsilon(1e-6));
    const auto per_class = entry(f, "per_class");
    REQUIRE(ap.per_class.size() == 3);
    for (int k = 0; k < 3; ++k) CHECK(ap.per_class[k] == doctest::Approx(per_class[k].item<double>()).epsilon(1e-6));
    CHECK(ap.per_class[1] == -1);  // no ground truth of class 1
    CHECK(ap.ap > 0.1);
    const auto ar = entry(f, "ar");
    CHECK(ap.ar1 == doctest::Approx(ar[0].item<double>()).epsilon(1e-6));
    CHECK(ap.ar10 == doctest::Approx(ar[1].item<double>()).epsilon(1e-6));
    CHECK(ap.ar100 == doctest::Approx(ar[2].item<double>()).epsilon(1e-6));
    CHECK(ap.ar1 < ap.ar10);  // the fixture has images with several boxes of a class
    // With crowd regions: detections inside them are neither right nor wrong.
    vision::CocoEvaluator with_crowds(3);
    for (int i = 0; i < 12; ++i) {
      const auto key = std::to_string(i);
      with_crowds.add(
          {entry(f, "dt." + key + ".boxes"), entry(f, "dt." + key + ".scores"), entry(f, "dt." + key + ".labels")},
          {entry(f, "gt." + key + ".boxes"), entry(f, "gt." + key + ".labels"),
           entry(f, "crowd." + key + ".boxes"), entry(f, "crowd." + key + ".labels")});
    }
    const auto crowd_ap = with_crowds.evaluate();
    CHECK(crowd_ap.ap == doctest::Approx(entry(f, "crowd.ap").item<double>()).epsilon(1e-6));
    CHECK(crowd_ap.ap50 == doctest::Approx(entry(f, "crowd.ap50").item<double>()).epsilon(1e-6));
    CHECK(crowd_ap.ap75 == doctest::Approx(entry(f, "crowd.ap75").item<double>()).epsilon(1e-6));
    for (int k = 0; k < 3; ++k)
      CHECK(crowd_ap.per_class[k] == doctest::Approx(entry(f, "crowd.per_class")[k].item<double>()).epsilon(1e-6));
    for (int m = 0; m < 3; ++m)
      CHECK(std::array{crowd_ap.ar1, crowd_ap.ar10, crowd_ap.ar100}[m] ==
            doctest::Approx(entry(f, "crowd.ar")[m].item<double>()).epsilon(1e-6));
    CHECK(crowd_ap.per_class[1] == -1);  // crowd regions of class 1 are not its ground truth
    CHECK(crowd_ap.ap > ap.ap + 0.002);   // the fixture's crowds take false positives away
    // A crowd region takes any number of detections; each image's detections of a class are
    // cut to max_detections before matching.
    for (const int most : {100, 12}) {
      vision::CocoEvaluator capped(1, most);
      const auto found = entry(f, "cap.dt.boxes"), objects = entry(f, "cap.gt.boxes");
      capped.add({found, entry(f, "cap.dt.scores"), torch::zeros({found.size(0)}, torch::kLong)},
                 {objects, torch::zeros({2}, torch::kLong), entry(f, "cap.crowd.boxes"),
                  torch::zeros({1}, torch::kLong)});
      const auto result = capped.evaluate();
      const auto key = "cap." + std::to_string(most) + ".";
      CHECK(result.ap == doctest::Approx(entry(f, key + "ap").item<double>()).epsilon(1e-6));
      CHECK(result.ap50 == doctest::Approx(entry(f, key + "ap50").item<double>()).epsilon(1e-6));
      for (int m = 0; m < 3; ++m)
        CHECK(std::array{result.ar1, result.ar10, result.ar100}[m] ==
              doctest::Approx(entry(f, key + "ar")[m].item<double>()).epsilon(1e-6));
    }
    CHECK(entry(f, "cap.100.ap").item<double>() == doctest::Approx(1.0 / 7));  // 2 right after 12 wrong
    CHECK(entry(f, "cap.12.ap").item<double>() == 0);
    // Detections equal to the ground truth, scored: AP 1.
    vision::CocoEvaluator perfect(3);
    const auto truth = entry(f, "gt.1.boxes"), labels = entry(f, "gt.1.labels");
    perfect.add({truth, torch::ones({truth.size(0)}), labels}, {truth, labels});
    CHECK(perfect.evaluate().ap == doctest::Approx(1.0));
    CHECK(error_of([&] { perfect.add({truth, torch::ones({truth.size(0)}), labels + 5}, {truth, labels}); }).rfind(
              "CocoEvaluator: label ", 0) == 0);
    const auto n = std::to_string(truth.size(0));
    CHECK(error_of([&] { perfect.add({truth, torch::ones({truth.size(0) + 1}), labels}, {truth, labels}); }) ==
          "CocoEvaluator::add: image 1's detections are not boxes [n, 4], scores [n] and labels [n]: got [" + n + ", 4], [" +
              std::to_string(truth.size(0) + 1) + "] and [" + n + "]");
    CHECK(error_of([&] { perfect.add({truth, torch::ones({truth.size(0)}), labels}, {truth[0], labels}); }) ==
          "CocoEvaluator::add: image 1's ground truth are not boxes [n, 4] and labels [n]: got [4] and [" + n + "]");
    CHECK(error_of([&] {
            perfect.add({truth, torch::ones({truth.size(0)}), labels}, {truth, labels, truth, torch::tensor({0})});
          }) == "CocoEvaluator::add: image 1's crowd regions are not boxes [n, 4] and labels [n]: got [" + n +
                    ", 4] and [1]");
    CHECK(error_of([] { vision::CocoEvaluator(3, 0); }) == "CocoEvaluator: max_detections must be positive, got 0");
  }

  TEST_CASE("detection_learner in bf16 autocast: P6 and P7 keep finite gradients, the output stays float, the loss falls") {
    {
      // P6 and P7 on 1x1 maps: PyTorch's CPU bf16 conv gives non-finite weight gradients
      // now and then there (feature_pyramid.cpp); ours run those in float. Without that,
      // these 200 tries find one in about half of the processes (it seems to depend on the process).
      torch::manual_seed(0);
      set_autocast(c10::DeviceType::CPU, true, torch::kBFloat16);
      bool finite = true;
      for (int i = 0; i < 200 && finite; ++i) {
        vision::LastLevelP6P7 extra(16, 16, /*from_p5=*/true);
        const auto maps = extra(torch::randn({4, 16, 1, 1}));
        (maps[0].sum() + maps[1].sum()).to(torch::kFloat).backward();
        finite = torch::isfinite(extra->p7->weight.grad()).all().item<bool>() &&
                 torch::isfinite(extra->p6->weight.grad()).all().item<bool>();
      }
      const auto output = vision::retinanet({.num_classes = 2, .arch = vision::resnet18, .backbone = {.width = 8},
                                             .fpn_channels = 16})(torch::randn({1, 3, 64, 64}));
      set_autocast(c10::DeviceType::CPU, false, torch::kBFloat16);
      CHECK(finite);
      CHECK((output.scalar_type() == torch::kFloat));  // anchors and box codes kept in float
    }
    DataLoaders dls{DataLoader(squares(16, 1), {.bs = 4, .shuffle = true, .seed = 3}), DataLoader(squares(8, 2), {.bs = 4}),
                    {"red", "green"}};
    torch::manual_seed(0);
    auto learn = vision::detection_learner(dls, vision::resnet18, {}, {.width = 8, .fpn_channels = 16}, quiet());
    silence(learn);
    learn.to_bf16();
    const auto before = learn.validate()[0];
    learn.fit_one_cycle(10, 3e-3);
    const auto after = learn.validate()[0];
    CHECK(std::isfinite(after));
    CHECK(after < 0.9 * before);
  }
}

TEST_SUITE("gpu" * doctest::skip(!torch::cuda::is_available())) {
  TEST_CASE("a RetinaNet on {cuda:0, cuda:0} ends as on one GPU: every weight and BatchNorm buffer, the loss") {
    const FullFp32Convolutions full_fp32;
    const torch::Device cuda0("cuda:0");
    check_trained_alike(train_retinanet({cuda0, cuda0}, cuda0), train_retinanet({}, cuda0), 1e-4);
  }
}
