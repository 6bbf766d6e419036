#pragma once
// ImageFolder: a dataset of image files with one folder per class
// (root/<class>/<image>), vocab sorted by name, or of any image files with their labels
// (one class each, or several: multi-hot targets). ImageDataLoaders makes loaders of
// them (vision/datasets/image_data_loaders.h).
//
// Items are decoded on the loader's workers (at reduced size where the first item
// transform allows), transformed, and travel as uint8 CHW; the batch becomes float
// on its device through the batch transforms (Normalize reads uint8 directly; with
// no batch transforms, IntToFloat is used).
//
// Files whose names are not images' are skipped, as fastai's get_image_files. Bad input is
// an error naming the file: a corrupt or truncated image, an unreadable path, an empty
// class folder. With skip_bad, every image is decoded once when the folder is scanned, and
// a bad one is left out with a warning instead.
#include <string>
#include <vector>

#include "data/dataloader.h"
#include "data/dataset.h"
#include "vision/transforms.h"

namespace fastcpp::vision {

// Where a batch's images are decoded and cropped. Device: on the loader's device (nvJPEG
// on a GPU; libjpeg on the CPU, the same arithmetic), JPEGs whose item transforms are
// one crop and resize (RandomResizedCrop or a squishing Resize, with FlipItem): the
// workers read the files and draw the crops from their headers, as the CPU path draws
// them, and every other file goes the CPU path (vision/device_decode.h).
enum class Decode { Cpu, Device };

struct ImageFolderOptions {
  int channels = 3;
  std::vector<ItemTransform> item_tfms;
  bool train = true;      // random transforms act; false: their deterministic version
  bool skip_bad = false;
  Decode decode = Decode::Cpu;
  // JPEGs decoded at a reduced size where the item transforms need fewer pixels (the same
  // images, faster); false: at full size, as the mask and box datasets decode, so that a
  // U-Net's or a detector's exported model sees the pixels it was validated on.
  bool reduced_decode = true;
};

class ImageFolder : public Dataset {
 public:
  ImageFolder(std::vector<std::string> paths, std::vector<int64_t> labels, std::vector<std::string> vocab,
              ImageFolderOptions options = {});
  // Several classes an item: targets float [N, vocab size], 1 where a class applies
  // (fastai's MultiCategoryBlock).
  ImageFolder(std::vector<std::string> paths, torch::Tensor multi_hot, std::vector<std::string> vocab,
              ImageFolderOptions options = {});
  // Scans root/<class>/* (or uses `vocab` to name the classes, for a valid set).
  static ImageFolder scan(const std::string& root, ImageFolderOptions options = {},
                          const std::vector<std::string>& vocab = {});

  using Dataset::get;
  size_t size() const override { return paths_.size(); }
  Example get(size_t index) const override;
  Example get(size_t index, Rng& rng) const override;
  Batch get_batch(const std::vector<int64_t>& indices, uint64_t seed = 0) const override;
  // These files with train = true (nullptr without item transforms).
  DatasetPtr augmented() const override;
  // Throws fastcpp::Error for a transform without a text form (ImageTransform::spec).
  std::vector<std::string> item_transform_specs() const override;

  const std::vector<std::string>& vocab() const { return vocab_; }
  const std::vector<std::string>& paths() const { return paths_; }
  const std::vector<int64_t>& labels() const { return labels_; }  // empty when multi-label
  bool multi_label() const { return multi_hot_.defined(); }
  const torch::Tensor& multi_hot() const { return multi_hot_; }
  // The same files with other options (e.g. the validation transforms).
  ImageFolder with_options(ImageFolderOptions options) const;
  // The items at `indices` only.
  ImageFolder subset(const std::vector<int64_t>& indices) const;

 private:
  ImageFolder(std::vector<std::string> paths, std::vector<int64_t> labels, std::vector<std::string> vocab,
              ImageFolderOptions options, torch::Tensor multi_hot);
  cv::Mat load(size_t index, Rng& rng) const;
  Batch get_batch_on_device(const std::vector<int64_t>& indices, uint64_t seed) const;
  torch::Tensor target(size_t index) const;
  torch::Tensor targets(const std::vector<int64_t>& indices) const;
  std::vector<std::string> paths_;
  std::vector<int64_t> labels_;
  torch::Tensor multi_hot_;
  std::vector<std::string> vocab_;
  ImageFolderOptions options_;
  int min_side_ = 0;
};

// True for the file names ImageFolder takes as images (by extension).
bool is_image_file(const std::string& path);
// The image files directly in `folder`, sorted; hidden ones ("._x.jpg", which macOS
// leaves beside each image) left out, as fastai's get_files.
std::vector<std::string> image_files_in(const std::string& folder);
// The images of `paths` that decode; each other one is left out with a warning naming it
// (ImageFolderOptions::skip_bad).
std::vector<std::string> decodable_images(const std::vector<std::string>& paths, int channels);

}  // namespace fastcpp::vision
