#include "learner/plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>

#include "core/error.h"
#include "formats/png.h"

namespace fastcpp {
namespace {

// 3x5 glyphs, one row of three bits per entry, top row first.
struct Glyph {
  char c;
  uint8_t rows[5];
};
constexpr Glyph kGlyphs[] = {
    {'0', {7, 5, 5, 5, 7}}, {'1', {2, 6, 2, 2, 7}}, {'2', {7, 1, 7, 4, 7}}, {'3', {7, 1, 7, 1, 7}},
    {'4', {5, 5, 7, 1, 1}}, {'5', {7, 4, 7, 1, 7}}, {'6', {7, 4, 7, 5, 7}}, {'7', {7, 1, 1, 1, 1}},
    {'8', {7, 5, 7, 5, 7}}, {'9', {7, 5, 7, 1, 7}}, {'.', {0, 0, 0, 0, 2}}, {'-', {0, 0, 7, 0, 0}},
    {'+', {0, 2, 7, 2, 0}}, {'e', {2, 5, 7, 4, 3}},
};
constexpr int kScale = 2;  // glyph pixels per font pixel

class Canvas {
 public:
  Canvas(int width, int height) : width_(width), height_(height), rgb_(size_t(width) * height * 3, 255) {}

  void set(int x, int y, Rgb color) {
    if (x < 0 || y < 0 || x >= width_ || y >= height_) return;
    auto* pixel = &rgb_[(size_t(y) * width_ + x) * 3];
    std::copy(color.begin(), color.end(), pixel);
  }

  void line(double x0, double y0, double x1, double y1, Rgb color) {
    const int steps = std::max(1, static_cast<int>(std::ceil(std::max(std::abs(x1 - x0), std::abs(y1 - y0)))));
    for (int i = 0; i <= steps; ++i) {
      const double t = static_cast<double>(i) / steps;
      const int x = static_cast<int>(std::lround(x0 + t * (x1 - x0)));
      const int y = static_cast<int>(std::lround(y0 + t * (y1 - y0)));
      set(x, y, color);
      set(x + 1, y, color);  // two pixels wide: readable when scaled down
    }
  }

  // Text with its top-left corner at (x, y); characters without a glyph are blanks.
  void text(int x, int y, const std::string& s, Rgb color) {
    for (char c : s) {
      for (const auto& glyph : kGlyphs)
        if (glyph.c == c)
          for (int row = 0; row < 5; ++row)
            for (int col = 0; col < 3; ++col)
              if (glyph.rows[row] & (4 >> col))
                for (int dy = 0; dy < kScale; ++dy)
                  for (int dx = 0; dx < kScale; ++dx) set(x + col * kScale + dx, y + row * kScale + dy, color);
      x += 4 * kScale;
    }
  }

  const std::vector<uint8_t>& rgb() const { return rgb_; }

 private:
  int width_, height_;
  std::vector<uint8_t> rgb_;
};

int text_width(const std::string& s) { return static_cast<int>(s.size()) * 4 * kScale; }

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

  const auto png = encode_png(canvas.rgb(), options.width, options.height);
  std::ofstream out(path, std::ios::binary);
  if (!out || !out.write(reinterpret_cast<const char*>(png.data()), static_cast<std::streamsize>(png.size())))
    throw Error("cannot write plot '" + path + "'");
}

}  // namespace fastcpp
