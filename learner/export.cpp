#include "learner/export.h"

#include <torch/serialize.h>
#include <torch/torch.h>

#include "core/error.h"
#include "formats/file_io.h"
#include "learner/checkpoint.h"
#include "learner/learner.h"
#include "optim/optimizer.h"
#include "formats/state_dict.h"
#include "formats/torch_file.h"
#include "formats/torch_save.h"

namespace fastcpp {

c10::IValue spec_entry(const ModelSpec& spec, const std::string& key) {
  auto it = spec.find(key);
  if (it == spec.end()) throw Error("its architecture record has no '" + key + "'");
  return it->second;
}

c10::IValue range_entry(const std::optional<std::pair<double, double>>& range) {
  return range ? c10::List<double>({range->first, range->second}) : c10::List<double>();
}

std::optional<std::pair<double, double>> range_of(const ModelSpec& spec, const std::string& key) {
  std::vector<double> values;  // an empty list reads back untyped
  for (const auto& value : spec_entry(spec, key).toListRef()) values.push_back(value.toDouble());
  if (values.empty()) return std::nullopt;
  if (values.size() != 2)
    throw Error("its '" + key + "' holds " + std::to_string(values.size()) + " numbers instead of a range's 2");
  return std::make_pair(values[0], values[1]);
}

namespace {

constexpr const char* kFormat = "fastcpp.export.v1";

c10::List<std::string> to_list(const std::vector<std::string>& items) {
  c10::List<std::string> list;
  for (const auto& item : items) list.push_back(item);
  return list;
}

// The first item of the valid set (of the train set when the valid set is empty):
// its shape and dtype are what the model takes.
Example first_item(const DataLoaders& dls) {
  for (const DataLoader* dl : {&dls.valid, &dls.train})
    if (dl->dataset().size() > 0) return dl->dataset().get(0);
  throw Error("export_learner: the Learner's datasets are empty; an exported model records the shape of an item");
}

std::vector<std::string> batch_transform_specs(const DataLoader& valid) {
  std::vector<std::string> specs;
  const auto& tfms = valid.options().batch_tfms;
  for (size_t i = 0; i < tfms.size(); ++i) {
    auto spec = batch_transform_spec(tfms[i]);
    if (spec.empty())
      throw Error("export_learner: batch transform " + std::to_string(i) +
                  " of the valid loader is a function an exported model cannot carry; use Normalize or IntToFloat");
    specs.push_back(std::move(spec));
  }
  return specs;
}

// The valid loader's batch augmentation: the validation forms of aug_transforms (a resize).
std::vector<std::string> batch_augment_specs(const DataLoader& valid) {
  std::vector<std::string> specs;
  const auto& augments = valid.options().aug_tfms;
  for (size_t i = 0; i < augments.size(); ++i) {
    specs.push_back(augments[i]->spec());
    if (specs.back().empty())
      throw Error("export_learner: batch augmentation " + std::to_string(i) +
                  " of the valid loader has no text form (BatchAugment::spec), so an exported model cannot carry it");
  }
  return specs;
}

c10::IValue contents(const Learner& learn, const ModelSpec& spec) {
  if (learn.loss_func.has_activation() && learn.loss_func.activation_name().empty())
    throw Error("export_learner: the loss's activation is an unnamed function; an exported model can carry "
                "softmax (CrossEntropyLoss's) or none");
  const auto item = first_item(learn.dls).x;
  c10::Dict<std::string, torch::Tensor> state;
  for (const auto& [name, tensor] : named_state(learn.model.module())) state.insert(name, tensor.detach().to(torch::kCPU));
  auto root = string_dict();
  root.insert("format", std::string(kFormat));
  auto arch = string_dict();
  for (const auto& [key, value] : spec) arch.insert(key, value);
  root.insert("arch", arch);
  root.insert("model", state);
  root.insert("vocab", to_list(learn.dls.vocab));
  root.insert("item_shape", c10::List<int64_t>(item.sizes()));
  root.insert("item_dtype", std::string(c10::toString(item.scalar_type())));
  root.insert("item_tfms", to_list(learn.dls.valid.dataset().item_transform_specs()));
  root.insert("aug_tfms", to_list(batch_augment_specs(learn.dls.valid)));
  root.insert("batch_tfms", to_list(batch_transform_specs(learn.dls.valid)));
  root.insert("activation", learn.loss_func.activation_name());
  return root;
}

c10::ScalarType dtype_named(const std::string& name, const std::string& source) {
  for (auto type : {c10::kByte, c10::kChar, c10::kShort, c10::kInt, c10::kLong, c10::kHalf, c10::kBFloat16, c10::kFloat,
                    c10::kDouble, c10::kBool})
    if (name == c10::toString(type)) return type;
  throw Error("cannot read " + source + ": unknown item dtype '" + name + "'");
}

std::vector<std::string> strings(const c10::IValue& value) {
  std::vector<std::string> out;
  for (const auto& item : value.toListRef()) out.push_back(item.toStringRef());
  return out;
}

}  // namespace

void Learner::export_learner(const std::string& path) const {
  write_on_rank_0([&] { save_torch_file(path, contents(*this, options_.model_spec), "exported model"); });
}

ExportedModel read_exported(const std::string& path) {
  ExportedModel exported;
  exported.source = "exported model '" + path + "'";
  const auto& source = exported.source;
  const auto bytes = read_file(path, "exported model");
  const auto value = unpickle(bytes, source, "an exported model");
  const auto not_exported = "cannot read " + source + ": not an exported model (written by Learner::export_learner)";
  if (!value.isGenericDict()) throw Error(not_exported);
  const auto root = value.toGenericDict();
  auto field = [&](const char* key) {
    auto it = root.find(c10::IValue(std::string(key)));
    if (it == root.end()) throw Error(not_exported + "; it has no '" + key + "'");
    return it->value();
  };
  const auto format = field("format");
  if (!format.isString() || format.toStringRef() != kFormat)
    throw Error(not_exported + "; its format is not '" + kFormat + "'");
  try {
    for (const auto& entry : field("arch").toGenericDict()) exported.spec[entry.key().toStringRef()] = entry.value();
    exported.state = field("model").toGenericDict();
    exported.vocab = strings(field("vocab"));
    exported.item_shape = int64s_of(field("item_shape"));
    exported.item_dtype = dtype_named(field("item_dtype").toStringRef(), source);
    exported.item_tfms = strings(field("item_tfms"));
    if (root.contains(c10::IValue(std::string("aug_tfms")))) exported.aug_tfms = strings(field("aug_tfms"));
    exported.batch_tfms = strings(field("batch_tfms"));
    exported.activation = field("activation").toStringRef();
  } catch (const c10::Error& e) {
    throw Error(not_exported + "; an entry has the wrong type (" +
                std::string(e.what_without_backtrace()).substr(0, 200) + ")");
  }
  return exported;
}

}  // namespace fastcpp
