#pragma once
// DataBlock: fastai's recipe for image data. Blocks say what x and y are, get_items
// finds the items, get_x and get_y read an item's image and label, the splitter sets
// training and validation apart; then the item and batch transforms, as fastai's.
//
//   vision::DataBlock<> pets{
//       .blocks = {vision::ImageBlock{}, vision::CategoryBlock{}},
//       .get_y = vision::RegexLabeller(R"(^(.+)_\d+\.jpg$)"),
//       .splitter = RandomSplitter{.valid_pct = 0.2, .seed = 42},
//       .item_tfms = {vision::Resize(224)}};
//   auto dls = pets.dataloaders("data/pets/images", {.bs = 64});
//
// Items are image paths by default (get_items: get_image_files, get_x: the path); a
// DataBlock<CsvRow> reads the rows of a CSV file instead (get_x and get_y: ColReader).
// Labels follow fastai: a CategoryBlock's vocab is the training items' labels sorted,
// and a validation label outside it, or an empty one, is an error naming the item; only the
// items the splitter keeps are labelled. A MultiCategoryBlock's label
// holds the item's classes separated by `delim`, its target is one-hot; a MaskBlock's
// label is the path of the item's mask (vision/datasets/segmentation_data.h).
#include <functional>
#include <optional>
#include <regex>
#include <string>
#include <variant>
#include <vector>

#include "core/error.h"
#include "data/batch_augment.h"
#include "data/batch_transforms.h"
#include "data/csv.h"
#include "data/dataloader.h"
#include "data/splitters.h"
#include "vision/datasets/image_folder.h"
#include "vision/datasets/segmentation_data.h"
#include "vision/transforms.h"

namespace fastcpp::vision {

struct ImageBlock {
  int channels = 3;  // 3: RGB, 1: grey
};
struct CategoryBlock {
  std::vector<std::string> vocab;  // empty: the training items' labels
  // As fastai's: the vocab (given or found) sorted, without duplicates; false: in the
  // order given, or of first appearance among the training items.
  bool sort = true;
  // Labels that all read as numbers sort by value (1, 2, 10), as fastai sorts a CSV
  // column that pandas reads as numbers; otherwise, and by default, as text.
  bool numbers_by_value = false;
};
struct MultiCategoryBlock {
  std::string delim = " ";
  std::vector<std::string> vocab;  // empty: the training items' labels
};
struct MaskBlock {
  std::vector<std::string> codes;     // the class of each mask value
  std::optional<int64_t> void_index;  // a mask value that marks pixels to leave out (DataLoaders::void_index)
  int mask_fill = 0;                  // what masks are padded with
  MaskFrame mask_frame = MaskFrame::stored;  // where a JPEG's EXIF orientation leaves it open (segmentation_data.h)
};
using TargetBlock = std::variant<CategoryBlock, MultiCategoryBlock, MaskBlock>;

struct Blocks {
  ImageBlock x;
  TargetBlock y;  // default: a CategoryBlock (the variant's first)
};

// What a DataBlock reads from its items: each one's image and label, and the split.
struct LabelledImages {
  std::vector<std::string> images;
  std::vector<std::string> labels;
  Split split;
};

// The datasets a DataBlock makes: ImageFolders (targets: class indices, or one-hot for a
// MultiCategoryBlock) or SegmentationDatasets; vocab holds the classes (the codes).
struct ImageDatasets {
  DatasetPtr train;
  DatasetPtr valid;
  std::vector<std::string> vocab;
  bool multi_label = false;
  std::optional<int64_t> void_index;  // of masks
  int mask_fill = 0;                  // what masks are padded with, batch augmentation too
};

struct LoadOptions {
  int64_t bs = 64;              // training batches (drop_last, shuffled)
  int workers = -1;             // -1: one per core (of this process's share of them), at most 16
  uint64_t seed = 42;           // the shuffle's
  Decode decode = Decode::Cpu;  // where JPEGs are decoded (vision/datasets/image_folder.h)
  int64_t val_bs = 0;           // validation batches (in order); 0: bs, as fastai's
};

// The training and validation datasets of labelled images, as `blocks` say (vocab, targets).
ImageDatasets image_datasets(const LabelledImages& items, const Blocks& blocks, const std::vector<ItemTransform>& item_tfms,
                             Decode decode = Decode::Cpu);
// Loaders over two datasets of uint8 images, as fastai's DataLoaders.from_dsets: the
// training set shuffled in batches of bs (the last, short one dropped), the validation
// set in order in batches of val_bs. batch_tfms default to IntToFloat; the validation
// loader gets the aug_tfms' validation forms.
DataLoaders image_dataloaders(const ImageDatasets& datasets, const std::vector<BatchTransform>& batch_tfms,
                              const std::vector<BatchAugmentPtr>& aug_tfms, const LoadOptions& options);

// The image files under `folder`, recursively (hidden folders and files left out), sorted by path.
// fastai's follow the order the file system lists them in, so that its random split of
// the same folder may differ from machine to machine; these do not.
std::vector<std::string> get_image_files(const std::string& folder);
// The name of the folder a file is in (fastai's parent_label).
std::string parent_label(const std::string& path);

// fastai's RegexLabeller: the first group of `pattern` found in the file's name (or the
// whole path, with match_path); an error naming both when it is not found.
class RegexLabeller {
 public:
  explicit RegexLabeller(std::string pattern, bool match_path = false);
  std::string operator()(const std::string& path) const;

 private:
  std::string pattern_;
  std::regex regex_;
  bool match_path_;
};

// fastai's ColReader for one column of a CSV's rows: pref + value + suff (pref: a folder
// ending in '/' for file names).
class ColReader {
 public:
  ColReader(const CsvTable& table, const Column& column, std::string pref = {}, std::string suff = {});
  std::string operator()(const CsvRow& row) const { return pref_ + row.at(column_) + suff_; }

 private:
  size_t column_;
  std::string pref_, suff_;
};

template <class Item = std::string>
struct DataBlock {
  Blocks blocks;
  std::function<std::vector<Item>(const std::string& source)> get_items;  // default for paths: get_image_files
  std::function<std::string(const Item&)> get_x;  // the image's path; default for paths: the item
  std::function<std::string(const Item&)> get_y;  // the label, labels (MultiCategoryBlock) or mask path (MaskBlock)
  DataSplitter<Item> splitter = RandomSplitter{};
  std::vector<ItemTransform> item_tfms;
  std::vector<BatchTransform> batch_tfms;
  std::vector<BatchAugmentPtr> aug_tfms;

  // The image and label of each item the splitter keeps, and the split over them (nothing
  // is read from the images). Items in neither part are not labelled, as in fastai.
  LabelledImages label(const std::vector<Item>& items) const {
    if (!get_y) throw Error("DataBlock: get_y is not set");
    const auto split = splitter(items);
    if (split.train.empty())
      throw Error("DataBlock: no training items (the splitter put none of the " + std::to_string(items.size()) +
                  " items in training)");
    LabelledImages labelled;
    auto take = [&](const std::vector<int64_t>& which) {
      std::vector<int64_t> positions;
      for (const auto i : which) {
        if (i < 0 || static_cast<size_t>(i) >= items.size())
          throw Error("DataBlock: the splitter gave item " + std::to_string(i) + " of " +
                      std::to_string(items.size()));
        positions.push_back(static_cast<int64_t>(labelled.images.size()));
        labelled.images.push_back(image_of(items[static_cast<size_t>(i)]));
        labelled.labels.push_back(label_of(items[static_cast<size_t>(i)], labelled.images.back()));
      }
      return positions;
    };
    labelled.split.train = take(split.train);
    labelled.split.valid = take(split.valid);
    return labelled;
  }
  ImageDatasets datasets(const std::vector<Item>& items, Decode decode = Decode::Cpu) const {
    return image_datasets(label(items), blocks, item_tfms, decode);
  }
  DataLoaders dataloaders(const std::vector<Item>& items, const LoadOptions& options = {}) const {
    return image_dataloaders(datasets(items, options.decode), batch_tfms, aug_tfms, options);
  }
  // The items get_items finds in `source`.
  DataLoaders dataloaders(const std::string& source, const LoadOptions& options = {}) const {
    if (get_items) return dataloaders(get_items(source), options);
    if constexpr (std::is_convertible_v<std::string, Item>) return dataloaders(get_image_files(source), options);
    throw Error("DataBlock: get_items is not set (needed for items that are not image paths)");
  }

 private:
  std::string image_of(const Item& item) const {
    if (get_x) return get_x(item);
    if constexpr (std::is_convertible_v<Item, std::string>) return item;
    throw Error("DataBlock: get_x is not set (needed for items that are not image paths)");
  }
  std::string label_of(const Item& item, const std::string& image) const {
    try {
      return get_y(item);
    } catch (const Error&) {
      throw;
    } catch (const std::exception& e) {  // a user's get_y (map.at, stoi): name the item
      throw Error("DataBlock: get_y failed on '" + image + "': " + e.what());
    }
  }
};

}  // namespace fastcpp::vision
