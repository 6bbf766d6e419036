#include "vision/augment.h"

#include <torch/torch.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <string>

#include "core/error.h"
#include "core/spec_text.h"
#include "data/random.h"
#include "vision/lighting.h"

namespace fastcpp::vision {
namespace {

using Mat3 = std::array<std::array<double, 3>, 3>;

constexpr Mat3 kIdentity{{{1, 0, 0}, {0, 1, 0}, {0, 0, 1}}};

Mat3 operator*(const Mat3& a, const Mat3& b) {
  Mat3 c{};
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 3; ++k) c[i][j] += a[i][k] * b[k][j];
  return c;
}

// fastai's dihedral_mat: index 1 is the left-right flip (flip_mat).
Mat3 dihedral_mat(int index) {
  static constexpr int xs[] = {1, -1, 1, -1, -1, 1, 1, -1}, ys[] = {1, 1, -1, 1, -1, -1, 1, -1};
  static constexpr int m0[] = {1, 1, 1, 0, 1, 0, 0, 0}, m1[] = {0, 0, 0, 1, 0, 1, 1, 1};
  const int i = index;
  return {{{double(xs[i] * m0[i]), double(xs[i] * m1[i]), 0}, {double(ys[i] * m1[i]), double(ys[i] * m0[i]), 0}, {0, 0, 1}}};
}

Mat3 rotate_mat(double degrees) {
  const double t = degrees * M_PI / 180, c = std::cos(t), s = std::sin(t);
  return {{{c, s, 0}, {-s, c, 0}, {0, 0, 1}}};
}

Mat3 zoom_mat(double zoom, double col, double row) {
  const double s = 1 / zoom;
  return {{{s, 0, (1 - s) * (2 * col - 1)}, {0, s, (1 - s) * (2 * row - 1)}, {0, 0, 1}}};
}

// Solves a x = b (8 unknowns) by Gaussian elimination with partial pivoting.
std::array<double, 8> solve8(std::array<std::array<double, 9>, 8> a) {
  for (int col = 0; col < 8; ++col) {
    int pivot = col;
    for (int r = col + 1; r < 8; ++r)
      if (std::abs(a[r][col]) > std::abs(a[pivot][col])) pivot = r;
    std::swap(a[col], a[pivot]);
    for (int r = 0; r < 8; ++r) {
      if (r == col) continue;
      const double f = a[r][col] / a[col][col];
      for (int k = col; k < 9; ++k) a[r][k] -= f * a[col][k];
    }
  }
  std::array<double, 8> x{};
  for (int i = 0; i < 8; ++i) x[i] = a[i][8] / a[i][i];
  return x;
}

// fastai's warp: the homography taking the corners moved by (x, y) back to the corners
// (find_coeffs(orig, targ)), which maps each output coordinate to where it samples.
Mat3 warp_mat(double x, double y) {
  const double orig[4][2] = {{-1, -1}, {-1, 1}, {1, -1}, {1, 1}};
  const double targ[4][2] = {{-1 - y, -1 - x}, {-1 + y, 1 + x}, {1 + y, -1 + x}, {1 - y, 1 - x}};
  std::array<std::array<double, 9>, 8> a{};
  for (int i = 0; i < 4; ++i) {
    const double px = orig[i][0], py = orig[i][1], qx = targ[i][0], qy = targ[i][1];
    a[2 * i] = {qx, qy, 1, 0, 0, 0, -px * qx, -px * qy, px};
    a[2 * i + 1] = {0, 0, 0, qx, qy, 1, -py * qx, -py * qy, py};
  }
  const auto c = solve8(a);
  return {{{c[0], c[1], c[2]}, {c[3], c[4], c[5]}, {c[6], c[7], 1}}};
}

// Where output pixel coordinates (normalized to [-1, 1]) sample the input: the warp
// after the affine part (flip, rotation, zoom, with fastai's aspect-ratio correction
// for an input of height h and width w).
Mat3 item_map(const AugDraw& d, double h, double w) {
  Mat3 affine = dihedral_mat(d.dihedral) * rotate_mat(d.rotate) * zoom_mat(d.zoom, d.zoom_col, d.zoom_row);
  affine[0][1] *= h / w;
  affine[1][0] *= w / h;
  if (d.warp_x == 0 && d.warp_y == 0) return affine;
  return warp_mat(d.warp_x, d.warp_y) * affine;
}

// Pixel coordinates (edges at whole numbers) along an axis of n pixels to the normalized
// coordinates grid_sample reads, and back.
template <typename T>  // a tensor or a double
T to_normalized(const T& v, int64_t n, bool align_corners) {
  if (n == 1) return v * 0;
  return align_corners ? (v - 0.5) * (2.0 / double(n - 1)) - 1 : v * (2.0 / double(n)) - 1;
}
torch::Tensor from_normalized(const torch::Tensor& u, int64_t n, bool align_corners) {
  return align_corners ? (u + 1) * (double(n - 1) / 2) + 0.5 : (u + 1) * (double(n) / 2);
}

// A square crop of an h x w image: its side and top-left pixel.
struct SquareCrop {
  int64_t side, top, left;
};

// The draw's crop; the centre square (fastai's validation crop) where `centre`.
SquareCrop square_crop(const AugDraw& d, int64_t h, int64_t w, bool centre) {
  const int64_t shorter = std::min(h, w);
  if (centre) return {shorter, (h - shorter) / 2, (w - shorter) / 2};
  const auto side = std::clamp<int64_t>(std::llround(std::sqrt(d.crop_area * double(h) * double(w))), 1, shorter);
  // A fraction in [0, 1) of the room left, rounded down: each place equally likely, as randint(0, room).
  const auto place = [](double fraction, int64_t room) {
    return std::clamp<int64_t>(static_cast<int64_t>(std::floor(fraction * double(room + 1))), 0, room);
  };
  return {side, place(d.crop_row, h - side), place(d.crop_col, w - side)};
}

// Output coordinates to those of the crop's region in an h x w image (normalized), as a
// resize of the region: its outer pixel centres (align_corners) or edges on the output's.
Mat3 crop_mat(const SquareCrop& crop, int64_t h, int64_t w, bool align_corners) {
  const auto axis = [&](int64_t start, int64_t n) -> std::pair<double, double> {  // scale, shift
    const double margin = align_corners ? 0.5 : 0;
    const double first = to_normalized(double(start) + margin, n, align_corners),
                 last = to_normalized(double(start + crop.side) - margin, n, align_corners);
    return {(last - first) / 2, (last + first) / 2};
  };
  const auto [sx, tx] = axis(crop.left, w);
  const auto [sy, ty] = axis(crop.top, h);
  return {{{sx, 0, tx}, {0, sy, ty}, {0, 0, 1}}};
}

Mat3 inverse(const Mat3& m) {
  const double det = m[0][0] * (m[1][1] * m[2][2] - m[1][2] * m[2][1]) - m[0][1] * (m[1][0] * m[2][2] - m[1][2] * m[2][0]) +
                     m[0][2] * (m[1][0] * m[2][1] - m[1][1] * m[2][0]);
  Mat3 r{};
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) {
      // cofactor of (j, i) over the determinant
      const int r0 = (j + 1) % 3, r1 = (j + 2) % 3, c0 = (i + 1) % 3, c1 = (i + 2) % 3;
      r[i][j] = (m[r0][c0] * m[r1][c1] - m[r0][c1] * m[r1][c0]) / det;
    }
  return r;
}

bool is_identity(const Mat3& m) {
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j)
      if (m[i][j] != kIdentity[i][j]) return false;
  return true;
}

// The normalized coordinates of n pixel centres along an axis, as affine_grid places them.
torch::Tensor axis_coords(int64_t n, bool align_corners, const torch::TensorOptions& options) {
  if (n == 1) return torch::zeros({1}, options);
  auto t = torch::arange(n, options.dtype(torch::kDouble));
  t = align_corners ? t * (2.0 / double(n - 1)) - 1 : (2 * t + 1) / double(n) - 1;
  return t.to(options.dtype());
}

// The extreme sampling coordinates over the batch (a projective map of a rectangle
// reaches them at its corners); fastai reads them from the grid to pre-shrink the images.
std::pair<double, double> coordinate_range(const std::vector<Mat3>& maps, double corner_x, double corner_y) {
  double low = std::numeric_limits<double>::infinity(), high = -low;
  for (const auto& m : maps)
    for (double x : {-corner_x, corner_x})
      for (double y : {-corner_y, corner_y}) {
        const double z = m[2][0] * x + m[2][1] * y + m[2][2];
        for (int r = 0; r < 2; ++r) {
          const double v = (m[r][0] * x + m[r][1] * y + m[r][2]) / z;
          low = std::min(low, v);
          high = std::max(high, v);
        }
      }
  return {low, high};
}

// The outermost pixel centre's normalized coordinate along an axis of n pixels.
double corner(int64_t n, bool align_corners) { return align_corners && n > 1 ? 1.0 : 1.0 - 1.0 / double(n); }

// Box targets [n, M, 5] (x1 y1 x2 y2 label, rows of label -1 padding) through each item's
// map: the output boxes bounding the moved corners, clipped to the output; a box (or crowd
// region) left without area becomes padding.
torch::Tensor move_boxes(const torch::Tensor& y, const std::vector<Mat3>& maps, int64_t h, int64_t w, int64_t out_h,
                         int64_t out_w, bool align_corners) {
  const int64_t n = y.size(0);
  // The maps take output coordinates to input ones: the boxes go the other way.
  auto inverses = torch::empty({n, 3, 3}, torch::kDouble);
  auto t = inverses.accessor<double, 3>();
  for (int64_t i = 0; i < n; ++i) {
    const auto inv = inverse(maps[size_t(i)]);
    for (int r = 0; r < 3; ++r)
      for (int c = 0; c < 3; ++c) t[i][r][c] = inv[size_t(r)][size_t(c)];
  }
  const auto boxes = y.narrow(2, 0, 4).to(torch::kDouble);
  const auto label = y.select(2, 4);
  const auto x1 = boxes.select(2, 0), y1 = boxes.select(2, 1), x2 = boxes.select(2, 2), y2 = boxes.select(2, 3);
  // the four corners [n, M, 4], normalized
  const auto cx = to_normalized(torch::stack({x1, x2, x1, x2}, 2), w, align_corners);
  const auto cy = to_normalized(torch::stack({y1, y1, y2, y2}, 2), h, align_corners);
  const auto k = inverses.to(y.device(), /*non_blocking=*/true).view({n, 1, 1, 3, 3});
  auto coordinate = [&](int r) {  // [n, M, 4]
    const auto row = k.select(3, r);  // [n, 1, 1, 3]
    return cx * row.select(3, 0) + cy * row.select(3, 1) + row.select(3, 2);
  };
  const auto z = coordinate(2);
  const auto ox = from_normalized(coordinate(0) / z, out_w, align_corners).clamp(0, double(out_w));
  const auto oy = from_normalized(coordinate(1) / z, out_h, align_corners).clamp(0, double(out_h));
  auto moved = torch::stack({std::get<0>(ox.min(2)), std::get<0>(oy.min(2)), std::get<0>(ox.max(2)), std::get<0>(oy.max(2))}, 2)
                   .to(y.scalar_type());
  const auto has_area = (moved.select(2, 2) > moved.select(2, 0)) & (moved.select(2, 3) > moved.select(2, 1));
  const auto kept = (label != -1) & has_area;
  return torch::where(kept.unsqueeze(2), torch::cat({moved, label.unsqueeze(2)}, 2), torch::full_like(y, -1));
}

torch::nn::functional::GridSampleFuncOptions::padding_mode_t padding(PadMode mode) {
  switch (mode) {
    case PadMode::Border: return torch::kBorder;
    case PadMode::Zeros: return torch::kZeros;
    default: return torch::kReflection;
  }
}

}  // namespace

AugTransforms::AugTransforms(AugOptions options) : options_(std::move(options)) {
  const auto& o = options_;
  auto check = [](bool ok, const std::string& what) {
    if (!ok) throw Error("aug_transforms: " + what);
  };
  check(o.min_zoom > 0 && o.min_zoom <= o.max_zoom,
        "min_zoom must be positive and at most max_zoom, got " + std::to_string(o.min_zoom) + " and " + std::to_string(o.max_zoom));
  check(o.max_lighting * o.mult >= 0 && o.max_lighting * o.mult < 1,
        "max_lighting (times mult) must be in [0, 1), got " + std::to_string(o.max_lighting * o.mult));
  check(o.max_rotate >= 0 && o.max_warp >= 0 && o.mult >= 0, "max_rotate, max_warp and mult must not be negative");
  // At 1 a warp can fold two corners onto one point: the perspective has no solution.
  check(o.max_warp * o.mult < 1, "max_warp (times mult) must be in [0, 1), got " + std::to_string(o.max_warp * o.mult));
  for (double p : {o.p_affine, o.p_lighting}) check(p >= 0 && p <= 1, "a probability must be in [0, 1], got " + std::to_string(p));
  if (o.size) check(o.size->first > 0 && o.size->second > 0, "size must be positive");
  check(o.min_scale > 0 && o.min_scale <= 1, "min_scale must be in (0, 1], got " + std::to_string(o.min_scale));
  check(o.size || o.min_scale == 1, "min_scale below 1 (a crop) needs a size to resize it to");
  check(o.size || !o.centre_square, "centre_square needs a size to resize the square to");
}

std::vector<AugDraw> AugTransforms::draw(size_t n, uint64_t seed) const {
  const auto& o = options_;
  const double rotate = o.max_rotate * o.mult, lighting = o.max_lighting * o.mult, warp = o.max_warp * o.mult;
  std::vector<AugDraw> draws(n);
  for (size_t k = 0; k < n; ++k) {
    if (o.batch && k > 0) {
      draws[k] = draws[0];
      continue;
    }
    Rng rng(mix_seed(seed, k));
    AugDraw& d = draws[k];
    if (o.do_flip && rng.bernoulli(0.5)) d.dihedral = o.flip_vert ? static_cast<int>(rng.integer(0, 7)) : 1;
    if (warp > 0) {
      if (rng.bernoulli(o.p_affine)) d.warp_x = rng.uniform(-warp, warp);
      if (rng.bernoulli(o.p_affine)) d.warp_y = rng.uniform(-warp, warp);
    }
    if (rotate > 0 && rng.bernoulli(o.p_affine)) d.rotate = rng.uniform(-rotate, rotate);
    if (o.min_zoom < 1 || o.max_zoom > 1) {
      if (rng.bernoulli(o.p_affine)) d.zoom = rng.uniform(o.min_zoom, o.max_zoom);
      d.zoom_col = rng.uniform();
      d.zoom_row = rng.uniform();
    }
    if (lighting > 0) {
      if (rng.bernoulli(o.p_lighting)) d.brightness = rng.uniform(0.5 * (1 - lighting), 0.5 * (1 + lighting));
      if (rng.bernoulli(o.p_lighting)) d.contrast = std::exp(rng.uniform(std::log(1 - lighting), -std::log(1 - lighting)));
    }
    if (o.min_scale < 1) {
      d.crop_area = rng.uniform(o.min_scale, 1);
      d.crop_row = rng.uniform();
      d.crop_col = rng.uniform();
    }
  }
  return draws;
}

Batch AugTransforms::apply(Batch batch, uint64_t seed) const {
  const auto n = static_cast<size_t>(batch.x.size(0));
  // A stream of its own, apart from the item transforms' (which use mix_seed(seed, k)).
  return apply_draws(std::move(batch), draw(n, mix_seed(seed, 0x6175676dULL)));
}

namespace {

AugOptions resize_only(std::pair<int64_t, int64_t> size, PadMode pad_mode, bool align_corners) {
  return {.do_flip = false, .max_rotate = 0, .max_zoom = 1, .max_lighting = 0, .max_warp = 0, .size = size,
          .pad_mode = pad_mode, .align_corners = align_corners};
}

}  // namespace

BatchAugmentPtr AugTransforms::validation() const {
  if (!options_.size) return nullptr;
  auto resize = resize_only(*options_.size, options_.pad_mode, options_.align_corners);
  resize.centre_square = options_.centre_square || options_.min_scale < 1;
  return std::make_shared<AugTransforms>(resize);
}

std::string AugTransforms::spec() const {
  const auto& o = options_;
  const bool resizes_only = o.size && !o.do_flip && !o.flip_vert && o.max_rotate == 0 && o.min_zoom == 1 &&
                            o.max_zoom == 1 && o.max_lighting == 0 && o.max_warp == 0 && o.min_scale == 1;
  if (!resizes_only) return "";
  return "AugResize " + std::to_string(o.size->first) + " " + std::to_string(o.size->second) + " " +
         pad_mode_name(o.pad_mode) + " " + (o.align_corners ? "1" : "0") + (o.centre_square ? " centre_square" : "");
}

void check_boxes_can_go_back(const std::vector<BatchAugmentPtr>& resizes, const std::string& who) {
  for (size_t i = 0; i < resizes.size(); ++i) {
    const auto* augment = dynamic_cast<const AugTransforms*>(resizes[i].get());
    if (!augment || augment->spec().empty())
      throw Error(who + ": validation batch augmentation " + std::to_string(i) +
                  (augment ? " ('aug_transforms')" : "") +
                  " is not a resize alone, so boxes cannot be mapped back to the image's pixels through it");
  }
}

torch::Tensor boxes_before_resizes(const std::vector<BatchAugmentPtr>& resizes, torch::Tensor boxes, int64_t height,
                                   int64_t width) {
  check_boxes_can_go_back(resizes, "boxes_before_resizes");
  std::vector<const AugTransforms*> augments;
  for (const auto& resize : resizes) augments.push_back(static_cast<const AugTransforms*>(resize.get()));
  // Each resize's input is the size before it, the first one's the item's.
  std::vector<std::pair<int64_t, int64_t>> inputs{{height, width}};
  for (const auto* augment : augments) inputs.push_back(augment->options().size.value_or(inputs.back()));
  for (size_t k = augments.size(); k-- > 0;)
    boxes = augments[k]->boxes_to_input(boxes, inputs[k].first, inputs[k].second);
  return boxes;
}

torch::Tensor AugTransforms::boxes_to_input(const torch::Tensor& boxes, int64_t height, int64_t width) const {
  if (spec().empty()) throw Error("AugTransforms::boxes_to_input: only a resize alone maps boxes back");
  using torch::indexing::Slice;
  const auto [out_h, out_w] = *options_.size;
  // The resize's map is the identity on grid_sample's normalized coordinates, or the centre square's crop.
  const auto crop = options_.centre_square ? crop_mat(square_crop({}, height, width, /*centre=*/true), height, width,
                                                      options_.align_corners)
                                           : kIdentity;
  const auto back = [&](const torch::Tensor& v, int64_t out, int64_t in, int axis) {
    const auto normalized = to_normalized(v.to(torch::kDouble), out, options_.align_corners) * crop[axis][axis] +
                            crop[axis][2];
    return from_normalized(normalized, in, options_.align_corners).clamp(0, double(in));
  };
  const auto x = back(boxes.index({Slice(), Slice(0, 4, 2)}), out_w, width, 0);
  const auto y = back(boxes.index({Slice(), Slice(1, 4, 2)}), out_h, height, 1);
  return torch::stack({x.select(1, 0), y.select(1, 0), x.select(1, 1), y.select(1, 1)}, 1).to(boxes.scalar_type());
}

BatchAugmentPtr batch_augment_from_spec(const std::string& spec) {
  const auto words = spec_text::words(spec);
  const bool centre_square = words.size() == 6 && words[5] == "centre_square";
  if ((words.size() == 5 || centre_square) && words[0] == "AugResize" && (words[4] == "0" || words[4] == "1")) {
    const auto height = spec_text::to_number(words[1]), width = spec_text::to_number(words[2]);
    const auto mode = pad_mode_named(words[3]);
    if (height && width && mode && *height >= 1 && *width >= 1 && *height == std::floor(*height) &&
        *width == std::floor(*width)) {
      auto resize = resize_only({int64_t(*height), int64_t(*width)}, *mode, words[4] == "1");
      resize.centre_square = centre_square;
      return aug_transforms(resize);
    }
  }
  throw Error("batch augmentation '" + spec +
              "' is not 'AugResize HEIGHT WIDTH reflection|border|zeros 0|1', optionally followed by 'centre_square'");
}

Batch AugTransforms::apply_draws(Batch batch, const std::vector<AugDraw>& draws) const {
  const auto& o = options_;
  if (batch.x.dim() != 4)
    throw Error("aug_transforms: expects images [batch, channels, height, width], got " + std::to_string(batch.x.dim()) +
                " dimensions");
  const int64_t n = batch.x.size(0), h = batch.x.size(2), w = batch.x.size(3);
  if (draws.size() != static_cast<size_t>(n))
    throw Error("aug_transforms: " + std::to_string(draws.size()) + " draws for a batch of " + std::to_string(n));
  const int64_t out_h = o.size ? o.size->first : h, out_w = o.size ? o.size->second : w;
  auto x = to_unit_float(batch.x);
  const bool masks = batch.y.defined() && batch.y.dim() == 3 && batch.y.size(1) == h && batch.y.size(2) == w;
  const bool boxes = !masks && batch.y.defined() && batch.y.dim() == 3 && batch.y.size(2) == 5;
  if (boxes && !batch.y.is_floating_point()) batch.y = batch.y.to(torch::kFloat);  // whole pixels move to fractions
  // Labels ([batch], or [batch, classes]) stay; anything else shaped like a picture would be left behind.
  if (batch.y.defined() && batch.y.dim() >= 3 && !masks && !boxes)
    throw Error("aug_transforms: cannot move targets " + c10::str(batch.y.sizes()) + " with images " +
                c10::str(batch.x.sizes()) + ": masks are [batch, height, width] of the images' height and width, "
                "boxes [batch, boxes, 5]");

  std::vector<Mat3> maps;
  bool moves = out_h != h || out_w != w;
  for (const auto& d : draws) {
    if (d.dihedral < 0 || d.dihedral > 7) throw Error("aug_transforms: a dihedral index must be in [0, 7], got " + std::to_string(d.dihedral));
    maps.push_back(item_map(d, double(h), double(w)));
    // fastai's crop comes after the moves: it samples the moved image (of the input's size).
    if (o.min_scale < 1 || o.centre_square)
      if (const auto crop = square_crop(d, h, w, o.centre_square); crop.side != h || crop.side != w)
        maps.back() = maps.back() * crop_mat(crop, h, w, o.align_corners);
    moves = moves || !is_identity(maps.back());
  }
  if (moves) {
    auto theta = torch::empty({n, 3, 3}, torch::kDouble);
    auto t = theta.accessor<double, 3>();
    for (int64_t i = 0; i < n; ++i)
      for (int r = 0; r < 3; ++r)
        for (int c = 0; c < 3; ++c) t[i][r][c] = maps[size_t(i)][size_t(r)][size_t(c)];
    const auto options = x.options();
    // Each output pixel centre (x, y, 1) through each item's map, then divided by its third coordinate.
    const auto ys = axis_coords(out_h, o.align_corners, options), xs = axis_coords(out_w, o.align_corners, options);
    // Elementwise, not a matrix product: BLAS's result bits depend on its threads and the
    // buffers' alignment, and a batch must be the same bits from any loader thread.
    const auto px = xs.repeat({out_h}).view({1, -1}), py = ys.repeat_interleave(out_w).view({1, -1});
    const auto m = theta.to(options.dtype()).to(x.device(), /*non_blocking=*/true);
    auto row = [&](int r) {  // [n, out_h * out_w]
      const auto coefficients = m.select(1, r);
      return px * coefficients.narrow(1, 0, 1) + py * coefficients.narrow(1, 1, 1) + coefficients.narrow(1, 2, 1);
    };
    const auto w_mapped = row(2);
    const auto grid = torch::stack({row(0) / w_mapped, row(1) / w_mapped}, 2).view({n, out_h, out_w, 2});

    namespace F = torch::nn::functional;
    auto images = x;
    // fastai's smoother shrinking: an image shrunk by more than twice what the map zooms
    // in is first reduced by area. fastai measures the shrink as min(height / output
    // width, width / 2) / 2 (it reads the grid's last two dimensions, [width, 2]): kept,
    // so that the outputs stay fastai's.
    const auto [low, high] = coordinate_range(maps, corner(out_w, o.align_corners), corner(out_h, o.align_corners));
    const double zoomed = 2 / (high - low);
    const double shrink = std::min(double(h) / double(out_w), double(w) / 2) / 2;
    if (shrink > 1 && shrink > zoomed)
      images = F::interpolate(images, F::InterpolateFuncOptions()
                                          .scale_factor(std::vector<double>{1 / shrink, 1 / shrink})
                                          .mode(torch::kArea)
                                          .recompute_scale_factor(true));
    x = F::grid_sample(images, grid,
                       F::GridSampleFuncOptions().mode(torch::kBilinear).padding_mode(padding(o.pad_mode)).align_corners(o.align_corners));
    if (masks) {  // less mask_fill, so that zeros padding leaves mask_fill (nearest: exact)
      const auto moved = F::grid_sample(batch.y.unsqueeze(1).to(x.scalar_type()) - o.mask_fill, grid,
                                        F::GridSampleFuncOptions().mode(torch::kNearest).padding_mode(padding(o.pad_mode)).align_corners(o.align_corners));
      batch.y = (moved.squeeze(1) + o.mask_fill).to(batch.y.scalar_type());
    }
    if (boxes) batch.y = move_boxes(batch.y, maps, h, w, out_h, out_w, o.align_corners);
  }
  if (o.max_lighting * o.mult > 0) {
    auto change = torch::empty({n, 2}, torch::kDouble);
    auto c = change.accessor<double, 2>();
    for (int64_t i = 0; i < n; ++i) {
      c[i][0] = clamped_logit(draws[size_t(i)].brightness);
      c[i][1] = draws[size_t(i)].contrast;
    }
    const auto on_device = change.to(x.scalar_type()).to(x.device(), /*non_blocking=*/true).view({n, 2, 1, 1});
    x = torch::sigmoid((clamped_logit(x) + on_device.narrow(1, 0, 1)) * on_device.narrow(1, 1, 1));
  }
  batch.x = x;
  return batch;
}

BatchAugmentPtr aug_transforms(AugOptions options) { return std::make_shared<AugTransforms>(std::move(options)); }

}  // namespace fastcpp::vision
