#include "vision/data_block.h"

#include <torch/torch.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <map>
#include <set>

#include "core/cpus.h"
#include "core/error.h"
#include "distributed/env.h"
#include "vision/augment.h"
#include "vision/datasets/segmentation_data.h"

namespace fastcpp::vision {
namespace fs = std::filesystem;

namespace {

// A finite number written out whole ("nan", "inf", hex or spaces are not: a NaN would
// leave the vocab's order to the sort).
std::optional<double> as_number(const std::string& text) {
  double value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || error != std::errc() || end != text.data() + text.size() || !std::isfinite(value)) return std::nullopt;
  return value;
}

// The distinct labels, sorted (as text or, where asked and all are numbers, by value) or in
// their first order.
std::vector<std::string> category_vocab(const std::vector<std::string>& labels, bool sort, bool numbers_by_value) {
  std::vector<std::string> vocab;
  if (!sort) {
    std::set<std::string> seen;
    for (const auto& label : labels)
      if (seen.insert(label).second) vocab.push_back(label);
    return vocab;
  }
  const std::set<std::string> distinct(labels.begin(), labels.end());
  vocab.assign(distinct.begin(), distinct.end());
  const bool numbers = numbers_by_value && std::all_of(vocab.begin(), vocab.end(), [](const auto& label) { return as_number(label).has_value(); });
  if (numbers)
    std::stable_sort(vocab.begin(), vocab.end(), [](const auto& a, const auto& b) { return *as_number(a) < *as_number(b); });
  return vocab;
}

std::vector<std::string> split_labels(const std::string& label, const std::string& delim) {
  std::vector<std::string> parts;
  for (size_t start = 0;;) {
    const auto end = label.find(delim, start);
    auto part = label.substr(start, end == std::string::npos ? std::string::npos : end - start);
    if (!part.empty()) parts.push_back(std::move(part));
    if (end == std::string::npos) return parts;
    start = end + delim.size();
  }
}

std::vector<std::string> pick(const std::vector<std::string>& all, const std::vector<int64_t>& indices) {
  std::vector<std::string> picked;
  picked.reserve(indices.size());
  for (const auto i : indices) picked.push_back(all.at(static_cast<size_t>(i)));
  return picked;
}

std::map<std::string, int64_t> index_of(const std::vector<std::string>& vocab) {
  std::map<std::string, int64_t> index;
  for (size_t i = 0; i < vocab.size(); ++i) index.emplace(vocab[i], static_cast<int64_t>(i));
  return index;
}

Error not_in_vocab(const std::string& label, const std::string& image, const std::vector<std::string>& vocab) {
  return Error("DataBlock: label '" + label + "' of '" + image + "' is not among the training items' labels (" +
               joined(vocab) + ")");
}

ImageDatasets category_datasets(const LabelledImages& items, const CategoryBlock& block, ImageFolderOptions options) {
  const auto& split = items.split;
  for (const auto& which : {split.train, split.valid})
    for (const auto i : which)
      if (items.labels[static_cast<size_t>(i)].empty())
        throw Error("DataBlock: the label of '" + items.images[static_cast<size_t>(i)] +
                    "' is empty (a CategoryBlock needs one class per item)");
  std::vector<std::string> labels = block.vocab;
  if (labels.empty())
    for (const auto i : split.train) labels.push_back(items.labels[static_cast<size_t>(i)]);
  const auto vocab = category_vocab(labels, block.sort, block.numbers_by_value);
  const auto index = index_of(vocab);
  auto encode = [&](const std::vector<int64_t>& which) {
    std::vector<int64_t> labels;
    for (const auto i : which) {
      const auto& label = items.labels[static_cast<size_t>(i)];
      const auto found = index.find(label);
      if (found == index.end()) throw not_in_vocab(label, items.images[static_cast<size_t>(i)], vocab);
      labels.push_back(found->second);
    }
    return labels;
  };
  auto train = std::make_shared<ImageFolder>(pick(items.images, split.train), encode(split.train), vocab, options);
  options.train = false;
  auto valid = std::make_shared<ImageFolder>(pick(items.images, split.valid), encode(split.valid), vocab, options);
  return {train, valid, vocab, false};
}

ImageDatasets multi_category_datasets(const LabelledImages& items, const MultiCategoryBlock& block,
                                      ImageFolderOptions options) {
  if (block.delim.empty()) throw Error("MultiCategoryBlock: delim is empty");
  const auto& split = items.split;
  std::vector<std::vector<std::string>> labels;
  for (const auto& label : items.labels) labels.push_back(split_labels(label, block.delim));
  std::vector<std::string> vocab;
  for (const auto& name : block.vocab)  // each class once, in the given order, as fastai's CategoryMap
    if (std::find(vocab.begin(), vocab.end(), name) == vocab.end()) vocab.push_back(name);
  if (vocab.empty()) {
    std::set<std::string> seen;
    for (const auto i : split.train) seen.insert(labels[static_cast<size_t>(i)].begin(), labels[static_cast<size_t>(i)].end());
    vocab.assign(seen.begin(), seen.end());
  }
  const auto index = index_of(vocab);
  auto encode = [&](const std::vector<int64_t>& which) {
    auto one_hot = torch::zeros({static_cast<int64_t>(which.size()), static_cast<int64_t>(vocab.size())});
    auto rows = one_hot.accessor<float, 2>();
    for (size_t k = 0; k < which.size(); ++k)
      for (const auto& label : labels[static_cast<size_t>(which[k])]) {
        const auto found = index.find(label);
        if (found == index.end()) throw not_in_vocab(label, items.images[static_cast<size_t>(which[k])], vocab);
        rows[static_cast<int64_t>(k)][found->second] = 1;
      }
    return one_hot;
  };
  auto train = std::make_shared<ImageFolder>(pick(items.images, split.train), encode(split.train), vocab, options);
  options.train = false;
  auto valid = std::make_shared<ImageFolder>(pick(items.images, split.valid), encode(split.valid), vocab, options);
  return {train, valid, vocab, true};
}

ImageDatasets mask_datasets(const LabelledImages& items, const MaskBlock& block, const ImageFolderOptions& image_options) {
  if (block.codes.empty()) throw Error("MaskBlock: codes are empty (name each class of the masks' values)");
  SegmentationOptions options{image_options.channels, image_options.item_tfms, /*train=*/true, block.void_index,
                              block.mask_fill, block.mask_frame};
  const SegmentationDataset all(items.images, items.labels, block.codes, options);
  options.train = false;
  return {std::make_shared<SegmentationDataset>(all.subset(items.split.train)),
          std::make_shared<SegmentationDataset>(all.subset(items.split.valid).with_options(options)), block.codes, false,
          block.void_index, block.mask_fill};
}

// fastai's: one per core this process may use, at most 16; the processes a launcher
// (torchrun, fastcpp-launch, Slurm's srun, Open MPI) started on one machine share its
// cores unless it pinned each to its own.
int default_workers() {
  int processes = 1;
  try {
    processes = std::max(1, distributed::read_env().local_world_size);
  } catch (const Error&) {  // a malformed launcher environment: to_distributed names it
  }
  return std::min(cores_per_process(processes), 16);
}

}  // namespace

ImageDatasets image_datasets(const LabelledImages& items, const Blocks& blocks, const std::vector<ItemTransform>& item_tfms,
                             Decode decode) {
  if (items.images.size() != items.labels.size())
    throw Error("DataBlock: " + std::to_string(items.images.size()) + " images but " + std::to_string(items.labels.size()) +
                " labels");
  if (items.split.train.empty())
    throw Error("DataBlock: no training items");
  check_split(items.split, items.images.size(), "DataBlock");
  const ImageFolderOptions options{blocks.x.channels, item_tfms, /*train=*/true, /*skip_bad=*/false, decode};
  if (const auto* block = std::get_if<CategoryBlock>(&blocks.y)) return category_datasets(items, *block, options);
  if (const auto* block = std::get_if<MultiCategoryBlock>(&blocks.y)) return multi_category_datasets(items, *block, options);
  return mask_datasets(items, std::get<MaskBlock>(blocks.y), options);
}

DataLoaders image_dataloaders(const ImageDatasets& datasets, const std::vector<BatchTransform>& batch_tfms,
                              const std::vector<BatchAugmentPtr>& aug_tfms, const LoadOptions& o) {
  const int workers = o.workers >= 0 ? o.workers : default_workers();
  // Batches arrive as uint8: Normalize reads them as x/255 itself; with no batch
  // transforms they just become float.
  const auto tfms = batch_tfms.empty() ? std::vector<BatchTransform>{IntToFloat()} : batch_tfms;
  // Masks padded by the batch augmentation as by the item transforms: with the data's mask_fill.
  auto augments = aug_tfms;
  for (auto& augment : augments)
    if (const auto* aug = dynamic_cast<const AugTransforms*>(augment.get()); aug && datasets.mask_fill) {
      auto options = aug->options();
      options.mask_fill = datasets.mask_fill;
      augment = aug_transforms(options);
    }
  return {DataLoader(datasets.train, {.bs = o.bs, .shuffle = true, .drop_last = true, .workers = workers, .seed = o.seed,
                                      .batch_tfms = tfms, .aug_tfms = augments}),
          DataLoader(datasets.valid, {.bs = o.val_bs > 0 ? o.val_bs : o.bs, .workers = workers, .seed = o.seed, .batch_tfms = tfms,
                                      .aug_tfms = validation_forms(augments)}),
          datasets.vocab, datasets.multi_label, datasets.void_index};
}

std::vector<std::string> get_image_files(const std::string& folder) {
  std::error_code ec;
  if (!fs::is_directory(folder, ec)) throw Error("get_image_files: '" + folder + "' not found or not a directory");
  std::vector<fs::path> files;
  try {
    for (auto it = fs::recursive_directory_iterator(folder, fs::directory_options::follow_directory_symlink);
         it != fs::recursive_directory_iterator(); ++it) {
      const auto name = it->path().filename().string();
      if (name[0] == '.') {  // hidden folders and files ("._x.jpg"), as fastai's get_files
        if (it->is_directory()) it.disable_recursion_pending();
        continue;
      }
      if (it->is_regular_file() && is_image_file(name)) files.push_back(it->path());
    }
  } catch (const fs::filesystem_error& e) {  // an unreadable folder, a loop of links
    throw Error("get_image_files: cannot list '" + folder + "': " + e.what());
  }
  std::sort(files.begin(), files.end());  // element by element, as Python sorts paths
  return {files.begin(), files.end()};
}

std::string parent_label(const std::string& path) { return fs::path(path).parent_path().filename().string(); }

RegexLabeller::RegexLabeller(std::string pattern, bool match_path) : pattern_(std::move(pattern)), match_path_(match_path) {
  try {
    regex_ = std::regex(pattern_);
  } catch (const std::regex_error& e) {
    throw Error("RegexLabeller: '" + pattern_ + "' is not a regular expression: " + e.what());
  }
  if (regex_.mark_count() == 0) throw Error("RegexLabeller: '" + pattern_ + "' has no group ( ) to take the label from");
}

std::string RegexLabeller::operator()(const std::string& path) const {
  const auto text = match_path_ ? path : fs::path(path).filename().string();
  std::smatch match;
  if (!std::regex_search(text, match, regex_)) throw Error("RegexLabeller: '" + pattern_ + "' is not found in '" + text + "'");
  return match[1].str();
}

ColReader::ColReader(const CsvTable& table, const Column& column, std::string pref, std::string suff)
    : column_(table.column(column)), pref_(std::move(pref)), suff_(std::move(suff)) {}

}  // namespace fastcpp::vision
