#pragma once
// ImageDataLoaders: fastai's factories for image classification, each a DataBlock
// (vision/data_block.h) with fastai's defaults.
//
//   from_folder     root/train/<class>/*, root/valid/<class>/* (or a random split of root)
//   from_name_func  the label of each file from its name: label_func("Abyssinian_1.jpg")
//   from_path_func  the same from its whole path
//   from_name_re    the first group of a regular expression found in its name
//   from_lists      paths and labels given
//   from_csv        a CSV file of file names and labels (a "True"/"False" column may set
//                   the validation items)
//
//   auto dls = vision::ImageDataLoaders::from_name_re(
//       vision::get_image_files("data/pets/images"), R"(^(.+)_\d+\.jpg$)",
//       {.valid_pct = 0.2, .seed = 42, .bs = 64, .item_tfms = {vision::Resize(224)}});
//
// The random split is fastai's RandomSplitter: for the same files in the same order and
// the same seed, the same training and validation items. fastai's path argument is left
// out: it only says where fastai saves models.
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "vision/data_block.h"

namespace fastcpp::vision {

struct FromFolderOptions {
  std::string train = "train";
  std::string valid = "valid";
  // > 0: a random split of every image under root (its folders' names the labels, as
  // fastai's) instead of train/valid folders
  double valid_pct = 0;
  uint64_t seed = 42;
  int64_t bs = 64;
  int64_t val_bs = 0;    // 0: bs
  int workers = -1;      // -1: one per core
  int channels = 3;
  std::vector<ItemTransform> item_tfms;
  std::vector<BatchTransform> batch_tfms;
  bool skip_bad = false;
  std::vector<BatchAugmentPtr> aug_tfms;  // the training batches' (aug_transforms); validation gets their resize at most
  Decode decode = Decode::Cpu;
};

struct FactoryOptions {
  double valid_pct = 0.2;
  uint64_t seed = 42;  // the split's and the shuffle's
  int64_t bs = 64;
  int64_t val_bs = 0;  // 0: bs
  int workers = -1;    // -1: one per core
  int channels = 3;
  std::vector<ItemTransform> item_tfms;
  std::vector<BatchTransform> batch_tfms;
  std::vector<BatchAugmentPtr> aug_tfms;  // the training batches' (aug_transforms)
  Decode decode = Decode::Cpu;
};

// from_csv's columns, as fastai's from_df: the image of a row is
// folder/<fn_col's value><suff> (under the CSV's folder), its label label_col's value.
struct CsvColumns {
  std::string csv_fname = "labels.csv";
  CsvOptions csv;
  Column fn_col = 0;
  std::string folder;  // beneath the CSV's folder
  std::string suff;
  Column label_col = 1;
  std::string label_delim;          // set: several labels a row (MultiCategoryBlock)
  std::optional<Column> valid_col;  // set: this True/False column splits (ColSplitter), not valid_pct
};

struct ImageDataLoaders {
  static DataLoaders from_folder(const std::string& root, FromFolderOptions options = {});
  static DataLoaders from_name_func(const std::vector<std::string>& fnames,
                                    const std::function<std::string(const std::string& name)>& label_func,
                                    FactoryOptions options = {});
  static DataLoaders from_path_func(const std::vector<std::string>& fnames,
                                    const std::function<std::string(const std::string& path)>& label_func,
                                    FactoryOptions options = {});
  static DataLoaders from_name_re(const std::vector<std::string>& fnames, const std::string& pattern,
                                  FactoryOptions options = {});
  // y_block: a MultiCategoryBlock when each label holds several, separated by its delim.
  static DataLoaders from_lists(const std::vector<std::string>& fnames, const std::vector<std::string>& labels,
                                FactoryOptions options = {}, TargetBlock y_block = CategoryBlock{});
  // The CSV file at path/columns.csv_fname.
  static DataLoaders from_csv(const std::string& path, CsvColumns columns = {}, FactoryOptions options = {});
};

}  // namespace fastcpp::vision
