// SSD against torchvision's ssd300_vgg16 on the same weights and inputs (fixtures from
// tests/fixtures/torchvision_models.py): default boxes, matching, outputs, losses,
// gradients and detections; the VGG-16 ImageNet features loading; ssd_learner's training, on one device and on two.
#include "detection_helpers.h"
#include "helpers.h"
#include "trained_state.h"
#include "vision/detection/detection_learner.h"
#include "vision/detection/detector_output.h"
#include "vision/detection/postprocess.h"
#include "vision/detection/ssd.h"

using namespace fastcpp;
using namespace fastcpp::testing;

namespace {

const std::string kSsd = std::string(FASTCPP_MODEL_FIXTURES) + "/ssd.pth";
const std::string kSsdIO = std::string(FASTCPP_MODEL_FIXTURES) + "/ssd_io.pt";
const std::string kVgg = std::string(FASTCPP_MODEL_FIXTURES) + "/vgg16_features.pth";

// An SSD300 trained one epoch with SGD on 6 squares in batches of 4 (a last batch of 2),
// on the CPU alone or as replicas on `replicas`.
TrainedState train_ssd(const std::vector<torch::Device>& replicas) {
  DataLoaders dls{DataLoader(squares(6, 1, 300), {.bs = 4, .shuffle = true, .seed = 3}), DataLoader(squares(2, 2, 300), {.bs = 2}),
                  {"red", "green"}};
  torch::manual_seed(0);
  auto learn = vision::ssd_learner(dls, {}, {}, quiet({.opt_func = sgd({.mom = 0.9})}));
  silence(learn);
  if (!replicas.empty()) learn.to_parallel(replicas);
  learn.fit_one_cycle(1, 1e-3);
  return trained_state_of(learn);
}

}  // namespace

TEST_SUITE("detection") {
  TEST_CASE("SSD300 loads torchvision's state dict; default boxes, matches, outputs, losses, gradients and detections equal torchvision's") {
    const auto f = read_torch_file(read_file(kSsdIO)).toGenericDict();
    const auto x = entry(f, "input"), targets = entry(f, "targets");
    auto model = vision::ssd300_vgg16({.num_classes = 3});
    load_state_dict(*model, kSsd);

    model->train();
    const auto output = model(x);
    const vision::DetectorOutput out(output, "test");
    CHECK(output.sizes() == torch::IntArrayRef{2, 8732, 12 + 1 + 3});
    CHECK((out.scoring() == vision::Scoring::softmax && out.num_classes() == 3));
    CHECK((out.image_height() == 300 && out.image_width() == 300));
    CHECK(torch::equal(out.anchors()[1], entry(f, "anchors")));
    const auto quality = vision::box_iou(vision::image_boxes(targets, 0).boxes, entry(f, "anchors"));
    CHECK(torch::equal(vision::SsdLossOptions{}.matcher(quality), entry(f, "matches")));
    CHECK(close(out.logits(), entry(f, "train.cls_logits"), 1e-4));
    CHECK(close(out.codes(), entry(f, "train.bbox_regression"), 1e-4));
    const auto losses = vision::ssd_losses(output, targets);
    CHECK(torch::allclose(losses.classification, entry(f, "loss.classification"), 1e-5, 1e-5));
    CHECK(torch::allclose(losses.box_regression, entry(f, "loss.bbox_regression"), 1e-5, 1e-5));
    {  // a crowd region (a row of label -2 - class) is not trained on
      const auto crowd = torch::tensor({{{10.0f, 10.0f, 200.0f, 200.0f, -3.0f}}}).expand({targets.size(0), 1, 5});
      const auto with_crowd = vision::ssd_losses(output.detach(), torch::cat({targets, crowd}, 1));
      CHECK(torch::allclose(with_crowd.classification, losses.classification));
      CHECK(torch::allclose(with_crowd.box_regression, losses.box_regression));
    }
    (losses.classification + losses.box_regression).backward();
    const auto params = model->named_parameters();
    CHECK(torch::allclose(params["head.classification_head.module_list.0.weight"].grad(), entry(f, "grad.cls0"), 1e-4, 1e-5));
    CHECK(torch::allclose(params["backbone.features.0.weight"].grad(), entry(f, "grad.conv1_1"), 1e-4, 1e-5));
    CHECK(torch::allclose(params["backbone.scale_weight"].grad(), entry(f, "grad.scale_weight"), 1e-4, 1e-6));
    CHECK(vision::ssd_loss()(output.detach(), targets).item<double>() ==
          doctest::Approx((losses.classification + losses.box_regression).item<double>()).epsilon(1e-6));

    model->eval();
    torch::NoGradGuard no_grad;
    const auto evaluated = model(x);
    const vision::DetectorOutput eval_out(evaluated, "test");
    CHECK(close(eval_out.logits(), entry(f, "eval.cls_logits"), 1e-4));
    CHECK(close(eval_out.codes(), entry(f, "eval.bbox_regression"), 1e-4));
    const auto found = vision::detections(evaluated, {.detections_per_image = 600});
    REQUIRE(found.size() == 2);
    for (int i = 0; i < 2; ++i) {
      CAPTURE(i);
      const auto key = "detections." + std::to_string(i) + ".";
      CHECK(torch::equal(found[i].labels + 1, entry(f, key + "labels")));  // torchvision counts the background as 0
      CHECK(close(found[i].scores, entry(f, key + "scores")));
      CHECK(close(found[i].boxes, entry(f, key + "boxes"), 1e-4));
    }
    CHECK(error_of([&] { vision::retinanet_detections(evaluated); }) ==
          "retinanet_detections: the output is scored by softmax (ssd_detections decodes it)");
  }

  TEST_CASE("SSD's default boxes, options and bad input are named") {
    // One map of 2 x 3 cells on a 20 x 30 image, one aspect ratio: 4 boxes a cell, in
    // torchvision's order (s_k, sqrt(s_k s_k+1), then w/h and h/w of each ratio).
    const vision::DefaultBoxGenerator generator{.aspect_ratios = {{4}}, .scales = {0.5, 2}, .clip = true};
    const auto boxes = generator.grid_anchors({{2, 3}}, {20, 30});
    REQUIRE(boxes.sizes() == torch::IntArrayRef{24, 4});
    // cell (row 0, col 1): centre (15, 5); sides as fractions 0.5, 1 (clipped from
    // sqrt(0.5 * 2) = 1), then 1 x 0.25 and 0.25 x 1
    CHECK(torch::allclose(boxes.narrow(0, 4, 4), torch::tensor({{7.5f, 0.0f, 22.5f, 10.0f},
                                                                  {0.0f, -5.0f, 30.0f, 15.0f},
                                                                  {0.0f, 2.5f, 30.0f, 7.5f},
                                                                  {11.25f, -5.0f, 18.75f, 15.0f}})));
    // At another size than the steps were made for (SSD512's maps, 64 to 4 cells), each map's
    // boxes are spread over its own cells: every centre on the image, the last map's first at 64.
    const auto ssd = vision::ssd300_default_boxes();
    const auto at512 = ssd.grid_anchors({{64, 64}, {32, 32}, {16, 16}, {8, 8}, {6, 6}, {4, 4}}, {512, 512});
    const auto centres = (at512.narrow(1, 0, 2) + at512.narrow(1, 2, 2)) / 2;
    CHECK(centres.min().item<double>() > 0);
    CHECK(centres.max().item<double>() < 512);
    CHECK(torch::allclose(centres[at512.size(0) - 16 * 4], torch::tensor({64.0f, 64.0f})));
    CHECK(error_of([&] { generator.grid_anchors({{2, 3}, {1, 1}}, {20, 30}); }) ==
          "DefaultBoxGenerator: 2 feature maps need as many aspect ratio lists (got 1), one scale more (got 2) and as many "
          "steps or none (got 0)");
    CHECK(error_of([] { vision::ssd300_vgg16({.num_classes = 0}); }) == "ssd: num_classes must be positive, got 0");
    CHECK(error_of([] { vision::ssd300_vgg16({.num_classes = 2})(torch::zeros({1, 1, 300, 300})); }) ==
          "ssd: expected images [N, 3, H, W], got [1, 1, 300, 300]");
    CHECK(error_of([] { vision::ssd300_vgg16({.num_classes = 2})(torch::zeros({1, 3, 300, 267})); }) ==
          "ssd: images need 268 pixels a side or more (the last extra block leaves no cell below that; torchvision's "
          "size is 300), got 300 x 267");
    CHECK(error_of([] { vision::ssd_losses(torch::zeros({2, 5, 15}), torch::zeros({3, 1, 5})); }) ==
          "ssd_loss: expected targets [2, boxes, 5] (x1 y1 x2 y2 label), got [3, 1, 5]");
    CHECK(error_of([] { vision::ssd_detections(torch::zeros({1, 5, 15})); }) ==
          "ssd_detections: the output is scored by sigmoid (retinanet_detections decodes it)");
    auto backbone = vision::SsdVggBackbone();
    const auto bad = temp_path("not_vgg.pth");
    save_state_dict(*tiny_model(), bad);
    CHECK(error_of([&] { vision::load_vgg16_features(*backbone, bad); }) ==
          "cannot read vgg16 weights '" + bad + "': its 'features.0.weight' entry is missing or of the wrong type");
    std::filesystem::remove(bad);
  }

  TEST_CASE("ssd_learner trains an SSD300; torchvision's VGG-16 features load, freeze and bring SSD's Normalize") {
    // two images, trained on and validated on (an SSD300 step takes seconds on a CPU)
    DataLoaders dls{DataLoader(squares(2, 1, 300), {.bs = 2, .shuffle = true, .seed = 3}), DataLoader(squares(2, 1, 300), {.bs = 2}),
                    {"red", "green"}};
    torch::manual_seed(0);
    auto learn = vision::ssd_learner(dls, {}, {}, quiet());
    silence(learn);
    const auto before = learn.validate()[0];
    learn.fit(3, 1e-4);
    const auto after = learn.validate()[0];
    CAPTURE(before);
    CAPTURE(after);
    CHECK(after < 0.8 * before);
    const auto& groups = learn.opt->param_groups();
    REQUIRE(groups.size() == 3);
    CHECK(groups[1].params.size() == 2 * 3);  // conv5_1-3, VGG's; fc6, fc7 and the extra blocks are new
    for (const auto& p : groups[1].params) CHECK(p.size(0) == 512);

    auto tuned = vision::ssd_learner(dls, {}, {.pretrained_weights = kVgg}, quiet());
    silence(tuned);
    const auto vgg = read_state_dict(kVgg);
    auto params = tuned.model.module().named_parameters();
    CHECK(torch::equal(params["backbone.features.21.weight"], vgg.at("features.21.weight").toTensor()));
    CHECK(torch::equal(params["backbone.extra.0.5.bias"], vgg.at("features.28.bias").toTensor()));
    const auto features_before = params["backbone.features.0.weight"].clone();
    const auto head_before = params["head.regression_head.module_list.0.weight"].clone();
    const auto conv5_before = params["backbone.extra.0.1.weight"].clone();
    const auto fc6_before = params["backbone.extra.0.7.1.weight"].clone();
    const auto extra_before = params["backbone.extra.1.0.weight"].clone();
    tuned.fit(1, 1e-4);
    CHECK(torch::equal(params["backbone.features.0.weight"], features_before));  // frozen
    CHECK(torch::equal(params["backbone.extra.0.1.weight"], conv5_before));
    CHECK(!torch::equal(params["backbone.extra.0.7.1.weight"], fc6_before));  // new layers train while frozen
    CHECK(!torch::equal(params["backbone.extra.1.0.weight"], extra_before));
    CHECK(!torch::equal(params["head.regression_head.module_list.0.weight"], head_before));
    const auto& tfms = tuned.dls.valid.options().batch_tfms;
    REQUIRE(!tfms.empty());
    const auto* normalize = tfms.back().target<Normalize>();
    REQUIRE(normalize != nullptr);
    CHECK(normalize->mean == std::vector<double>{0.48235, 0.45882, 0.40784});
  }

  TEST_CASE("an SSD300 trains on 2 CPU replicas as on one device: every weight, the loss") {
    // No BatchNorm in VGG-16: the replicas' gradients differ from one device's only in the
    // order of their sums.
    check_trained_alike(train_ssd({torch::kCPU, torch::kCPU}), train_ssd({}), 1e-5);
  }
}
