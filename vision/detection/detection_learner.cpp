#include "vision/detection/detection_learner.h"

#include "core/error.h"
#include "formats/state_dict.h"
#include "vision/arch.h"

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

Learner detection_learner(DataLoaders dls, ResNetArch arch, std::vector<MetricPtr> metrics, DetectionLearnerOptions o,
                          LearnerOptions learner_options) {
  if (!arch) throw Error("detection_learner: no architecture given");
  const int64_t num_classes = o.num_classes > 0 ? o.num_classes : static_cast<int64_t>(dls.num_classes());
  if (num_classes < 1) throw Error("detection_learner: the data have no classes; give num_classes");
  auto model = retinanet({.num_classes = num_classes, .arch = arch, .backbone = {.width = o.width},
                          .fpn_channels = o.fpn_channels, .head_group_norm = o.head_group_norm});
  if (!o.pretrained_weights.empty())
    load_state_dict(*model->backbone->body, o.pretrained_weights, {.skip = {"fc."}});
  if (!learner_options.splitter) learner_options.splitter = retinanet_split;
  learner_options.frozen = !o.pretrained_weights.empty();
  if (o.normalize) add_pretrained_normalize(dls, o.pretrained_weights, 3);
  return Learner(std::move(dls), model, retinanet_loss(o.loss), std::move(metrics), std::move(learner_options));
}

Detections detect(Learner& learn, const torch::Tensor& image, const PostprocessOptions& options) {
  if (image.dim() != 3) throw Error("detect: expected one image [C, H, W], got " + c10::str(image.sizes()));
  return retinanet_detections(learn.predict(image).unsqueeze(0), options).front();
}

}  // namespace fastcpp::vision
