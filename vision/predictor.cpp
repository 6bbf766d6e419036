#include "vision/predictor.h"

#include <torch/torch.h>

#include <algorithm>
#include <filesystem>

#include "core/device.h"
#include "core/error.h"
#include "core/spec_text.h"
#include "data/dataloader.h"
#include "formats/state_dict.h"
#include "vision/augment.h"
#include "vision/data_block.h"
#include "vision/datasets/detection_data.h"
#include "vision/datasets/image_folder.h"
#include "vision/detection/detection_learner.h"
#include "vision/image.h"
#include "vision/unet_learner.h"
#include "vision/vision_learner.h"

namespace fastcpp::vision {
namespace fs = std::filesystem;
namespace {

Model build_model(const ExportedModel& exported, const LoadLearnerOptions& options) {
  if (options.model) return *options.model;
  if (exported.spec.empty())
    throw Error("load_learner: " + exported.source +
                " records no architecture (its Learner trained a module of the program's own); "
                "give that model: load_learner(path, {.model = make_model()})");
  try {
    if (is_unet_spec(exported.spec)) return Model(create_unet_model(exported.spec, exported.source));
    if (is_detection_spec(exported.spec)) return create_detection_model(exported.spec, exported.source);
    return Model(create_vision_model(exported.spec, exported.source));
  } catch (const Error& e) {
    throw Error(std::string("load_learner: ") + e.what());
  }
}

// Runs `parse` on a text form from the file, naming the file if it is not one we know.
template <class Parse>
auto parse_spec(Parse parse, const std::string& spec, const std::string& source) {
  try {
    return parse(spec);
  } catch (const Error& e) {
    throw Error("load_learner: " + source + ": " + e.what());
  }
}

}  // namespace

Predictor::Predictor(ExportedModel exported, LoadLearnerOptions options)
    : exported_(std::move(exported)),
      model_(build_model(exported_, options)),
      device_(check_device(options.device.value_or(default_device()), "load_learner")),
      workers_(options.workers),
      postprocess_(options.detections) {
  if (!exported_.activation.empty() && exported_.activation != "softmax" && exported_.activation != "softmax_classes" &&
      exported_.activation != "sigmoid")
    throw Error("load_learner: " + exported_.source + " names an unknown activation '" + exported_.activation + "'");
  for (const auto& spec : exported_.aug_tfms)
    aug_tfms_.push_back(parse_spec(batch_augment_from_spec, spec, exported_.source));
  for (const auto& spec : exported_.batch_tfms)
    batch_tfms_.push_back(parse_spec(batch_transform_from_spec, spec, exported_.source));
  for (const auto& spec : exported_.item_tfms)
    item_tfms_.push_back(parse_spec(item_transform_from_spec, spec, exported_.source));
  const auto& shape = exported_.item_shape;
  if (item_tfms_.empty() && shape.size() == 3 && shape[1] == shape[2])
    item_tfms_.push_back(Resize(static_cast<int>(shape[1]), ResizeMethod::Squish));

  try {
    load_state_dict(model_.module(), exported_.state, exported_.source);
  } catch (const Error& e) {
    if (options.model) throw;
    // The record is the learner's at its making: a model swapped in since is not it.
    throw Error(std::string("load_learner: ") + e.what() + " (the model was built from the architecture the file " +
                "records; if the learner's model was changed after it was made, give that model: " +
                "load_learner(path, {.model = make_model()}))");
  }
  model_.module().to(device_);
  model_.module().eval();
}

torch::Tensor Predictor::forward(torch::Tensor batch) const {
  torch::NoGradGuard no_grad;
  auto out = model_(batch);
  if (exported_.activation == "softmax") out = torch::softmax(out.to(torch::kFloat), -1);
  if (exported_.activation == "softmax_classes") out = torch::softmax(out.to(torch::kFloat), 1);
  if (exported_.activation == "sigmoid") out = torch::sigmoid(out.to(torch::kFloat));
  return out.to(torch::kCPU);
}

std::string Predictor::label(int64_t index) const {
  const auto& vocab = exported_.vocab;
  return index >= 0 && index < static_cast<int64_t>(vocab.size()) ? vocab[static_cast<size_t>(index)] : std::to_string(index);
}

Prediction Predictor::decode(const torch::Tensor& probs, std::string path) const {
  if (is_detection_spec(exported_.spec)) {  // [anchors, 12 + logits]
    auto found = detections(probs.unsqueeze(0), postprocess_).front();
    const auto best = found.labels.numel() ? found.labels[0].item<int64_t>() : -1;
    return {std::move(path), best < 0 ? "" : label(best), best, probs, {}, std::move(found)};
  }
  if (probs.dim() >= 3)  // a class per pixel: [classes, H, W]
    return {std::move(path), "", 0, probs, probs.argmax(0)};
  // No activation and no classes: a regression model's values (MSELoss). A classifier whose
  // loss has no activation still names its argmax.
  if (exported_.activation.empty() && exported_.vocab.empty()) {
    const auto values = probs.flatten().to(torch::kDouble).contiguous();
    std::string text;
    for (int64_t k = 0; k < values.numel(); ++k) text.append(k ? " " : "").append(spec_text::number(values[k].item<double>()));
    return {std::move(path), text, -1, probs, {}};
  }
  const auto index = probs.flatten().argmax().item<int64_t>();
  if (exported_.activation == "sigmoid") {  // several classes an item: every one above 0.5
    std::string labels;
    const auto above = (probs.flatten() > 0.5).nonzero().flatten();
    for (int64_t k = 0; k < above.size(0); ++k) labels.append(k ? " " : "").append(label(above[k].item<int64_t>()));
    return {std::move(path), labels, index, probs, {}};
  }
  return {std::move(path), label(index), index, probs, {}};
}

Prediction Predictor::predict(const torch::Tensor& item) const {
  const auto& shape = exported_.item_shape;
  if (item.dim() != static_cast<int64_t>(shape.size()) || (item.dim() > 0 && item.size(0) != shape[0]) ||
      item.scalar_type() != exported_.item_dtype)
    throw Error("Predictor::predict: " + exported_.source + " takes items like " +
                c10::str(c10::IntArrayRef(shape)) + " of " + c10::toString(exported_.item_dtype) + ", got " +
                c10::str(item.sizes()) + " of " + c10::toString(item.scalar_type()));
  Batch batch{item.unsqueeze(0).to(device_), torch::Tensor()};
  for (const auto& augment : aug_tfms_) batch = augment->apply(std::move(batch), 0);  // resizes: no draws
  for (const auto& tfm : batch_tfms_) batch.x = tfm(batch.x);
  auto prediction = decode(forward(batch.x)[0], "");
  if (prediction.detections.boxes.defined())
    prediction.detections.boxes = boxes_to_item(prediction.detections.boxes, item.size(-2), item.size(-1));
  return prediction;
}

ImageFolder Predictor::files(const std::vector<std::string>& image_paths) const {
  const auto& shape = exported_.item_shape;
  if (shape.size() != 3 || exported_.item_dtype != torch::kByte)
    throw Error("Predictor: the items of " + exported_.source + " are not 8-bit images (shape " + c10::str(c10::IntArrayRef(shape)) +
                ", " + c10::toString(exported_.item_dtype) + "): predict a tensor instead of a file");
  // Masks and boxes were read with their images decoded whole (segmentation_data.h, detection_data.h).
  const auto model = exported_.spec.find("model");
  const bool whole = model != exported_.spec.end() && model->second.isString() &&
                     (model->second.toStringRef() == "unet" || is_detection_spec(exported_.spec));
  return ImageFolder(image_paths, std::vector<int64_t>(image_paths.size(), 0), exported_.vocab,
                     {.channels = static_cast<int>(shape[0]), .item_tfms = item_tfms_, .train = false,
                      .reduced_decode = !whole});
}

torch::Tensor Predictor::item(const std::string& image_path) const { return files({image_path}).get(0).x; }

torch::Tensor Predictor::boxes_to_item(torch::Tensor boxes, int64_t height, int64_t width) const {
  return boxes_before_resizes(aug_tfms_, std::move(boxes), height, width);
}

void Predictor::boxes_to_file(Prediction& prediction) const {
  auto size = image_header_size(read_image_bytes(prediction.path));
  if (size.area() == 0) size = read_image(prediction.path).size();  // a format without a header we read
  // files() checked the items' shape: [channels, height, width].
  const auto boxes = boxes_to_item(prediction.detections.boxes, exported_.item_shape[1], exported_.item_shape[2]);
  prediction.detections.boxes = boxes_to_image(item_tfms_, boxes, size);
}

Prediction Predictor::predict(const std::string& image_path) const { return predict(std::vector{image_path}, 1)[0]; }

void Predictor::predict(const std::vector<std::string>& image_paths, int64_t bs,
                        const std::function<void(Prediction)>& use) const {
  if (bs < 1) throw Error("Predictor::predict: bs must be positive, got " + std::to_string(bs));
  if (image_paths.empty()) return;
  DataLoader loader(std::make_shared<ImageFolder>(files(image_paths)),
                    {.bs = bs, .workers = workers_, .batch_tfms = batch_tfms_, .aug_tfms = aug_tfms_});
  loader.to(device_);
  size_t done = 0;
  for (const auto& batch : loader) {
    const auto probs = forward(batch.x);
    for (int64_t i = 0; i < probs.size(0); ++i) {
      auto prediction = decode(probs[i], image_paths[done++]);
      if (prediction.detections.boxes.defined()) boxes_to_file(prediction);
      use(std::move(prediction));
    }
  }
}

std::vector<Prediction> Predictor::predict(const std::vector<std::string>& image_paths, int64_t bs) const {
  std::vector<Prediction> out;
  predict(image_paths, bs, [&](Prediction prediction) { out.push_back(std::move(prediction)); });
  return out;
}

void Predictor::predict_folder(const std::string& dir, int64_t bs, const std::function<void(Prediction)>& use) const {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw Error("Predictor::predict_folder: '" + dir + "' not found or not a directory");
  const auto paths = get_image_files(dir);  // hidden files and folders left out, as fastai's get_files
  if (paths.empty()) throw Error("Predictor::predict_folder: no image files under '" + dir + "'");
  predict(paths, bs, use);
}

std::vector<Prediction> Predictor::predict_folder(const std::string& dir, int64_t bs) const {
  std::vector<Prediction> out;
  predict_folder(dir, bs, [&](Prediction prediction) { out.push_back(std::move(prediction)); });
  return out;
}

Predictor load_learner(const std::string& path, LoadLearnerOptions options) {
  return Predictor(read_exported(path), std::move(options));
}

}  // namespace fastcpp::vision
