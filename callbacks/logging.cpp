#include "callbacks/logging.h"

#include <filesystem>

#include "core/error.h"
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
  const bool write_header = !append_ || !std::filesystem::exists(path_);
  file_.open(path_, append_ ? std::ios::app : std::ios::trunc);
  if (!file_) throw Error("CSVLogger: cannot open '" + path_ + "' for writing");
  if (write_header) file_ << csv_line(learn().recorder->metric_names()) << std::endl;
}

void CSVLogger::after_epoch() { file_ << csv_line(learn().recorder->log) << std::endl; }

}  // namespace fastcpp
