#include "vision/detection/detection_learner.h"

#include <set>

#include "core/error.h"
#include "formats/state_dict.h"
#include "vision/arch.h"
#include "vision/augment.h"

namespace fastcpp::vision {

std::vector<std::vector<torch::Tensor>> retinanet_split(torch::nn::Module& model) {
  auto* net = dynamic_cast<RetinaNetImpl*>(&model);
  if (!net) throw Error("detection_learner: the model is not a RetinaNet");
  std::vector<std::vector<torch::Tensor>> groups(3);
  bool second = false;
  for (const auto& layer : net->backbone->body->named_children()) {
    second = second || layer.key() == "layer3";
    for (const auto& p : layer.value()->parameters()) groups[second ? 1 : 0].push_back(p);
  }
  for (const auto& p : net->backbone->fpn->parameters()) groups[2].push_back(p);
  for (const auto& p : net->head->parameters()) groups[2].push_back(p);
  return groups;
}

namespace {

int64_t classes_of(const DataLoaders& dls, int64_t given, const char* who) {
  const auto of_data = static_cast<int64_t>(dls.num_classes());
  if (given > 0 && given < of_data)
    throw Error(std::string(who) + ": num_classes " + std::to_string(given) + " is fewer than the data's " +
                std::to_string(of_data) + " classes");
  const int64_t num_classes = given > 0 ? given : of_data;
  if (num_classes < 1) throw Error(std::string(who) + ": the data have no classes; give num_classes");
  return num_classes;
}

const std::vector<ResNetArch> kBackbones{resnet18, resnet34, resnet50, resnet101};

ResNetArch backbone_named(const std::string& name) {
  std::string known;
  for (const auto arch : kBackbones) {
    if (Arch(arch).name() == name) return arch;
    known += (known.empty() ? "" : ", ") + Arch(arch).name();
  }
  throw Error("unknown backbone '" + name + "' (known: " + known + ")");
}

ModelSpec retinanet_spec(const RetinaNetOptions& o) {
  const auto backbone = Arch(o.arch).name();
  if (backbone.empty()) return {};
  return {{"model", std::string("retinanet")},       {"backbone", backbone},
          {"num_classes", o.num_classes},            {"width", o.backbone.width},
          {"in_channels", o.backbone.in_channels},
          {"fpn_channels", o.fpn_channels},          {"p6_from_c5", o.p6_from_c5},
          {"head_group_norm", o.head_group_norm}};
}

}  // namespace

bool is_detection_spec(const ModelSpec& spec) {
  const auto it = spec.find("model");
  return it != spec.end() && it->second.isString() &&
         (it->second.toStringRef() == "retinanet" || it->second.toStringRef() == "ssd300_vgg16");
}

Model create_detection_model(const ModelSpec& spec, const std::string& source) {
  auto entry = [&](const std::string& key) { return spec_entry(spec, key); };
  try {
    if (entry("model").toStringRef() == "ssd300_vgg16") return Model(ssd300_vgg16({.num_classes = entry("num_classes").toInt()}));
    return Model(retinanet({.num_classes = entry("num_classes").toInt(),
                            .arch = backbone_named(entry("backbone").toStringRef()),
                            .backbone = {.in_channels = spec.count("in_channels") ? entry("in_channels").toInt() : 3,
                                         .width = entry("width").toInt()},
                            .fpn_channels = entry("fpn_channels").toInt(),
                            .p6_from_c5 = entry("p6_from_c5").toBool(),
                            .head_group_norm = entry("head_group_norm").toBool()}));
  } catch (const c10::Error& e) {
    throw Error(source + ": an entry of its architecture record has the wrong type (" +
                std::string(e.what_without_backtrace()).substr(0, 200) + ")");
  } catch (const Error& e) {
    throw Error(source + ": " + e.what());
  }
}

Learner detection_learner(DataLoaders dls, ResNetArch arch, std::vector<MetricPtr> metrics, DetectionLearnerOptions o,
                          LearnerOptions learner_options) {
  if (!arch) throw Error("detection_learner: no architecture given");
  const auto num_classes = classes_of(dls, o.num_classes, "detection_learner");
  auto model = retinanet({.num_classes = num_classes, .arch = arch,
                          .backbone = {.in_channels = o.in_channels, .width = o.width},
                          .fpn_channels = o.fpn_channels, .head_group_norm = o.head_group_norm});
  learner_options.model_spec = retinanet_spec(model->options);
  if (!o.pretrained_weights.empty()) {
    auto state = read_state_dict(o.pretrained_weights);
    const c10::IValue first_conv("conv1.weight");
    if (auto it = state.find(first_conv); it != state.end() && it->value().isTensor())
      state.insert_or_assign(first_conv, adapt_input_channels(it->value().toTensor(), o.in_channels));
    load_state_dict(*model->backbone->body, state, "weights '" + o.pretrained_weights + "'", {.skip = {"fc."}});
  }
  if (!learner_options.splitter) learner_options.splitter = retinanet_split;
  learner_options.frozen = !o.pretrained_weights.empty();
  if (o.normalize) add_pretrained_normalize(dls, o.pretrained_weights, o.in_channels);
  return Learner(std::move(dls), model, retinanet_loss(o.loss), std::move(metrics), std::move(learner_options));
}

std::vector<std::vector<torch::Tensor>> ssd_split(torch::nn::Module& model) {
  auto* net = dynamic_cast<SsdImpl*>(&model);
  if (!net) throw Error("ssd_learner: the model is not an SSD");
  // The first extra block is VGG's conv5 (pretrained) ending in fc6 and fc7 (new).
  const auto conv5 = net->backbone->extra->ptr(0);
  std::set<const void*> fc6_fc7;
  for (const auto& p : conv5->children().back()->parameters()) fc6_fc7.insert(p.unsafeGetTensorImpl());
  std::vector<std::vector<torch::Tensor>> groups{net->backbone->features->parameters(), {}, {}};
  for (const auto& p : conv5->parameters()) groups[fc6_fc7.count(p.unsafeGetTensorImpl()) ? 2 : 1].push_back(p);
  for (size_t block = 1; block < net->backbone->extra->size(); ++block)
    for (const auto& p : net->backbone->extra->ptr(block)->parameters()) groups[2].push_back(p);
  groups[2].push_back(net->backbone->scale_weight);
  for (const auto& p : net->head->parameters()) groups[2].push_back(p);
  return groups;
}

Learner ssd_learner(DataLoaders dls, std::vector<MetricPtr> metrics, SsdLearnerOptions o, LearnerOptions learner_options) {
  auto model = ssd300_vgg16({.num_classes = classes_of(dls, o.num_classes, "ssd_learner")});
  learner_options.model_spec = {{"model", std::string("ssd300_vgg16")}, {"num_classes", model->options.num_classes}};
  if (!o.pretrained_weights.empty()) load_vgg16_features(*model->backbone, o.pretrained_weights);
  if (!learner_options.splitter) learner_options.splitter = ssd_split;
  learner_options.frozen = !o.pretrained_weights.empty();
  // torchvision's VGG-16 features were trained on 0-255 pixels less their mean
  if (o.normalize)
    add_pretrained_normalize(dls, o.pretrained_weights, 3,
                             Normalize{{0.48235, 0.45882, 0.40784}, {1 / 255.0, 1 / 255.0, 1 / 255.0}});
  return Learner(std::move(dls), model, ssd_loss(o.loss), std::move(metrics), std::move(learner_options));
}

Detections detect(Learner& learn, const torch::Tensor& image, const PostprocessOptions& options) {
  if (image.dim() != 3) throw Error("detect: expected one image [C, H, W], got " + c10::str(image.sizes()));
  // predict runs the validation loader's batch resizes (fastai's presizing), undone below.
  const auto& resizes = learn.dls.valid.options().aug_tfms;
  check_boxes_can_go_back(resizes, "detect");
  auto found = detections(learn.predict(image).unsqueeze(0), options).front();
  found.boxes = boxes_before_resizes(resizes, std::move(found.boxes), image.size(1), image.size(2));
  return found;
}

}  // namespace fastcpp::vision
