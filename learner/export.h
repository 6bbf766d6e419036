#pragma once
// Exported models: what inference needs of a trained Learner, in one file and without
// the training data (fastai's learn.export): the model's architecture and options
// (when they are known: vision_learner records them), its weights, the class names,
// the shape of an item, the activation of the loss, and the transforms that turn an
// input into an item: the validation set's item transforms and the valid loader's
// batch augmentation (a resize, at most) and batch transforms, in their text forms.
//
//   learn.export_learner("export.pt");                 // written atomically, by rank 0
//   auto predictor = vision::load_learner("export.pt"); // vision/predictor.h
//
// The file is a torch.save archive (Python: torch.load(path, weights_only=False) gives
// a dict), so it can be inspected anywhere.
#include <ATen/core/Dict.h>
#include <ATen/core/ivalue.h>

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace fastcpp {

// The architecture of a model and the options it was built with ({"arch": "resnet34",
// "n_out": 10, ...}), so that the model can be built again. Empty: unknown (the
// program's own module), and the model must be given when loading.
using ModelSpec = std::map<std::string, c10::IValue>;

// The entry `key` of an architecture record; throws fastcpp::Error naming it if absent.
c10::IValue spec_entry(const ModelSpec& spec, const std::string& key);

// An optional (low, high) range as a record's entry, a list of two numbers or none, and
// back from the record's entry `key`.
c10::IValue range_entry(const std::optional<std::pair<double, double>>& range);
std::optional<std::pair<double, double>> range_of(const ModelSpec& spec, const std::string& key);

struct ExportedModel {
  std::string source;                  // "exported model 'PATH'", for messages
  ModelSpec spec;
  c10::impl::GenericDict state{c10::StringType::get(), c10::TensorType::get()};  // parameters and buffers by name
  std::vector<std::string> vocab;
  std::vector<int64_t> item_shape;     // one item as the validation set gives it, e.g. {3, 224, 224}
  c10::ScalarType item_dtype = c10::ScalarType::Byte;
  std::vector<std::string> item_tfms;  // text forms (vision::item_transform_from_spec)
  std::vector<std::string> aug_tfms;   // text forms (vision::batch_augment_from_spec); older files: none
  std::vector<std::string> batch_tfms; // text forms (batch_transform_from_spec)
  std::string activation;              // the loss's: "softmax" (last axis), "softmax_classes" (axis 1), or empty
};

// Throws fastcpp::Error naming the file when it is missing, cut short, or not an
// exported model.
ExportedModel read_exported(const std::string& path);

}  // namespace fastcpp
