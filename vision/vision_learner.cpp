#include "vision/vision_learner.h"

#include <torch/nn/init.h>

#include "core/error.h"
#include "core/sequential.h"
#include "formats/torch_file.h"
#include "optim/param_groups.h"

namespace fastcpp::vision {
namespace {

void append(torch::nn::Sequential& to, const torch::nn::Sequential& from, const std::string& prefix = "") {
  for (auto& layer : named_layers(*from)) to->push_back(prefix + layer.name, layer.any);
}

// fastai's apply_init(head, kaiming_normal_): every layer with a weight of two or more
// dimensions, norm layers left out, gets He-normal weights and a zero bias.
void init_custom_head(torch::nn::Module& head) {
  torch::NoGradGuard no_grad;
  for (const auto& module : head.modules(/*include_self=*/false)) {
    if (is_norm_layer(*module)) continue;
    const auto params = module->named_parameters(/*recurse=*/false);
    const auto* weight = params.find("weight");
    if (!weight || weight->dim() < 2 || !weight->requires_grad()) continue;
    torch::nn::init::kaiming_normal_(*weight);
    if (const auto* bias = params.find("bias")) bias->zero_();
  }
}

}  // namespace

torch::nn::Sequential create_vision_model(const Arch& arch, int64_t n_out, const VisionLearnerOptions& o) {
  if (!arch) throw Error("vision_learner: no architecture given");
  const auto body = pretrained_body(arch, {.in_channels = o.in_channels, .stem = o.stem, .width = o.width},
                                    o.pretrained_weights);
  torch::nn::Sequential model;
  append(model, body.layers);
  if (o.custom_head) {
    auto head = *o.custom_head;  // a holder: the program's own module
    init_custom_head(*head);
    append(model, head, "head_");  // the splitter's last group
  } else {
    append(model, create_head(body.num_features, n_out, o.head()));
  }
  return model;
}

ModelSpec vision_model_spec(const Arch& arch, int64_t n_out, const VisionLearnerOptions& o) {
  ModelSpec spec;
  if (arch.name().empty() || o.custom_head) return spec;
  spec["arch"] = arch.name();
  spec["n_out"] = n_out;
  spec["in_channels"] = o.in_channels;
  spec["stem"] = std::string(o.stem == Stem::cifar ? "cifar" : "imagenet");
  spec["width"] = o.width;
  spec["lin_ftrs"] = c10::List<int64_t>(o.lin_ftrs);
  spec["ps"] = o.ps;
  spec["concat_pool"] = o.concat_pool;
  spec["bn_final"] = o.bn_final;
  spec["pool"] = o.pool;
  spec["first_bn"] = o.first_bn;
  spec["lin_first"] = o.lin_first;
  spec["y_range"] = range_entry(o.y_range);
  return spec;
}

torch::nn::Sequential create_vision_model(const ModelSpec& spec, const std::string& source) {
  auto entry = [&](const std::string& key) { return spec_entry(spec, key); };
  Arch arch;
  VisionLearnerOptions o;
  int64_t n_out = 0;
  try {
    arch = Arch::named(entry("arch").toStringRef());
    n_out = entry("n_out").toInt();
    o.in_channels = entry("in_channels").toInt();
    o.stem = entry("stem").toStringRef() == "cifar" ? Stem::cifar : Stem::imagenet;
    o.width = entry("width").toInt();
    o.lin_ftrs = int64s_of(entry("lin_ftrs"));
    o.ps = entry("ps").toDouble();
    o.concat_pool = entry("concat_pool").toBool();
    o.bn_final = entry("bn_final").toBool();
    if (spec.count("y_range")) o.y_range = range_of(spec, "y_range");  // none in exports made before it
    if (spec.count("pool")) {  // nor these three
      o.pool = entry("pool").toBool();
      o.first_bn = entry("first_bn").toBool();
      o.lin_first = entry("lin_first").toBool();
    }
  } catch (const c10::Error& e) {
    throw Error(source + ": an entry of its architecture record has the wrong type (" +
                std::string(e.what_without_backtrace()).substr(0, 200) + ")");
  } catch (const Error& e) {
    throw Error(source + ": " + e.what());
  }
  return create_vision_model(arch, n_out, o);
}

Learner vision_learner(DataLoaders dls, const Arch& arch, std::vector<MetricPtr> metrics, VisionLearnerOptions o,
                       LearnerOptions learner_options) {
  const int64_t n_out = o.n_out > 0 ? o.n_out : static_cast<int64_t>(dls.num_classes());
  if (n_out < 1 && !o.custom_head) throw Error("vision_learner: the data have no vocab; give n_out");
  auto model = create_vision_model(arch, n_out, o);
  if (!learner_options.splitter) learner_options.splitter = arch.split();  // fastai: ifnone(splitter, meta['split'])
  learner_options.frozen = !o.pretrained_weights.empty();
  learner_options.model_spec = vision_model_spec(arch, n_out, o);
  if (o.normalize && arch.stats()) add_pretrained_normalize(dls, o.pretrained_weights, o.in_channels, *arch.stats());
  auto loss = o.loss_func ? o.loss_func : dls.multi_label ? BCEWithLogitsLoss() : CrossEntropyLoss();
  return Learner(std::move(dls), model, std::move(loss), std::move(metrics), std::move(learner_options));
}

}  // namespace fastcpp::vision
