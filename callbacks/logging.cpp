#include "callbacks/logging.h"

#include <cmath>
#include <filesystem>

#include "callbacks/lr_finder.h"
#include "core/error.h"
#include "core/spec_text.h"
#include "learner/learner.h"
#include "learner/recorder.h"

namespace fastcpp {
namespace {

std::string csv_line(const std::vector<std::string>& cells) {
  std::string line;
  for (size_t i = 0; i < cells.size(); ++i) line += (i ? "," : "") + cells[i];
  return line;
}

}  // namespace

CSVLogger::CSVLogger(std::string path, bool append) : path_(std::move(path)), append_(append) { order = 60; }

void CSVLogger::before_fit() {
  if (file_.is_open()) file_.close();  // left open by a fit that failed
  run = !learn().get_cb<LRFinder>();   // lr_find would truncate the history of the fits before
  if (!run || learn().rank != 0) return;  // one file for a distributed run
  const bool write_header = !append_ || !std::filesystem::exists(path_);
  file_.clear();
  file_.open(path_, append_ ? std::ios::app : std::ios::trunc);
  if (!file_) throw Error("CSVLogger: cannot open '" + path_ + "' for writing");
  if (write_header) file_ << csv_line(learn().recorder->metric_names()) << std::endl;
}

void CSVLogger::after_epoch() {
  if (!file_.is_open()) return;
  const auto& recorder = *learn().recorder;
  // The values in the shortest text that reads back exactly, as fastai's str(float) writes
  // them, not the table's six decimals; the rest (epoch, n/a, time) as the table prints it.
  auto cells = recorder.log;
  const auto& values = recorder.values.back();
  for (size_t i = 0; i < values.size() && i + 2 < cells.size(); ++i)
    if (std::isfinite(values[i])) cells[i + 1] = spec_text::number(values[i]);
  file_ << csv_line(cells) << std::endl;
}

}  // namespace fastcpp
