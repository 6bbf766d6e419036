#pragma once
// What a single-shot detector (RetinaNet, SSD) returns for a batch, as one tensor, so
// that it goes through the Learner, to_parallel and to_distributed as a classifier's
// output does: [images, anchors, 12 + logits], each anchor's row
//
//   scoring | level | image height, width | anchor x1 y1 x2 y2 | box codes (4) | class logits
//
// The scoring (how logits become scores), the level (which feature map the anchor is on),
// the image's size and the anchor make the loss and the decoding functions of the output
// alone (the Learner's loss and metrics see the output and the targets, nothing else);
// they cost 8 floats an anchor.
//
// Targets are [images, most boxes, 5]: x1 y1 x2 y2 label per box, rows of label -1
// filling the images with fewer boxes (box_targets makes them).
#include <torch/types.h>

#include <optional>
#include <utility>
#include <vector>

namespace fastcpp::vision {

// How a detector's logits become class scores.
enum class Scoring {
  sigmoid,  // one sigmoid a class (RetinaNet): K logits for K classes
  softmax,  // a softmax over background and the classes (SSD): logit 0 is the background's
};

struct DetectorOutput {
  static constexpr int64_t kPrefix = 12;  // columns before the class logits

  // Checks the layout (a fastcpp::Error names `who` otherwise).
  DetectorOutput(torch::Tensor output, const char* who);
  // Packs head outputs: codes [N, A, 4], logits [N, A, L], with AnchorColumns' [A, 8].
  static torch::Tensor pack(const torch::Tensor& codes, const torch::Tensor& logits, const torch::Tensor& anchor_columns);

  Scoring scoring() const;
  torch::Tensor levels() const { return output.select(2, 1); }    // [N, A]
  torch::Tensor anchors() const { return output.narrow(2, 4, 4); }  // [N, A, 4]
  torch::Tensor codes() const { return output.narrow(2, 8, 4); }    // [N, A, 4]
  // [N, A, L]: the background's first with softmax scoring.
  torch::Tensor logits() const { return output.narrow(2, kPrefix, output.size(2) - kPrefix); }
  // Object classes (the background not counted).
  int64_t num_classes() const;
  int64_t image_height() const;
  int64_t image_width() const;

  torch::Tensor output;
};

// The first 8 columns of a detector's output, [A, 8]: the same for every batch of one
// image size, so they are made again only when the maps' sizes, the image's size or the
// device change.
class AnchorColumns {
 public:
  explicit AnchorColumns(Scoring scoring) : scoring_(scoring) {}

  // `generator`: the detector's AnchorGenerator or DefaultBoxGenerator; `input`: the batch
  // the maps were made of, the anchors laid out over it; `image_size`: the images' own
  // (height, width), what boxes are clipped to, when the input was padded beyond it.
  template <class Generator>
  const torch::Tensor& of(const Generator& generator, const std::vector<torch::Tensor>& maps,
                          const torch::Tensor& input, std::optional<std::pair<int64_t, int64_t>> image_size = {}) {
    std::vector<std::pair<int64_t, int64_t>> feature_sizes;
    std::vector<int64_t> per_cell;
    for (size_t k = 0; k < maps.size(); ++k) {
      feature_sizes.emplace_back(maps[k].size(2), maps[k].size(3));
      per_cell.push_back(generator.anchors_per_cell(k));
    }
    const std::pair<int64_t, int64_t> input_size{input.size(2), input.size(3)};
    const auto images = image_size.value_or(input_size);
    if (!columns_.defined() || feature_sizes != feature_sizes_ || input_size != input_size_ || images != image_size_ ||
        columns_.device() != input.device())
      remake(generator.grid_anchors(feature_sizes, input_size), per_cell, feature_sizes, images, input.device());
    input_size_ = input_size;
    return columns_;
  }
  void clear() { columns_ = torch::Tensor(); }

 private:
  void remake(const torch::Tensor& anchors, const std::vector<int64_t>& per_cell,
              const std::vector<std::pair<int64_t, int64_t>>& feature_sizes, std::pair<int64_t, int64_t> image_size,
              torch::Device device);

  Scoring scoring_;
  std::vector<std::pair<int64_t, int64_t>> feature_sizes_;
  std::pair<int64_t, int64_t> image_size_{0, 0}, input_size_{0, 0};
  torch::Tensor columns_;
};

// Throws a fastcpp::Error naming `who` unless targets are [images, boxes, 5] whose boxes
// (the rows with a label >= 0) have finite corners, x2 > x1 and y2 > y1, overlap the image,
// and a whole label below `output`'s classes (crowd regions' too): the one check where a box
// without area or off the image would otherwise match every anchor (and give an infinite
// loss), and a label too large assert on a GPU.
void check_box_targets(const torch::Tensor& targets, const DetectorOutput& output, const char* who);

// One image's ground truth: boxes [n, 4] (x1 y1 x2 y2) and labels [n] (int64), and its crowd
// regions (COCO's iscrowd: one box around many objects of a class, [c, 4] and [c];
// undefined: none). Nothing trains on a crowd region; the COCO evaluation counts a detection
// inside one as neither right nor wrong.
struct ImageBoxes {
  torch::Tensor boxes, labels;
  torch::Tensor crowd_boxes = {}, crowd_labels = {};
};
// In targets a row's label is its class, -1 for padding, or crowd_label(class) for a crowd region.
constexpr int64_t crowd_label(int64_t k) { return -2 - k; }
// Image i's ground truth out of targets [N, M, 5]: with `crowds` its crowd regions too
// (always defined); without (the losses), one selection fewer: a device sync on a GPU.
ImageBoxes image_boxes(const torch::Tensor& targets, int64_t i, bool crowds = true);
// Targets [N, most rows, 5] from each image's boxes and crowd regions, padded with label -1.
torch::Tensor box_targets(const std::vector<ImageBoxes>& images);

}  // namespace fastcpp::vision
