#include "learner/plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "formats/canvas.h"

namespace fastcpp {
namespace {

int text_width(const std::string& s) { return Canvas::text_width(s); }

std::string tick_label(double value, bool exponent) {
  char text[32];
  if (exponent)
    std::snprintf(text, sizeof text, "%.0e", value);
  else
    std::snprintf(text, sizeof text, std::abs(value) >= 1000 ? "%.0f" : "%.3g", value);
  return text;
}

}  // namespace

void write_line_plot(const std::string& path, const std::vector<PlotSeries>& series, PlotOptions options) {
  const int left = 70, right = 40, top = 20, bottom = 40;
  Canvas canvas(options.width, options.height);
  auto tx = [&](double x) { return options.log_x ? std::log10(x) : x; };

  double x_min = std::numeric_limits<double>::infinity(), x_max = -x_min, y_min = x_min, y_max = -x_min;
  for (const auto& s : series)
    for (size_t i = 0; i < s.x.size() && i < s.y.size(); ++i) {
      if (!std::isfinite(s.y[i]) || (options.log_x && s.x[i] <= 0)) continue;
      x_min = std::min(x_min, tx(s.x[i]));
      x_max = std::max(x_max, tx(s.x[i]));
      y_min = std::min(y_min, s.y[i]);
      y_max = std::max(y_max, s.y[i]);
    }
  if (!std::isfinite(x_min)) x_min = 0, x_max = 1, y_min = 0, y_max = 1;
  if (x_max == x_min) x_max = x_min + 1;
  if (y_max == y_min) y_max = y_min + 1;

  const double plot_w = options.width - left - right, plot_h = options.height - top - bottom;
  auto px = [&](double x) { return left + (x - x_min) / (x_max - x_min) * plot_w; };
  auto py = [&](double y) { return top + (1 - (y - y_min) / (y_max - y_min)) * plot_h; };

  const Rgb axis{0, 0, 0}, grid{225, 225, 225};
  for (int i = 0; i <= 4; ++i) {
    const double y = y_min + (y_max - y_min) * i / 4, x = x_min + (x_max - x_min) * i / 4;
    canvas.line(left, py(y), left + plot_w, py(y), grid);
    canvas.line(px(x), top, px(x), top + plot_h, grid);
    const auto y_label = tick_label(y, false);
    canvas.text(left - 8 - text_width(y_label), static_cast<int>(py(y)) - 5, y_label, axis);
    const auto x_label = tick_label(options.log_x ? std::pow(10, x) : x, options.log_x);
    canvas.text(static_cast<int>(px(x)) - text_width(x_label) / 2, top + static_cast<int>(plot_h) + 10, x_label, axis);
  }
  canvas.line(left, top, left, top + plot_h, axis);
  canvas.line(left, top + plot_h, left + plot_w, top + plot_h, axis);

  for (const auto& s : series) {
    bool have_previous = false;
    double previous_x = 0, previous_y = 0;
    for (size_t i = 0; i < s.x.size() && i < s.y.size(); ++i) {
      if (!std::isfinite(s.y[i]) || (options.log_x && s.x[i] <= 0)) continue;
      const double x = px(tx(s.x[i])), y = py(s.y[i]);
      if (have_previous) canvas.line(previous_x, previous_y, x, y, s.color);
      if (s.x.size() < 30)  // few points (per-epoch values): mark each
        for (int d = -2; d <= 2; ++d) canvas.line(x - 2, y + d, x + 2, y + d, s.color);
      previous_x = x, previous_y = y, have_previous = true;
    }
  }

  canvas.save_png(path);
}

}  // namespace fastcpp
