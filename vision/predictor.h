#pragma once
// Predictor: inference with an exported model (Learner::export_learner) and no training
// data, as fastai's load_learner + predict:
//
//   auto predictor = vision::load_learner("export.pt");
//   auto p = predictor.predict("cat.jpg");             // p.label, p.index, p.probs
//   for (const auto& q : predictor.predict_folder("photos")) ...
//   predictor.predict_folder("photos", 64, [](vision::Prediction q) { ... });  // none kept
//
// An image file becomes an item as the validation set's did: decoded with the items'
// channel count, through the item transforms in their validation form (a centre crop
// for RandomResizedCrop, no flip), or, without item transforms, squished to the
// items' size; then the valid loader's batch transforms run on the
// predictor's device. Files are decoded on loader workers, a batch at a time.
//
// A segmentation model (unet_learner's) gives a class mask per image (Prediction::mask;
// write_mask_png draws it); a detector (detection_learner's, ssd_learner's) its boxes,
// scores and labels (Prediction::detections), in the image file's pixels.
//
// The model is built again from the recorded architecture (vision_learner's,
// unet_learner's and the detection learners' models);
// a model of the program's own is given to load_learner, which loads the weights into
// it by name (a mismatch lists every missing, unexpected and mis-shaped key).
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "data/batch_augment.h"
#include "data/batch_transforms.h"
#include "learner/export.h"
#include "learner/model.h"
#include "vision/detection/postprocess.h"
#include "vision/transforms.h"

namespace fastcpp::vision {

class ImageFolder;

struct Prediction {
  std::string path;     // the image file (empty for a tensor)
  std::string label;    // the class name (its index as text when there is no vocab); empty for a mask;
                        // a multi-label model's: every class above 0.5, separated by spaces; a
                        // regression model's (no activation, no vocab): its values, separated by spaces
  int64_t index = 0;    // the most probable class (a detector's: its best detection's, -1 for none;
                        // -1 for a regression model's)
  torch::Tensor probs;  // the activated output, on the CPU ([classes, H, W] for a segmentation model)
  torch::Tensor mask;   // a segmentation model's: the most probable class of each pixel, int64 [H, W]
  // A detector's (probs: its output for the image): boxes x1 y1 x2 y2 in the image file's
  // pixels (an item's for a tensor), scores, labels (class indices, `label` names them).
  Detections detections;
};

struct LoadLearnerOptions {
  std::optional<torch::Device> device;  // default: CUDA when a GPU is there, else the CPU
  std::optional<Model> model;           // for an export without an architecture: the model to load into
  int workers = 0;                      // threads decoding a batch of files (0: the caller's)
  PostprocessOptions detections{};      // a detector's post-processing (empty fields: the detector's own)
};

class Predictor {
 public:
  Predictor(ExportedModel exported, LoadLearnerOptions options = {});

  Prediction predict(const std::string& image_path) const;
  // An item as the dataset gave it (e.g. uint8 CHW); the batch transforms are applied.
  Prediction predict(const torch::Tensor& item) const;
  // Batches of `bs` files, in the order given.
  std::vector<Prediction> predict(const std::vector<std::string>& image_paths, int64_t bs = 64) const;
  // The image files under `dir` (recursively), sorted by path.
  std::vector<Prediction> predict_folder(const std::string& dir, int64_t bs = 64) const;
  // The same two, each prediction handed to `use` once its batch is done, in order, and
  // none kept: for many images of a segmentation model, whose probabilities are
  // [classes, H, W] floats an image.
  void predict(const std::vector<std::string>& image_paths, int64_t bs,
               const std::function<void(Prediction)>& use) const;
  void predict_folder(const std::string& dir, int64_t bs, const std::function<void(Prediction)>& use) const;

  // The item an image file becomes (before the batch transforms).
  torch::Tensor item(const std::string& image_path) const;
  const std::vector<std::string>& vocab() const { return exported_.vocab; }
  // The class name of an output index (the index as text beyond the vocab).
  std::string label(int64_t index) const;
  const Model& model() const { return model_; }
  torch::Device device() const { return device_; }

 private:
  // The files as a dataset of items made as the validation set's were.
  ImageFolder files(const std::vector<std::string>& image_paths) const;
  Prediction decode(const torch::Tensor& probs, std::string path) const;
  torch::Tensor forward(torch::Tensor batch) const;
  // A detector's boxes from the batch's pixels to those of an item of that size (through
  // the batch resizes), and to the image file's.
  torch::Tensor boxes_to_item(torch::Tensor boxes, int64_t height, int64_t width) const;
  void boxes_to_file(Prediction& prediction) const;

  ExportedModel exported_;
  Model model_;
  torch::Device device_;
  std::vector<BatchAugmentPtr> aug_tfms_;  // validation forms: a resize at most
  std::vector<BatchTransform> batch_tfms_;
  std::vector<ItemTransform> item_tfms_;
  int workers_ = 0;
  PostprocessOptions postprocess_;
};

// Reads an exported model; errors name the file.
Predictor load_learner(const std::string& path, LoadLearnerOptions options = {});

}  // namespace fastcpp::vision
