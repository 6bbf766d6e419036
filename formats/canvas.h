#pragma once
// An RGB picture drawn without an image library: pixels, lines, pasted images and text
// in a 3x5 font (digits, letters shown upper case, a little punctuation), written as a
// PNG (plots, batch and result grids, on machines with or without OpenCV).
#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace fastcpp {

using Rgb = std::array<uint8_t, 3>;

class Canvas {
 public:
  Canvas(int width, int height, Rgb background = {255, 255, 255});

  void set(int x, int y, Rgb color);  // outside the canvas: nothing
  void line(double x0, double y0, double x1, double y1, Rgb color);  // two pixels wide
  // Text with its top-left corner at (x, y), each font pixel `scale` pixels square.
  void text(int x, int y, const std::string& s, Rgb color, int scale = 2);
  static int text_width(const std::string& s, int scale = 2) { return static_cast<int>(s.size()) * 4 * scale; }
  // RGB pixels (row-major, width*height*3 bytes) with their top-left corner at (x, y),
  // each pixel `scale` pixels square.
  void paste(int x, int y, const uint8_t* rgb, int width, int height, int scale = 1);

  const std::vector<uint8_t>& rgb() const { return rgb_; }
  // Written atomically; throws fastcpp::Error if it cannot be.
  void save_png(const std::string& path) const;

 private:
  int width_, height_;
  std::vector<uint8_t> rgb_;
};

}  // namespace fastcpp
