#include "vision/unet_learner.h"

#include "core/error.h"
#include "core/sequential.h"
#include "formats/torch_file.h"
#include "vision/augment.h"
#include "vision/models/unet.h"

namespace fastcpp::vision {
namespace {

// The three parameter groups of a DynamicUnet: its encoder's layers before `cut`, the
// encoder's others, and everything after the encoder. A cut past the encoder's end (an
// architecture without a second group) leaves two, as fastai's default_split.
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
    if (groups[1].empty()) groups.erase(groups.begin() + 1);
    return groups;
  };
}

Body unet_body(const Arch& arch, const UnetLearnerOptions& o) {
  if (!arch) throw Error("unet_learner: no architecture given");
  return pretrained_body(arch, {.in_channels = o.in_channels, .stem = o.stem, .width = o.width}, o.pretrained_weights);
}

DynamicUnet unet_on(const Body& body, int64_t n_out, std::vector<int64_t> img_size, const UnetLearnerOptions& o) {
  return DynamicUnet(unet_encoder(body), {.n_out = n_out, .img_size = std::move(img_size), .blur = o.blur,
                                          .blur_final = o.blur_final, .self_attention = o.self_attention,
                                          .last_cross = o.last_cross, .bottle = o.bottle, .y_range = o.y_range});
}

}  // namespace

DynamicUnet create_unet_model(const Arch& arch, int64_t n_out, std::vector<int64_t> img_size,
                              const UnetLearnerOptions& o) {
  return unet_on(unet_body(arch, o), n_out, std::move(img_size), o);
}

ModelSpec unet_model_spec(const Arch& arch, int64_t n_out, const std::vector<int64_t>& img_size,
                          const UnetLearnerOptions& o) {
  ModelSpec spec;
  if (arch.name().empty()) return spec;
  spec["model"] = std::string("unet");
  spec["encoder"] = arch.name();
  spec["n_out"] = n_out;
  spec["img_size"] = c10::List<int64_t>(img_size);
  spec["in_channels"] = o.in_channels;
  spec["stem"] = std::string(o.stem == Stem::cifar ? "cifar" : "imagenet");
  spec["width"] = o.width;
  spec["blur"] = o.blur;
  spec["blur_final"] = o.blur_final;
  spec["self_attention"] = o.self_attention;
  spec["last_cross"] = o.last_cross;
  spec["bottle"] = o.bottle;
  spec["y_range"] = range_entry(o.y_range);
  return spec;
}

bool is_unet_spec(const ModelSpec& spec) {
  const auto it = spec.find("model");
  return it != spec.end() && it->second.isString() && it->second.toStringRef() == "unet";
}

DynamicUnet create_unet_model(const ModelSpec& spec, const std::string& source) {
  auto entry = [&](const std::string& key) { return spec_entry(spec, key); };
  try {
    UnetLearnerOptions o;
    const auto arch = Arch::named(entry("encoder").toStringRef());
    const int64_t n_out = entry("n_out").toInt();
    const auto img_size = int64s_of(entry("img_size"));
    o.in_channels = entry("in_channels").toInt();
    o.stem = entry("stem").toStringRef() == "cifar" ? Stem::cifar : Stem::imagenet;
    o.width = entry("width").toInt();
    o.blur = entry("blur").toBool();
    o.blur_final = entry("blur_final").toBool();
    o.self_attention = entry("self_attention").toBool();
    o.last_cross = entry("last_cross").toBool();
    o.bottle = entry("bottle").toBool();
    o.y_range = range_of(spec, "y_range");
    return create_unet_model(arch, n_out, img_size, o);
  } catch (const c10::Error& e) {
    throw Error(source + ": an entry of its architecture record has the wrong type (" +
                std::string(e.what_without_backtrace()).substr(0, 200) + ")");
  } catch (const Error& e) {
    throw Error(source + ": " + e.what());
  }
}

Learner unet_learner(DataLoaders dls, const Arch& arch, std::vector<MetricPtr> metrics, UnetLearnerOptions o,
                     LearnerOptions learner_options) {
  if (!arch) throw Error("unet_learner: no architecture given");
  const int64_t n_out = o.n_out > 0 ? o.n_out : static_cast<int64_t>(dls.num_classes());
  if (n_out < 1) throw Error("unet_learner: the data have no codes; give n_out");
  // The default loss reads each mask value as a class: one past n_out would be an index
  // out of range (a device assert on a GPU).
  if (!o.loss_func && n_out < static_cast<int64_t>(dls.num_classes()))
    throw Error("unet_learner: n_out is " + std::to_string(n_out) + " but the data have " +
                std::to_string(dls.num_classes()) + " codes; give n_out >= " + std::to_string(dls.num_classes()) +
                " (or leave it out), or a loss_func of your own");
  auto img_size = o.img_size;
  if (img_size.empty()) {
    if (dls.train.dataset().size() == 0) throw Error("unet_learner: the training set is empty; give img_size");
    const auto x = dls.train.dataset().get(0).x;
    if (x.dim() < 2) throw Error("unet_learner: expected images [C, H, W], got an item of shape " + c10::str(x.sizes()));
    img_size = {x.size(-2), x.size(-1)};
    // The batches' size, as fastai's (it reads one_batch): a batch augmentation's resize wins.
    for (const auto& augment : dls.train.options().aug_tfms)
      if (const auto* aug = dynamic_cast<const AugTransforms*>(augment.get()); aug && aug->options().size)
        img_size = {aug->options().size->first, aug->options().size->second};
  }
  const auto body = unet_body(arch, o);
  size_t cut = 0;  // where the second parameter group starts, counted in the body's layers
  for (const auto& layer : named_layers(*body.layers)) {
    if (layer.name == arch.second_group()) break;
    ++cut;
  }
  auto unet = unet_on(body, n_out, img_size, o);
  if (!learner_options.splitter) learner_options.splitter = unet_split(cut);
  learner_options.frozen = !o.pretrained_weights.empty();
  learner_options.model_spec = unet_model_spec(arch, n_out, img_size, o);
  if (o.normalize && arch.stats()) add_pretrained_normalize(dls, o.pretrained_weights, o.in_channels, *arch.stats());
  auto loss = o.loss_func ? o.loss_func : CrossEntropyLossFlat({.ignore_index = dls.void_index.value_or(-100)});
  return Learner(std::move(dls), unet, std::move(loss), std::move(metrics), std::move(learner_options));
}

}  // namespace fastcpp::vision
