#include "vision/datasets/image_folder.h"

#include <torch/torch.h>

#include <algorithm>
#include <filesystem>
#include <iostream>
#include <opencv2/core/utility.hpp>
#include <stdexcept>

#include "data/buffer_pool.h"
#include "core/error.h"
#include "core/exception_text.h"
#if FASTCPP_HAS_DIRECT_DECODERS
#include "vision/decoders.h"
#endif
#include "vision/device_decode.h"
#include "vision/image.h"
#include "vision/jpeg_header.h"

namespace fastcpp::vision {
namespace fs = std::filesystem;

bool is_image_file(const std::string& path) {
  auto ext = fs::path(path).extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return std::tolower(c); });
  // fastai's image_extensions (the image types Python's mimetypes knows) that these decoders read.
  for (const char* known : {".jpg", ".jpeg", ".jpe", ".jfif", ".png", ".bmp", ".tif", ".tiff", ".webp", ".ppm", ".pgm",
                            ".pbm", ".pnm"})
    if (ext == known) return true;
  return false;
}

// The entries of `folder`, an Error naming it where it cannot be read.
std::vector<fs::directory_entry> entries_of(const std::string& folder) {
  try {
    return {fs::directory_iterator(folder), fs::directory_iterator()};
  } catch (const fs::filesystem_error& e) {
    throw Error("image folder: cannot list '" + folder + "': " + e.what());
  }
}

std::vector<std::string> image_files_in(const std::string& folder) {
  std::vector<std::string> files;
  for (const auto& entry : entries_of(folder))
    if (entry.is_regular_file() && entry.path().filename().string()[0] != '.' && is_image_file(entry.path().string()))
      files.push_back(entry.path().string());
  std::sort(files.begin(), files.end());
  return files;
}

std::vector<std::string> decodable_images(const std::vector<std::string>& paths, int channels) {
  std::vector<std::string> kept;
  for (const auto& path : paths) {
    try {
      read_image(path, {channels, 0});
      kept.push_back(path);
    } catch (const Error& e) {
      std::cerr << "warning: " << e.what() << "; left out\n";
    }
  }
  return kept;
}

ImageFolder::ImageFolder(std::vector<std::string> paths, std::vector<int64_t> labels, std::vector<std::string> vocab,
                         ImageFolderOptions options)
    : ImageFolder(std::move(paths), std::move(labels), std::move(vocab), std::move(options), torch::Tensor()) {}

ImageFolder::ImageFolder(std::vector<std::string> paths, torch::Tensor multi_hot, std::vector<std::string> vocab,
                         ImageFolderOptions options)
    : ImageFolder(std::move(paths), std::vector<int64_t>{}, std::move(vocab), std::move(options), multi_hot) {}

ImageFolder::ImageFolder(std::vector<std::string> paths, std::vector<int64_t> labels, std::vector<std::string> vocab,
                         ImageFolderOptions options, torch::Tensor multi_hot)
    : paths_(std::move(paths)), labels_(std::move(labels)), multi_hot_(std::move(multi_hot)), vocab_(std::move(vocab)),
      options_(std::move(options)) {
  const auto n_targets = multi_hot_.defined() ? static_cast<size_t>(multi_hot_.size(0)) : labels_.size();
  if (paths_.size() != n_targets) throw Error("ImageFolder: as many labels as paths needed");
  if (multi_hot_.defined() && (multi_hot_.dim() != 2 || multi_hot_.size(1) != static_cast<int64_t>(vocab_.size())))
    throw Error("ImageFolder: multi-hot targets must be [items, " + std::to_string(vocab_.size()) + "], got " +
                c10::str(multi_hot_.sizes()));
  if (!options_.item_tfms.empty() && options_.reduced_decode) min_side_ = options_.item_tfms.front().min_input_side();
  // Images are decoded one per loader worker: OpenCV's own thread pool would only
  // oversubscribe the cores.
  cv::setNumThreads(1);
}

ImageFolder ImageFolder::scan(const std::string& root, ImageFolderOptions options,
                              const std::vector<std::string>& given_vocab) {
  std::error_code ec;
  if (!fs::is_directory(root, ec)) throw Error("image folder '" + root + "' not found or not a directory");
  std::vector<std::string> folders;
  for (const auto& entry : entries_of(root))
    if (entry.is_directory() && entry.path().filename().string()[0] != '.') folders.push_back(entry.path().filename());
  std::sort(folders.begin(), folders.end());
  // As fastai, whose labels of a split must all be in the training vocab.
  for (const auto& folder : given_vocab.empty() ? std::vector<std::string>{} : folders)
    if (std::find(given_vocab.begin(), given_vocab.end(), folder) == given_vocab.end())
      throw Error("image folder '" + root + "': its class folder '" + folder +
                  "' is not one of the training classes (" + joined(given_vocab) + ")");
  const auto& vocab = given_vocab.empty() ? folders : given_vocab;
  if (vocab.empty()) throw Error("image folder '" + root + "' has no class folders (expected root/<class>/<image>)");
  auto warn_or_throw = [&](const std::string& message) {
    if (!options.skip_bad) throw Error(message + " (skip_bad leaves such files out)");
    std::cerr << "warning: " << message << "; left out\n";
  };
  std::vector<std::string> paths, classes = given_vocab;  // without a given vocab: the folders with images
  std::vector<int64_t> labels;
  for (size_t k = 0; k < vocab.size(); ++k) {
    const auto dir = fs::path(root) / vocab[k];
    if (!fs::is_directory(dir, ec)) continue;  // a class absent from this split
    auto files = image_files_in(dir.string());  // other files skipped, as fastai's get_image_files
    if (options.skip_bad) files = decodable_images(files, options.channels);
    if (given_vocab.empty()) {
      if (files.empty()) {
        warn_or_throw("class folder '" + dir.string() + "' has no images");
        continue;  // no class of the model's
      }
      classes.push_back(vocab[k]);
    }
    const auto label = given_vocab.empty() ? static_cast<int64_t>(classes.size() - 1) : static_cast<int64_t>(k);
    for (auto& file : files) {
      paths.push_back(std::move(file));
      labels.push_back(label);
    }
  }
  return ImageFolder(std::move(paths), std::move(labels), std::move(classes), std::move(options));
}

ImageFolder ImageFolder::with_options(ImageFolderOptions options) const {
  return ImageFolder(paths_, labels_, vocab_, std::move(options), multi_hot_);
}

DatasetPtr ImageFolder::augmented() const {
  if (options_.item_tfms.empty()) return nullptr;
  auto options = options_;
  options.train = true;
  return std::make_shared<ImageFolder>(with_options(std::move(options)));
}

std::vector<std::string> ImageFolder::item_transform_specs() const {
  return transform_specs(options_.item_tfms, "ImageFolder");
}

ImageFolder ImageFolder::subset(const std::vector<int64_t>& indices) const {
  std::vector<std::string> paths;
  std::vector<int64_t> labels;
  for (auto i : indices) {
    paths.push_back(paths_.at(static_cast<size_t>(i)));
    if (!multi_label()) labels.push_back(labels_.at(static_cast<size_t>(i)));
  }
  const auto multi_hot = multi_label() ? multi_hot_.index_select(0, torch::tensor(indices, torch::kLong)) : torch::Tensor();
  return ImageFolder(std::move(paths), std::move(labels), vocab_, options_, multi_hot);
}

torch::Tensor ImageFolder::target(size_t index) const {
  return multi_label() ? multi_hot_[static_cast<int64_t>(index)] : torch::tensor(labels_[index], torch::kLong);
}

torch::Tensor ImageFolder::targets(const std::vector<int64_t>& indices) const {
  if (multi_label()) return multi_hot_.index_select(0, torch::tensor(indices, torch::kLong));
  auto labels = torch::empty({static_cast<int64_t>(indices.size())}, torch::kLong);
  auto* out = labels.data_ptr<int64_t>();
  for (size_t k = 0; k < indices.size(); ++k) out[k] = labels_.at(static_cast<size_t>(indices[k]));
  return labels;
}

namespace {

struct JpegPlan {
  CropPlan plan;   // in the pixels of the image decoded at 1/factor
  int factor = 1;  // the CPU path's reduced decoding
  cv::Size size;   // the JPEG's full size
};

// The crop plan of a JPEG's item transforms, drawn from its header at the size the CPU
// path decodes it at, where the file (no EXIF rotation, colour, or grey where grey is
// taken) and the transforms allow one; `rng` advances only then.
std::optional<JpegPlan> plan_jpeg(const std::vector<uint8_t>& bytes, const std::vector<ItemTransform>& tfms, int min_side,
                                  bool train, bool grey_too, Rng& rng) {
  const auto header = read_jpeg_header(bytes);
  const bool components = header.components == 3 || (grey_too && header.components == 1);
  if (!components || header.orientation != 1 || !decodable_size(header.size) || !has_jpeg_end(bytes, header)) return std::nullopt;
  const int factor = jpeg_reduction(header.size, min_side);
  Rng drawn = rng;
  const auto plan = plan_of(tfms, reduced_size(header.size, factor), drawn, train);
  if (!plan) return std::nullopt;
  rng = drawn;
  return JpegPlan{*plan, factor, header.size};
}

}  // namespace

cv::Mat ImageFolder::load(size_t index, Rng& rng) const {
  if (index >= size()) throw Error("ImageFolder: index " + std::to_string(index) + " out of range for " + std::to_string(size()));
  const auto& path = paths_[index];
  auto bytes = read_image_bytes(path);
#if FASTCPP_HAS_DIRECT_DECODERS
  // A JPEG whose transforms are one crop and resize: only the crop is decoded (the same
  // pixels and draws as decoding it whole and transforming it).
  if (options_.channels == 3)
    if (const auto jpeg = plan_jpeg(bytes, options_.item_tfms, min_side_, options_.train, /*grey_too=*/true, rng)) {
      try {
        return apply_plan(libjpeg_decode_region(bytes, jpeg->factor, jpeg->plan.crop), jpeg->plan);
      } catch (const std::runtime_error& e) {
        throw Error("cannot decode image '" + path + "': " + e.what());
      }
    }
#endif
  // Decoded in OpenCV's BGR order (transforms don't care); swapped to RGB on the copy out.
  auto image = decode_image(bytes, path, {options_.channels, min_side_, /*rgb=*/false});
  for (const auto& tfm : options_.item_tfms) image = tfm(image, rng, options_.train);
  return image;
}

Example ImageFolder::get(size_t index, Rng& rng) const {
  return {image_to_tensor(load(index, rng), /*reverse_channels=*/true), target(index)};
}

Example ImageFolder::get(size_t index) const {
  Rng rng(index);
  return get(index, rng);
}

namespace {

// An item's error, whatever threw it (a transform's OpenCV or libtorch error too), naming
// the item and its image.
Error item_error(size_t index, const std::string& path, const std::exception& e) {
  auto text = exception_text(e);
  if (text.find(path) == std::string::npos) text += " (image '" + path + "')";
  return Error("item " + std::to_string(index) + ": " + text);
}

// The message of both paths for a batch whose items differ in size.
Error size_mismatch(const std::string& path, cv::Size size, const std::string& first_path, cv::Size first) {
  return Error("items of one batch differ in size: '" + path + "' is " + std::to_string(size.width) + "x" +
               std::to_string(size.height) + ", '" + first_path + "' " + std::to_string(first.width) + "x" +
               std::to_string(first.height) + ": add a Resize or crop to the item transforms");
}

}  // namespace

Batch ImageFolder::get_batch_on_device(const std::vector<int64_t>& indices, uint64_t seed) const {
  std::vector<EncodedImage> items(indices.size());
  cv::Size out;
  for (size_t k = 0; k < indices.size(); ++k) {
    Rng rng(mix_seed(seed, k));
    const auto index = static_cast<size_t>(indices[k]);
    auto& item = items[k];
    try {
      if (index >= size()) throw Error("ImageFolder: index " + std::to_string(index) + " out of range for " + std::to_string(size()));
      item.path = paths_[index];
      auto bytes = read_image_bytes(item.path);
      // Colour JPEGs only: what nvJPEG gives for grey ones is not the CPU path's.
      if (const auto jpeg = plan_jpeg(bytes, options_.item_tfms, min_side_, options_.train, /*grey_too=*/false, rng)) {
        const auto& c = jpeg->plan.crop;  // scaled to the full image, which the device decodes
        item.plan = jpeg->plan;
        item.plan.crop = cv::Rect(c.x * jpeg->factor, c.y * jpeg->factor, c.width * jpeg->factor, c.height * jpeg->factor) &
                         cv::Rect({}, jpeg->size);
        item.size = jpeg->size;
        item.jpeg = std::move(bytes);
      } else {
        item.ready = image_to_tensor(load(index, rng), /*reverse_channels=*/true);
        item.plan.out = {int(item.ready.size(2)), int(item.ready.size(1))};
      }
    } catch (const std::exception& e) {
      throw item_error(index, item.path, e);
    }
    if (k == 0) out = item.plan.out;
    if (item.plan.out != out) throw size_mismatch(item.path, item.plan.out, items[0].path, out);
  }
  return {torch::Tensor(), targets(indices), std::make_shared<DeviceDecode>(std::move(items), out)};
}

Batch ImageFolder::get_batch(const std::vector<int64_t>& indices, uint64_t seed) const {
  if (options_.decode == Decode::Device && options_.channels == 3) return get_batch_on_device(indices, seed);
  std::vector<cv::Mat> images;
  images.reserve(indices.size());
  for (size_t k = 0; k < indices.size(); ++k) {
    Rng rng(mix_seed(seed, k));
    const auto index = static_cast<size_t>(indices[k]);
    try {
      images.push_back(load(index, rng));
    } catch (const std::exception& e) {
      throw item_error(index, index < size() ? paths_[index] : "", e);
    }
    const auto& first_path = paths_[static_cast<size_t>(indices[0])];
    if (images[k].size() != images[0].size())
      throw size_mismatch(paths_[index], images[k].size(), first_path, images[0].size());
    if (images[k].type() != CV_8UC(images[0].channels()))  // a transform of the program's own
      throw Error("item " + std::to_string(index) + ": image '" + paths_[index] + "' is " +
                  cv::typeToString(images[k].type()) + " after its item transforms, where the batch takes " +
                  cv::typeToString(CV_8UC(images[0].channels())) + " (8-bit, the channels of '" + first_path + "')");
  }
  const auto& first = images.front();
  auto x = pooled_empty({static_cast<int64_t>(images.size()), first.channels(), first.rows, first.cols}, torch::kUInt8);
  for (size_t k = 0; k < images.size(); ++k) {
    auto slot = x[static_cast<int64_t>(k)];
    copy_image_to(images[k], slot, /*reverse_channels=*/true);
  }
  return {x, targets(indices)};
}

}  // namespace fastcpp::vision
