#include "callbacks/logging.h"

#include <cmath>
#include <fstream>

#include "callbacks/lr_finder.h"
#include "core/error.h"
#include "core/spec_text.h"
#include "learner/learner.h"
#include "learner/recorder.h"

namespace fastcpp {
namespace {

// A cell as RFC 4180 writes it: quoted where it holds a comma, a quote or a line break (a metric's own name may).
std::string csv_cell(const std::string& cell) {
  if (cell.find_first_of(",\"\r\n") == std::string::npos) return cell;
  std::string quoted = "\"";
  for (const char c : cell) quoted += c == '"' ? std::string("\"\"") : std::string(1, c);
  return quoted + "\"";
}

std::string csv_line(const std::vector<std::string>& cells) {
  std::string line;
  for (size_t i = 0; i < cells.size(); ++i) line += (i ? "," : "") + csv_cell(cells[i]);
  return line;
}

// The last header line of a history file (rows start with their epoch's number, headers with "epoch").
std::string last_header(const std::string& path) {
  std::ifstream in(path);
  std::string header;
  for (std::string line; std::getline(in, line);)
    if (line.rfind("epoch,", 0) == 0) header = line;
  return header;
}

}  // namespace

CSVLogger::CSVLogger(std::string path, bool append) : path_(std::move(path)), append_(append) { order = 60; }

void CSVLogger::before_fit() {
  if (file_.is_open()) file_.close();  // left open by a fit that failed
  run = !learn().get_cb<LRFinder>();   // lr_find would truncate the history of the fits before
  if (!run || learn().rank != 0) return;  // one file for a distributed run
  // Appended rows go under the last header where it names this fit's columns; under a new one otherwise.
  const auto header = csv_line(learn().recorder->metric_names());
  const bool write_header = !append_ || last_header(path_) != header;
  file_.clear();
  file_.open(path_, append_ ? std::ios::app : std::ios::trunc);
  if (!file_) throw Error("CSVLogger: cannot open '" + path_ + "' for writing");
  if (write_header) file_ << header << std::endl;
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
