#pragma once
// Object-detection data: images with boxes and their classes. The item transforms move
// each image's boxes with it (the same draws: flips, crops, resizes, padding), clip them to
// the result and drop those left without area. On the loader's workers, so batches are
// bitwise the same with any number of them.
//
// Items: the image as uint8 CHW and its boxes as [n, 5] (x1 y1 x2 y2 label, pixels), crowd
// regions after them; batches pad the box lists to the most rows an image has with rows of
// label -1: the targets of the detectors (vision/detection/detector_output.h).
//
//   auto dls = vision::DetectionDataLoaders::from_coco("annotations.json", "images/",
//                                                     {.bs = 8, .item_tfms = {vision::Resize(320, vision::ResizeMethod::Squish)}});
//   auto files = vision::DetectionDataLoaders::from_box_files("images/", "boxes/", {.bs = 8});
//
// A box file (from_box_files) is the image's name with .txt, one box a line:
// "class x1 y1 x2 y2" in pixels; classes are every name the files use, sorted.
#include <torch/types.h>

#include <string>
#include <vector>

#include "data/batch_transforms.h"
#include "data/dataloader.h"
#include "data/dataset.h"
#include "data/splitters.h"
#include "vision/transforms.h"

namespace fastcpp::vision {

struct BoxedImage {
  std::string image;
  torch::Tensor boxes;   // [n, 4] float, x1 y1 x2 y2 in the image's pixels
  torch::Tensor labels;  // [n] int64, class indices
  // Regions of many objects of a class (COCO's iscrowd), [c, 4] and [c]; undefined: none.
  // Moved with the image, they reach the targets as rows of label crowd_label(class): the
  // losses leave them out, the COCO evaluation ignores detections inside them.
  torch::Tensor crowd_boxes = {}, crowd_labels = {};
};

// Boxes [n, 4] moved by `tfms` from an image of `size`, drawing what the transforms draw on
// the image (a copy of its Rng), each step's result clipped to its output.
struct MovedBoxes {
  torch::Tensor boxes;  // [m, 4]: the boxes left with area
  torch::Tensor kept;   // [m] int64: their indices in the input
  cv::Size size;        // of the transformed image
};
MovedBoxes transform_boxes(const std::vector<ItemTransform>& tfms, const torch::Tensor& boxes, cv::Size size, Rng rng,
                           bool train);
// The way back for detections: boxes [n, 4] in the pixels of an item that the validation
// form of `tfms` made from an image of `size`, in that image's pixels (clipped to it).
torch::Tensor boxes_to_image(const std::vector<ItemTransform>& tfms, const torch::Tensor& boxes, cv::Size size);


struct DetectionDataOptions {
  int channels = 3;
  std::vector<ItemTransform> item_tfms;
  bool train = true;  // random transforms act; false: their deterministic version
};

class DetectionDataset : public Dataset {
 public:
  // Refuses a label outside the classes and a box without area (x2 <= x1 or y2 <= y1: often
  // x y w h given for corners) or with a corner that is not finite, naming the image (crowd
  // regions' too).
  DetectionDataset(std::vector<BoxedImage> images, std::vector<std::string> classes, DetectionDataOptions options = {});
  using Dataset::get;
  size_t size() const override { return images_.size(); }
  Example get(size_t index) const override;
  Example get(size_t index, Rng& rng) const override;
  // Images stacked; box lists padded with rows of label -1 to the longest.
  Batch collate_items(const std::vector<Example>& examples) const override;
  DatasetPtr augmented() const override;
  std::vector<std::string> item_transform_specs() const override;

  const std::vector<std::string>& classes() const { return classes_; }
  const std::vector<BoxedImage>& images() const { return images_; }
  DetectionDataset with_options(DetectionDataOptions options) const;
  DetectionDataset subset(const std::vector<int64_t>& indices) const;

 private:
  void check_box_areas() const;
  std::vector<BoxedImage> images_;
  std::vector<std::string> classes_;
  DetectionDataOptions options_;
};

struct DetectionLoadersOptions {
  double valid_pct = 0.2;  // a random split, reproducible from seed
  uint64_t seed = 42;
  int64_t bs = 8;
  int64_t val_bs = 0;  // 0: bs
  int workers = -1;    // -1: one per core
  int channels = 3;
  std::vector<ItemTransform> item_tfms;    // each must move boxes (ImageTransform::box_map)
  std::vector<BatchTransform> batch_tfms;  // default: IntToFloat
  // The training batches' (aug_transforms, with PadMode::Zeros), boxes moved with their images.
  std::vector<BatchAugmentPtr> aug_tfms;
  DataSplitter<std::string> splitter;      // of the image paths; default: RandomSplitter{valid_pct, seed}
};

struct DetectionDataLoaders {
  static DataLoaders from_images(std::vector<BoxedImage> images, std::vector<std::string> classes,
                                 DetectionLoadersOptions options = {});
  // COCO's instances JSON with its images (vision/datasets/coco.h).
  static DataLoaders from_coco(const std::string& json_path, const std::string& images_dir,
                               DetectionLoadersOptions options = {});
  // The images of images_dir (sorted by name), each with boxes_dir/<its name>.txt.
  static DataLoaders from_box_files(const std::string& images_dir, const std::string& boxes_dir,
                                    DetectionLoadersOptions options = {});
};

// The boxes of one box file: labels index `classes` (a name not there is an error naming the
// file and line).
BoxedImage read_box_file(const std::string& image, const std::string& box_file, const std::vector<std::string>& classes);

}  // namespace fastcpp::vision
