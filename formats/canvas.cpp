#include "formats/canvas.h"

#include <algorithm>
#include <cctype>
#include <cmath>

#include "formats/file_io.h"
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
    {'+', {0, 2, 7, 2, 0}}, {'/', {1, 1, 2, 4, 4}}, {':', {0, 2, 0, 2, 0}},
    {';', {0, 2, 0, 2, 4}}, {',', {0, 0, 0, 2, 4}},
    {'_', {0, 0, 0, 0, 7}}, {'(', {1, 2, 2, 2, 1}}, {')', {4, 2, 2, 2, 4}}, {'%', {5, 1, 2, 4, 5}},
    {'A', {2, 5, 7, 5, 5}}, {'B', {6, 5, 6, 5, 6}}, {'C', {3, 4, 4, 4, 3}}, {'D', {6, 5, 5, 5, 6}},
    {'E', {7, 4, 6, 4, 7}}, {'F', {7, 4, 6, 4, 4}}, {'G', {3, 4, 5, 5, 3}}, {'H', {5, 5, 7, 5, 5}},
    {'I', {7, 2, 2, 2, 7}}, {'J', {1, 1, 1, 5, 2}}, {'K', {5, 5, 6, 5, 5}}, {'L', {4, 4, 4, 4, 7}},
    {'M', {5, 7, 7, 5, 5}}, {'N', {6, 5, 5, 5, 5}}, {'O', {2, 5, 5, 5, 2}}, {'P', {6, 5, 6, 4, 4}},
    {'Q', {2, 5, 5, 6, 3}}, {'R', {6, 5, 6, 5, 5}}, {'S', {3, 4, 2, 1, 6}}, {'T', {7, 2, 2, 2, 2}},
    {'U', {5, 5, 5, 5, 7}}, {'V', {5, 5, 5, 5, 2}}, {'W', {5, 5, 7, 7, 5}}, {'X', {5, 5, 2, 5, 5}},
    {'Y', {5, 5, 2, 2, 2}}, {'Z', {7, 1, 2, 4, 7}},
};

const Glyph* glyph_of(char c) {
  const char wanted = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));  // letters upper case
  for (const auto& glyph : kGlyphs)
    if (glyph.c == wanted) return &glyph;
  return nullptr;  // a blank
}

}  // namespace

Canvas::Canvas(int width, int height, Rgb background)
    : width_(width), height_(height), rgb_(static_cast<size_t>(width) * height * 3) {
  for (size_t i = 0; i < rgb_.size(); i += 3) std::copy(background.begin(), background.end(), rgb_.begin() + i);
}

void Canvas::set(int x, int y, Rgb color) {
  if (x < 0 || y < 0 || x >= width_ || y >= height_) return;
  std::copy(color.begin(), color.end(), rgb_.begin() + (static_cast<size_t>(y) * width_ + x) * 3);
}

void Canvas::line(double x0, double y0, double x1, double y1, Rgb color) {
  const int steps = std::max(1, static_cast<int>(std::ceil(std::max(std::abs(x1 - x0), std::abs(y1 - y0)))));
  for (int i = 0; i <= steps; ++i) {
    const double t = static_cast<double>(i) / steps;
    const int x = static_cast<int>(std::lround(x0 + t * (x1 - x0)));
    const int y = static_cast<int>(std::lround(y0 + t * (y1 - y0)));
    set(x, y, color);
    set(x + 1, y, color);  // two pixels wide: readable when scaled down
  }
}

void Canvas::text(int x, int y, const std::string& s, Rgb color, int scale) {
  for (char c : s) {
    if (const auto* glyph = glyph_of(c))
      for (int row = 0; row < 5; ++row)
        for (int col = 0; col < 3; ++col)
          if (glyph->rows[row] & (4 >> col))
            for (int dy = 0; dy < scale; ++dy)
              for (int dx = 0; dx < scale; ++dx) set(x + col * scale + dx, y + row * scale + dy, color);
    x += 4 * scale;
  }
}

void Canvas::paste(int x, int y, const uint8_t* rgb, int width, int height, int scale) {
  for (int row = 0; row < height * scale; ++row)
    for (int col = 0; col < width * scale; ++col) {
      const uint8_t* pixel = rgb + (static_cast<size_t>(row / scale) * width + col / scale) * 3;
      set(x + col, y + row, {pixel[0], pixel[1], pixel[2]});
    }
}

void Canvas::save_png(const std::string& path) const {
  const auto png = encode_png(rgb_, width_, height_);
  write_atomically(path, std::vector<char>(png.begin(), png.end()), "image");
}

}  // namespace fastcpp
