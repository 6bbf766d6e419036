#include "vision/unet_learner.h"

#include "core/error.h"
#include "core/sequential.h"
#include "vision/models/unet.h"

namespace fastcpp::vision {
namespace {

// The three parameter groups of a DynamicUnet: its encoder's layers before `cut`, the
// encoder's others, and everything after the encoder.
Splitter unet_split(size_t cut) {
  return [cut](torch::nn::Module& model) {
    auto* unet = dynamic_cast<DynamicUnetImpl*>(&model);
    if (!unet) throw Error("unet_learner: the model is not a DynamicUnet");
    std::vector<std::vector<torch::Tensor>> groups(3);
    size_t index = 0;
    for (const auto& layer : unet->encoder()->children()) {
      auto& group = groups[index++ < cut ? 0 : 1];
      for (const auto& p : layer->parameters()) group.push_back(p);
    }
    for (size_t i = 1; i < unet->layers->size(); ++i)
      for (const auto& p : unet->layers->ptr(i)->parameters()) groups[2].push_back(p);
    return groups;
  };
}

}  // namespace

Learner unet_learner(DataLoaders dls, const Arch& arch, std::vector<MetricPtr> metrics, UnetLearnerOptions o,
                     LearnerOptions learner_options) {
  if (!arch) throw Error("unet_learner: no architecture given");
  const int64_t n_out = o.n_out > 0 ? o.n_out : static_cast<int64_t>(dls.num_classes());
  if (n_out < 1) throw Error("unet_learner: the data have no codes; give n_out");
  auto img_size = o.img_size;
  if (img_size.empty()) {
    if (dls.train.dataset().size() == 0) throw Error("unet_learner: the training set is empty; give img_size");
    const auto x = dls.train.dataset().get(0).x;
    if (x.dim() < 2) throw Error("unet_learner: expected images [C, H, W], got an item of shape " + c10::str(x.sizes()));
    img_size = {x.size(-2), x.size(-1)};
  }
  const BodyOptions body_options{.in_channels = o.in_channels, .stem = o.stem, .width = o.width};
  const auto body = pretrained_body(arch, body_options, o.pretrained_weights);
  size_t cut = 0;  // where the second parameter group starts, counted in the body's layers
  for (const auto& layer : named_layers(*body.layers)) {
    if (layer.name == arch.second_group()) break;
    ++cut;
  }
  auto unet = DynamicUnet(unet_encoder(body),
                          {.n_out = n_out, .img_size = img_size, .blur = o.blur, .blur_final = o.blur_final,
                           .self_attention = o.self_attention, .last_cross = o.last_cross, .bottle = o.bottle,
                           .y_range = o.y_range});
  learner_options.splitter = unet_split(cut);
  learner_options.frozen = !o.pretrained_weights.empty();
  auto loss = o.loss_func ? o.loss_func : CrossEntropyLossFlat();
  return Learner(std::move(dls), unet, std::move(loss), std::move(metrics), std::move(learner_options));
}

}  // namespace fastcpp::vision
