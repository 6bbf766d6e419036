#include "vision/datasets/segmentation_data.h"

#include <torch/torch.h>

#include <algorithm>
#include <filesystem>

#include "core/error.h"
#include "core/exception_text.h"
#include "formats/png_samples.h"
#include "vision/data_block.h"
#include "vision/datasets/image_folder.h"
#include "vision/image.h"
#include "vision/jpeg_header.h"

namespace fastcpp::vision {
namespace {

namespace fs = std::filesystem;

std::string size_text(const cv::Mat& m) { return std::to_string(m.cols) + "x" + std::to_string(m.rows); }

// Throws naming the file and the first pixel (x, y) whose value is neither a class index
// nor the void index.
void check_mask_values(const cv::Mat& mask, const std::string& path, size_t n_codes, std::optional<int64_t> void_index) {
  for (int y = 0; y < mask.rows; ++y) {
    const auto* row = mask.ptr<uint8_t>(y);
    for (int x = 0; x < mask.cols; ++x) {
      const int64_t value = row[x];
      if (value < static_cast<int64_t>(n_codes) || (void_index && value == *void_index)) continue;
      throw Error("mask '" + path + "' has value " + std::to_string(value) + " at pixel (" + std::to_string(x) + ", " +
                  std::to_string(y) + "): not a class index (" + std::to_string(n_codes) + " codes)" +
                  (void_index ? " nor the void index " + std::to_string(*void_index) : std::string()));
    }
  }
}

// A mask's values as stored: a one-channel PNG's samples whatever its bit depth (a
// picture decoder would scale 1-bit 0/1 to 0/255 and keep the high byte of 16 bits) or a
// palette's indices (Pascal VOC's masks, where fastai's PILMask reads the colours' grey
// levels); other files as grey levels, as fastai's.
cv::Mat read_mask(const std::string& path) {
  const auto bytes = read_image_bytes(path);
  const auto png = decode_png_samples(bytes, path);
  if (!png) return decode_image(bytes, path, {.channels = 1});
  cv::Mat mask(png->height, png->width, CV_8UC1);
  for (int y = 0; y < mask.rows; ++y) {
    auto* row = mask.ptr<uint8_t>(y);
    for (int x = 0; x < mask.cols; ++x) {
      const uint16_t value = png->samples[static_cast<size_t>(y) * static_cast<size_t>(mask.cols) + x];
      if (value > 255)
        throw Error("mask '" + path + "' has value " + std::to_string(value) + " at pixel (" + std::to_string(x) +
                    ", " + std::to_string(y) + "): masks hold class indices up to 255");
      row[x] = static_cast<uint8_t>(value);
    }
  }
  return mask;
}

}  // namespace

SegmentationDataset::SegmentationDataset(std::vector<std::string> images, std::vector<std::string> masks,
                                         std::vector<std::string> codes, SegmentationOptions options)
    : images_(std::move(images)), masks_(std::move(masks)), codes_(std::move(codes)), options_(std::move(options)) {
  if (images_.size() != masks_.size())
    throw Error("SegmentationDataset: " + std::to_string(images_.size()) + " images but " +
                std::to_string(masks_.size()) + " masks");
  if (codes_.empty()) throw Error("SegmentationDataset: no codes (the class names)");
  if (codes_.size() > 256) throw Error("SegmentationDataset: 8-bit masks hold at most 256 classes, got " + std::to_string(codes_.size()) + " codes");
  // The masks are 8-bit: a larger value could not be stored in them.
  if (options_.void_index && (*options_.void_index < 0 || *options_.void_index > 255))
    throw Error("SegmentationDataset: void_index must be in [0, 255] (masks are 8-bit), got " +
                std::to_string(*options_.void_index));
  const bool fill_ok = options_.mask_fill >= 0 && (options_.mask_fill < static_cast<int>(codes_.size()) ||
                                                   (options_.void_index && options_.mask_fill == *options_.void_index));
  if (!fill_ok)
    throw Error("SegmentationDataset: mask_fill " + std::to_string(options_.mask_fill) +
                " is neither a class index nor the void index");
}

Example SegmentationDataset::get(size_t index) const {
  Rng rng(index);
  return get(index, rng);
}

Example SegmentationDataset::get(size_t index, Rng& rng) const {
  const auto& image_path = images_.at(index);
  const auto& mask_path = masks_.at(index);
  if (!fs::exists(mask_path)) throw Error("mask '" + mask_path + "' of image '" + image_path + "' not found");
  const auto image_bytes = read_image_bytes(image_path);
  cv::Mat image = decode_image(image_bytes, image_path, {.channels = options_.channels});
  cv::Mat mask = read_mask(mask_path);
  // The decoder turned a JPEG as its EXIF orientation says. A mask that fits only the
  // stored pixels turns with it; one that fits only the picture shown stays; one that fits
  // both is in options_.mask_frame.
  if (is_jpeg(image_bytes)) {
    const auto header = read_jpeg_header(image_bytes);
    const bool fits_stored = mask.size() == header.size, fits_shown = mask.size() == image.size();
    if (fits_stored && (!fits_shown || options_.mask_frame == MaskFrame::stored))
      apply_orientation(mask, header.orientation);
  }
  if (mask.size() != image.size())
    throw Error("mask '" + mask_path + "' is " + size_text(mask) + " but its image '" + image_path + "' is " + size_text(image));
  check_mask_values(mask, mask_path, codes_.size(), options_.void_index);
  for (const auto& tfm : options_.item_tfms) {
    Rng mask_rng = rng;  // the mask takes the image's draws
    image = tfm(image, rng, options_.train);
    mask = tfm.mask(mask, mask_rng, options_.train, options_.mask_fill);
  }
  if (!mask.isContinuous()) mask = mask.clone();
  auto y = torch::from_blob(mask.data, {mask.rows, mask.cols}, torch::kUInt8).to(torch::kLong);
  return {image_to_tensor(image), y};
}

DatasetPtr SegmentationDataset::augmented() const {
  if (options_.item_tfms.empty()) return nullptr;
  auto options = options_;
  options.train = true;
  return std::make_shared<SegmentationDataset>(with_options(std::move(options)));
}

std::vector<std::string> SegmentationDataset::item_transform_specs() const {
  return transform_specs(options_.item_tfms, "SegmentationDataset");
}

SegmentationDataset SegmentationDataset::with_options(SegmentationOptions options) const {
  return SegmentationDataset(images_, masks_, codes_, std::move(options));
}

SegmentationDataset SegmentationDataset::subset(const std::vector<int64_t>& indices) const {
  std::vector<std::string> images, masks;
  for (const auto i : indices) {
    images.push_back(images_.at(static_cast<size_t>(i)));
    masks.push_back(masks_.at(static_cast<size_t>(i)));
  }
  return SegmentationDataset(std::move(images), std::move(masks), codes_, options_);
}

DataLoaders SegmentationDataLoaders::from_label_func(const std::vector<std::string>& images,
                                                     const std::function<std::string(const std::string&)>& label_func,
                                                     std::vector<std::string> codes, SegmentationLoadersOptions o) {
  if (images.empty()) throw Error("SegmentationDataLoaders: no images");
  std::vector<std::string> masks;
  for (const auto& image : images) {
    try {
      masks.push_back(label_func(image));
    } catch (const std::exception& e) {
      throw Error("SegmentationDataLoaders: label_func failed on '" + image + "': " + exception_text(e));
    }
  }
  SegmentationOptions train_options{o.channels, o.item_tfms, /*train=*/true, o.void_index, o.mask_fill, o.mask_frame};
  auto valid_options = train_options;
  valid_options.train = false;
  const SegmentationDataset all(images, std::move(masks), codes, train_options);
  const auto split = o.splitter ? o.splitter(images) : RandomSplitter{o.valid_pct, o.seed}.split(all.size());
  check_split(split, images.size(), "SegmentationDataLoaders");
  if (split.train.empty()) throw Error("SegmentationDataLoaders: the split left no training images");
  auto train = std::make_shared<SegmentationDataset>(all.subset(split.train));
  auto valid = std::make_shared<SegmentationDataset>(all.subset(split.valid).with_options(valid_options));
  return image_dataloaders({train, valid, std::move(codes), false, o.void_index, o.mask_fill}, o.batch_tfms, o.aug_tfms,
                           {.bs = o.bs, .workers = o.workers, .seed = o.seed, .val_bs = o.val_bs});
}

DataLoaders SegmentationDataLoaders::from_folders(const std::string& images_dir, const std::string& masks_dir,
                                                  std::vector<std::string> codes, SegmentationLoadersOptions options) {
  std::error_code ec;
  if (!fs::is_directory(images_dir, ec)) throw Error("SegmentationDataLoaders: image folder '" + images_dir + "' not found");
  auto mask_of = [&](const std::string& image) { return (fs::path(masks_dir) / fs::path(image).filename()).string(); };
  return from_label_func(image_files_in(images_dir), mask_of, std::move(codes), std::move(options));
}

}  // namespace fastcpp::vision
