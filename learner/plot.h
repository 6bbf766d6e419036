#pragma once
// A small line-plot writer: series as coloured polylines on axes with numeric tick
// labels, saved as PNG. Enough for loss curves and lr_find, with no plotting library.
#include <string>
#include <vector>

#include "formats/canvas.h"

namespace fastcpp {

constexpr Rgb kPlotBlue{31, 119, 180};
constexpr Rgb kPlotOrange{255, 127, 14};

struct PlotSeries {
  std::vector<double> x, y;
  Rgb color = kPlotBlue;
};

struct PlotOptions {
  bool log_x = false;
  int width = 640;
  int height = 400;
};

// Throws fastcpp::Error if the file cannot be written.
void write_line_plot(const std::string& path, const std::vector<PlotSeries>& series, PlotOptions options);

}  // namespace fastcpp
