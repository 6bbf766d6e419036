#include "data/splitters.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "core/error.h"

namespace fastcpp {

void check_split(const Split& split, size_t n, const std::string& who) {
  for (const auto* indices : {&split.train, &split.valid})
    for (const auto i : *indices)
      if (i < 0 || static_cast<size_t>(i) >= n)
        throw Error(who + ": the splitter gave index " + std::to_string(i) + " for " + std::to_string(n) + " items");
}

Split RandomSplitter::split(size_t n) const {
  if (!(valid_pct >= 0 && valid_pct < 1))
    throw Error("RandomSplitter: valid_pct must be in [0, 1), got " + std::to_string(valid_pct));
  // torch.manual_seed(seed) then torch.randperm(n), as fastai: the same generator and kernel.
  auto generator = at::detail::createCPUGenerator(seed);
  const auto order = torch::randperm(static_cast<int64_t>(n), generator, torch::kLong);
  const auto* first = order.data_ptr<int64_t>();
  const auto cut = static_cast<size_t>(valid_pct * static_cast<double>(n));  // Python's int(): truncated
  return {{first + cut, first + n}, {first, first + cut}};
}

Split IndexSplitter::split(size_t n) const {
  std::vector<bool> is_valid(n);
  for (const auto i : valid) {
    if (i < 0 || static_cast<size_t>(i) >= n)
      throw Error("IndexSplitter: index " + std::to_string(i) + " is outside the " + std::to_string(n) + " items");
    is_valid[static_cast<size_t>(i)] = true;
  }
  Split split{{}, valid};
  for (size_t i = 0; i < n; ++i)
    if (!is_valid[i]) split.train.push_back(static_cast<int64_t>(i));
  return split;
}

Split GrandparentSplitter::operator()(const std::vector<std::string>& paths) const {
  Split split;
  for (size_t i = 0; i < paths.size(); ++i) {
    const auto grandparent = std::filesystem::path(paths[i]).parent_path().parent_path().filename().string();
    if (grandparent == train_name) split.train.push_back(static_cast<int64_t>(i));
    if (grandparent == valid_name) split.valid.push_back(static_cast<int64_t>(i));
  }
  return split;
}

FileSplitter::FileSplitter(const std::string& fname) {
  std::ifstream in(fname);
  if (!in) throw Error("FileSplitter: cannot read '" + fname + "'");
  for (std::string line; std::getline(in, line);) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (!line.empty()) names_.push_back(line);
  }
  std::sort(names_.begin(), names_.end());
}

Split FileSplitter::operator()(const std::vector<std::string>& paths) const {
  return FuncSplitter{[this](const std::string& path) {
    return std::binary_search(names_.begin(), names_.end(), std::filesystem::path(path).filename().string());
  }}(paths);
}

ColSplitter::ColSplitter(const CsvTable& table, const Column& column, std::vector<std::string> on)
    : source_(table.source), column_(table.column(column)), on_(std::move(on)), lines_(table.lines) {
  name_ = table.header[column_];
}

Split ColSplitter::operator()(const std::vector<CsvRow>& rows) const {
  // As pandas reads a bool column (spreadsheets write TRUE), an int or a float one.
  static const std::vector<std::string> truths{"True", "TRUE", "true", "1", "1.0"};
  static const std::vector<std::string> falsehoods{"False", "FALSE", "false", "0", "0.0"};
  const auto among = [](const std::vector<std::string>& values, const std::string& value) {
    return std::find(values.begin(), values.end(), value) != values.end();
  };
  Split split;
  for (size_t i = 0; i < rows.size(); ++i) {
    const auto& value = rows[i].at(column_);
    const bool valid = on_.empty() ? among(truths, value) : among(on_, value);
    if (!valid && on_.empty() && !among(falsehoods, value))
      throw Error("ColSplitter: row " + std::to_string(i) +
                  (i < lines_.size() ? " (line " + std::to_string(lines_[i]) + ")" : std::string()) + " of '" + source_ +
                  "' has '" + value + "' in column '" + name_ + "' (expected True or False, 1 or 0)");
    (valid ? split.valid : split.train).push_back(static_cast<int64_t>(i));
  }
  return split;
}

}  // namespace fastcpp
