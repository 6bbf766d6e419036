#pragma once
// Segmentation data: image files paired with masks, 8-bit single-channel images (PNG)
// whose pixels are class indices, as fastai's SegmentationDataLoaders. A pair goes
// through the item transforms with the same random draws: the image resampled as
// usual, the mask by nearest neighbour (never interpolated) and padded with mask_fill.
// On the loader's workers, so batches are bitwise the same with any number of them.
// Items: the image as uint8 CHW, the mask as int64 [H, W]; batch transforms (Normalize)
// act on the images only.
//
//   auto dls = vision::SegmentationDataLoaders::from_label_func(
//       image_paths, [](const std::string& image) { return mask_path_of(image); },
//       {"background", "shirt", "shoe"}, {.bs = 8, .void_index = 255, .mask_fill = 255});
//
// Bad input is an error naming the file: a missing or unreadable mask, a mask whose size
// differs from its image's, a value that is neither a class index nor the void index
// (with the pixel where it is).
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "data/batch_transforms.h"
#include "data/dataloader.h"
#include "data/dataset.h"
#include "data/splitters.h"
#include "vision/transforms.h"

namespace fastcpp::vision {

// The pixels a mask was drawn on, where a JPEG's EXIF orientation turns its image (the
// decoder shows it turned) and the mask would fit either frame: a square turned a
// quarter, or any image flipped or turned half. Elsewhere the mask's size tells.
enum class MaskFrame {
  stored,  // the pixels as stored: the mask turns with its image (fastai and torchvision read them so)
  shown,   // the picture as shown (as labelme draws, and as detection boxes are read): the mask stays
};

struct SegmentationOptions {
  int channels = 3;                    // of the images: 3 (RGB) or 1
  std::vector<ItemTransform> item_tfms;
  bool train = true;                   // random transforms act; false: their deterministic version
  std::optional<int64_t> void_index;   // a mask value that marks pixels to leave out (e.g. 255)
  int mask_fill = 0;                   // what a mask is padded with: the background, or the void index
  MaskFrame mask_frame = MaskFrame::stored;
};

class SegmentationDataset : public Dataset {
 public:
  SegmentationDataset(std::vector<std::string> images, std::vector<std::string> masks, std::vector<std::string> codes,
                      SegmentationOptions options = {});
  using Dataset::get;
  size_t size() const override { return images_.size(); }
  Example get(size_t index) const override;
  Example get(size_t index, Rng& rng) const override;
  // These pairs with train = true (nullptr without item transforms).
  DatasetPtr augmented() const override;
  std::vector<std::string> item_transform_specs() const override;

  const std::vector<std::string>& codes() const { return codes_; }
  const std::vector<std::string>& images() const { return images_; }
  const std::vector<std::string>& masks() const { return masks_; }
  SegmentationDataset with_options(SegmentationOptions options) const;
  SegmentationDataset subset(const std::vector<int64_t>& indices) const;

 private:
  std::vector<std::string> images_, masks_, codes_;
  SegmentationOptions options_;
};

struct SegmentationLoadersOptions {
  double valid_pct = 0.2;  // a random split, reproducible from seed
  uint64_t seed = 42;
  int64_t bs = 8;          // fastai's factory: 64 (segmentation batches are large)
  int64_t val_bs = 0;      // 0: bs
  int workers = -1;        // -1: one per core
  int channels = 3;
  std::vector<ItemTransform> item_tfms;
  std::vector<BatchTransform> batch_tfms;  // default: IntToFloat
  std::optional<int64_t> void_index;      // the loaders' (DataLoaders::void_index)
  int mask_fill = 0;
  MaskFrame mask_frame = MaskFrame::stored;
  std::vector<BatchAugmentPtr> aug_tfms;  // the training batches' (aug_transforms), masks moved with their images
  DataSplitter<std::string> splitter;     // of the image paths; default: RandomSplitter{valid_pct, seed}
};

struct SegmentationDataLoaders {
  // fastai's from_label_func: the mask of each image at label_func(image path).
  static DataLoaders from_label_func(const std::vector<std::string>& images,
                                     const std::function<std::string(const std::string&)>& label_func,
                                     std::vector<std::string> codes, SegmentationLoadersOptions options = {});
  // The images of images_dir (sorted by name), each with the file of the same name in masks_dir.
  static DataLoaders from_folders(const std::string& images_dir, const std::string& masks_dir,
                                  std::vector<std::string> codes, SegmentationLoadersOptions options = {});
};

}  // namespace fastcpp::vision
