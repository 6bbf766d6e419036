#pragma once
// fastai's show_batch and show_results, as PNG files (the project's own PNG writer: with
// or without OpenCV):
//
//   vision::show_batch(dls, "show_batch.png");        // before training: what the model sees
//   learn.fit_one_cycle(5, 1e-2);
//   vision::show_results(learn, "show_results.png");  // after: target / prediction
//
// Images are decoded back from the batch transforms (Normalize, IntToFloat) and the memory
// layout; grey images are shown grey. A classification batch gets each image's label (a
// multi-label one its classes joined by ';'; for results "target/prediction", red where
// they differ); a segmentation batch gets each
// image beside its mask (for results: image, target mask, predicted mask), a colour per class;
// a detection batch gets each image's boxes in its class's colour with the class name (for
// results: the true boxes, then the detections scoring min_score or more, with their score
// in percent; RetinaNet's decoding).
#include <optional>
#include <string>

#include "data/batch_transforms.h"
#include "data/dataloader.h"

namespace fastcpp {
class Learner;
}

namespace fastcpp::vision {

struct ShowOptions {
  int max_n = 9;   // images shown (at most a batch)
  int ncols = 3;   // images per row (segmentation: rows of one image)
  int min_side = 96;  // images are enlarged by a whole factor to at least this many pixels
  std::optional<int64_t> void_index;  // masks: drawn white; default: the data's (DataLoaders::void_index)
  double min_score = 0.5;             // detections: the boxes shown by show_results
};

// A batch of images back as uint8 [N, H, W, 3] RGB: the batch transforms undone in
// reverse order (Normalize: x * std + mean; IntToFloat: x * 255), any memory layout;
// three channels or more show their first three; fewer, their first as grey RGB.
torch::Tensor decode_images(torch::Tensor x, const std::vector<BatchTransform>& batch_tfms);

// The first batch of the training loader, with the labels named by dls.vocab.
void show_batch(const DataLoaders& dls, const std::string& path, ShowOptions options = {});
// The first batch of the validation loader with the model's predictions.
void show_results(Learner& learn, const std::string& path, ShowOptions options = {});

// The captions show_results writes over its images, "target/prediction", and which of them
// are wrong. Class indices are named by `vocab`; multi-label targets ([N, classes] of 0/1)
// show the classes set joined by ';', predicted where the output's logit is above 0 (its
// sigmoid above 0.5); float targets of a single-label loader (regression) show their
// values and the outputs', two decimals each (the first six, then "..."), never marked
// wrong. show_results captions image-like targets ([N, C, H, W]) with nothing.
struct ResultCaptions {
  std::vector<std::string> text;
  std::vector<bool> wrong;
};
ResultCaptions result_captions(const torch::Tensor& targets, const torch::Tensor& outputs,
                               const std::vector<std::string>& vocab, bool multi_label);

// Rows of an image (uint8 [N, H, W, 3], as decode_images gives) beside its masks ([N, H,
// W] class indices each, a colour per class), a title above each column, and above each
// row its caption where `captions` has one.
void write_mask_rows(const std::string& path, const torch::Tensor& images, const std::vector<torch::Tensor>& masks,
                     const std::vector<std::string>& titles, const std::vector<std::string>& captions,
                     const ShowOptions& options);

}  // namespace fastcpp::vision
