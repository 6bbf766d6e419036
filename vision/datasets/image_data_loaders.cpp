#include "vision/datasets/image_data_loaders.h"

#include <algorithm>
#include <filesystem>

#include "core/error.h"
#include "core/spec_text.h"

namespace fastcpp::vision {
namespace fs = std::filesystem;

namespace {

template <class Options>  // FactoryOptions, FromFolderOptions
LoadOptions load_options(const Options& o) {
  return {.bs = o.bs, .workers = o.workers, .seed = o.seed, .decode = o.decode, .val_bs = o.val_bs};
}

// The DataBlock of every factory but from_folder: images of o.channels, a random split.
template <class Item>
DataBlock<Item> block_of(const FactoryOptions& o, TargetBlock y_block) {
  DataBlock<Item> block;
  block.blocks = {ImageBlock{o.channels}, std::move(y_block)};
  block.splitter = RandomSplitter{o.valid_pct, o.seed};
  block.item_tfms = o.item_tfms;
  block.batch_tfms = o.batch_tfms;
  block.aug_tfms = o.aug_tfms;
  return block;
}

}  // namespace

DataLoaders ImageDataLoaders::from_folder(const std::string& root, FromFolderOptions o) {
  ImageFolderOptions train_options{o.channels, o.item_tfms, /*train=*/true, o.skip_bad, o.decode};
  ImageFolderOptions valid_options{o.channels, o.item_tfms, /*train=*/false, o.skip_bad, o.decode};
  std::shared_ptr<ImageFolder> train, valid;
  if (o.valid_pct > 0) {
    // fastai's: every image under root, however deep (root/train/<class>/ too), labelled by
    // its folder, the classes those of the training split.
    auto files = get_image_files(root);
    if (o.skip_bad) files = decodable_images(files, o.channels);
    const auto split = RandomSplitter{o.valid_pct, o.seed}.split(files.size());
    std::vector<std::string> vocab;
    for (auto i : split.train) vocab.push_back(parent_label(files[size_t(i)]));
    std::sort(vocab.begin(), vocab.end());
    vocab.erase(std::unique(vocab.begin(), vocab.end()), vocab.end());
    std::vector<int64_t> labels;
    for (const auto& file : files) {
      const auto name = parent_label(file);
      const auto at = std::lower_bound(vocab.begin(), vocab.end(), name);
      if (at == vocab.end() || *at != name)
        throw Error("from_folder: the class of validation image '" + file + "', '" + name +
                    "', has no training images (valid_pct " + spec_text::number(o.valid_pct) + ", seed " +
                    std::to_string(o.seed) + ")");
      labels.push_back(at - vocab.begin());
    }
    const ImageFolder all(files, std::move(labels), std::move(vocab), train_options);
    train = std::make_shared<ImageFolder>(all.subset(split.train));
    valid = std::make_shared<ImageFolder>(all.subset(split.valid).with_options(valid_options));
  } else {
    for (const auto& part : {o.train, o.valid})
      if (std::error_code ec; !fs::is_directory(fs::path(root) / part, ec))
        throw Error("from_folder: no folder '" + (fs::path(root) / part).string() + "' (valid_pct 0 reads root/" +
                    o.train + " and root/" + o.valid + "); for a root/<class>/* tree give .valid_pct = 0.2: a random " +
                    "20% validates");
    train = std::make_shared<ImageFolder>(ImageFolder::scan((fs::path(root) / o.train).string(), train_options));
    valid = std::make_shared<ImageFolder>(
        ImageFolder::scan((fs::path(root) / o.valid).string(), valid_options, train->vocab()));
  }
  if (train->size() == 0) throw Error("from_folder: no training images under '" + root + "'");
  return image_dataloaders({train, valid, train->vocab()}, o.batch_tfms, o.aug_tfms, load_options(o));
}

DataLoaders ImageDataLoaders::from_path_func(const std::vector<std::string>& fnames,
                                             const std::function<std::string(const std::string& path)>& label_func,
                                             FactoryOptions o) {
  auto block = block_of<std::string>(o, CategoryBlock{});
  block.get_y = label_func;
  return block.dataloaders(fnames, load_options(o));
}

DataLoaders ImageDataLoaders::from_name_func(const std::vector<std::string>& fnames,
                                             const std::function<std::string(const std::string& name)>& label_func,
                                             FactoryOptions options) {
  return from_path_func(
      fnames, [label_func](const std::string& path) { return label_func(fs::path(path).filename().string()); },
      std::move(options));
}

DataLoaders ImageDataLoaders::from_name_re(const std::vector<std::string>& fnames, const std::string& pattern,
                                           FactoryOptions options) {
  return from_path_func(fnames, RegexLabeller(pattern), std::move(options));  // it reads the file's name
}

DataLoaders ImageDataLoaders::from_lists(const std::vector<std::string>& fnames, const std::vector<std::string>& labels,
                                         FactoryOptions o, TargetBlock y_block) {
  if (fnames.size() != labels.size())
    throw Error("from_lists: " + std::to_string(fnames.size()) + " files but " + std::to_string(labels.size()) + " labels");
  // The items are positions in both lists.
  auto block = block_of<size_t>(o, std::move(y_block));
  block.get_x = [&fnames](size_t i) { return fnames[i]; };
  block.get_y = [&labels](size_t i) { return labels[i]; };
  std::vector<size_t> items(fnames.size());
  for (size_t i = 0; i < items.size(); ++i) items[i] = i;
  return block.dataloaders(items, load_options(o));
}

DataLoaders ImageDataLoaders::from_csv(const std::string& path, CsvColumns c, FactoryOptions o) {
  const auto table = read_csv((fs::path(path) / c.csv_fname).string(), c.csv);
  const auto folder = c.folder.empty() ? fs::path(path) : fs::path(path) / c.folder;
  // pandas reads a column of numbers as numbers, which fastai's vocab then sorts by value.
  auto block = block_of<CsvRow>(o, c.label_delim.empty() ? TargetBlock{CategoryBlock{.numbers_by_value = true}}
                                                          : TargetBlock{MultiCategoryBlock{c.label_delim}});
  block.get_x = ColReader(table, c.fn_col, (folder / "").string(), c.suff);
  block.get_y = ColReader(table, c.label_col);
  if (c.valid_col) block.splitter = ColSplitter(table, *c.valid_col);
  return block.dataloaders(table.rows, load_options(o));
}

}  // namespace fastcpp::vision
