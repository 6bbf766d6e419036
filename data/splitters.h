#pragma once
// Splitters: which items train and which validate, as fastai's. A splitter takes the
// items and gives their indices in two lists; a DataBlock calls it on the items its
// get_items found (vision/data_block.h).
//
//   RandomSplitter{.valid_pct = 0.2, .seed = 42}  fastai's exactly: the same permutation
//                                                 (torch.randperm after torch.manual_seed)
//                                                 and cut, so the same split for the same items
//   GrandparentSplitter{}                          .../train/<class>/x.jpg trains,
//                                                 .../valid/<class>/x.jpg validates
//   FuncSplitter{[](const std::string& path) { return is_valid(path); }}
//   IndexSplitter{{3, 7, 9}}                       these items validate
//   FileSplitter("valid.txt")                      the files named in valid.txt validate
//   ColSplitter(table, "is_valid")                 a CSV's True/False column (data/csv.h)
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "data/csv.h"

namespace fastcpp {

// Indices into the items, in the order fastai gives them.
struct Split {
  std::vector<int64_t> train;
  std::vector<int64_t> valid;
};

// Refuses an index outside the n items (a custom splitter's), naming `who` (the caller).
void check_split(const Split& split, size_t n, const std::string& who);

template <class Item>
using DataSplitter = std::function<Split(const std::vector<Item>&)>;  // (learner.h's Splitter splits a model)

// int(valid_pct * n) items validate: the first ones of a permutation drawn from seed.
struct RandomSplitter {
  double valid_pct = 0.2;
  uint64_t seed = 42;

  Split split(size_t n) const;
  template <class Item>
  Split operator()(const std::vector<Item>& items) const {
    return split(items.size());
  }
};

struct IndexSplitter {
  std::vector<int64_t> valid;

  Split split(size_t n) const;
  template <class Item>
  Split operator()(const std::vector<Item>& items) const {
    return split(items.size());
  }
};

// By the name of each path's grandparent folder; paths under neither are left out.
struct GrandparentSplitter {
  std::string train_name = "train";
  std::string valid_name = "valid";

  Split operator()(const std::vector<std::string>& paths) const;
};

// Items for which is_valid holds validate, the others train.
template <class IsValid>
struct FuncSplitter {
  IsValid is_valid;

  template <class Item>
  Split operator()(const std::vector<Item>& items) const {
    Split split;
    for (size_t i = 0; i < items.size(); ++i) (is_valid(items[i]) ? split.valid : split.train).push_back(int64_t(i));
    return split;
  }
};
template <class IsValid>
FuncSplitter(IsValid) -> FuncSplitter<IsValid>;

// Paths whose file name is a line of the file `fname` validate, as fastai's FileSplitter
// (a list that both sides of a comparison can read).
class FileSplitter {
 public:
  explicit FileSplitter(const std::string& fname);
  Split operator()(const std::vector<std::string>& paths) const;

 private:
  std::vector<std::string> names_;  // sorted
};

// Rows of `table` whose `column` reads True validate: True, TRUE, true, 1 or 1.0 (False,
// FALSE, false, 0 or 0.0 train; any other value, an empty one too, is an error naming the
// row). With `on` (fastai's on=), rows whose value is one of those validate, all others train.
class ColSplitter {
 public:
  explicit ColSplitter(const CsvTable& table, const Column& column = "is_valid", std::vector<std::string> on = {});
  Split operator()(const std::vector<CsvRow>& rows) const;

 private:
  std::string source_, name_;
  size_t column_;
  std::vector<std::string> on_;
  std::vector<size_t> lines_;  // the table's, for messages
};

}  // namespace fastcpp
