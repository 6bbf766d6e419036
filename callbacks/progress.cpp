#include "callbacks/progress.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <iostream>
#include <sstream>
#include <utility>

#include "callbacks/lr_finder.h"
#include "learner/learner.h"
#include "learner/recorder.h"

namespace fastcpp {
namespace {

std::string table_row(const std::vector<std::string>& cells, const std::vector<std::string>& names) {
  std::ostringstream line;
  for (size_t i = 0; i < cells.size(); ++i) {
    const size_t width = std::max<size_t>(i < names.size() ? names[i].size() : 0, 10);
    line << cells[i] << std::string(width > cells[i].size() ? width - cells[i].size() : 0, ' ')
         << (i + 1 < cells.size() ? "  " : "");
  }
  return line.str();
}

// Clears the line of a bar drawn on it.
void clear_bar(bool& drawn) {
  if (drawn) std::cout << "\r\033[K" << std::flush;
  drawn = false;
}

}  // namespace

ProgressCallback::ProgressCallback(bool live) : live_(live) { order = 60; }
ProgressCallback::ProgressCallback() : ProgressCallback(::isatty(STDOUT_FILENO) != 0) {}

void ProgressCallback::before_fit() {
  auto& l = learn();
  if (live_ && !wrapped_logger_) {
    wrapped_logger_ = l.logger;
    l.logger = [drawn = drawn_, logger = l.logger](const std::string& line) {  // holds no pointer to this callback
      clear_bar(*drawn);
      if (logger) logger(line);
    };
  }
  if (!l.logging) return;
  const auto names = l.recorder->metric_names();
  l.logger(table_row(names, names));
}

void ProgressCallback::start_phase() {
  phase_start_ = std::chrono::steady_clock::now();
  last_draw_ = {};
  *drawn_ = false;
}

void ProgressCallback::after_batch() {
  if (live_ && learn().logging) draw(false);
}

void ProgressCallback::draw(bool force) {
  const auto now = std::chrono::steady_clock::now();
  if (!force && now - last_draw_ < std::chrono::milliseconds(100)) return;
  last_draw_ = now;
  auto& l = learn();
  const size_t done = l.iter + 1, total = std::max<size_t>(l.n_iter, 1);
  const double elapsed = std::chrono::duration<double>(now - phase_start_).count();
  const double rate = elapsed > 0 ? done / elapsed : 0;
  const double remaining = rate > 0 ? (total - done) / rate : 0;
  constexpr int kWidth = 30;
  const int filled = static_cast<int>(kWidth * done / total);
  std::ostringstream bar;
  bar << "\r\033[K" << (l.training ? "train " : "valid ") << "[" << std::string(filled, '#')
      << std::string(kWidth - filled, '.') << "] " << done << "/" << total << " ";
  char numbers[96];
  std::snprintf(numbers, sizeof numbers, "%.1fit/s %s<%s", rate, format_time(elapsed).c_str(),
                format_time(remaining).c_str());
  bar << numbers;
  // On a GPU the loss as of an earlier draw: drawing never waits for the device.
  if (const double loss = l.training ? l.recorder->smooth_loss_lagged() : std::nan(""); !std::isnan(loss)) {
    std::snprintf(numbers, sizeof numbers, " loss %.4f", loss);
    bar << numbers;
  }
  std::cout << bar.str() << std::flush;
  *drawn_ = true;
}

void ProgressCallback::end_phase() { clear_bar(*drawn_); }

void ProgressCallback::after_fit() {
  end_phase();  // a fit cancelled mid-phase leaves its bar
  if (wrapped_logger_) learn().logger = *std::exchange(wrapped_logger_, std::nullopt);
}

void ProgressCallback::after_epoch() {
  auto& l = learn();
  if (l.logging) l.logger(table_row(l.recorder->log, l.recorder->metric_names()));
}

void ShowGraph::before_fit() { run = !learn().get_cb<LRFinder>(); }

void ShowGraph::after_epoch() {
  if (learn().rank == 0) learn().recorder->plot_loss(path_, /*skip_start=*/0);
}

}  // namespace fastcpp
