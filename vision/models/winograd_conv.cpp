#include "vision/models/winograd_conv.h"

#include <ATen/Parallel.h>
#include <ATen/autocast_mode.h>
#include <torch/torch.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <variant>
#include <vector>

#include "core/block_gemm.h"
#include "core/row_loop.h"

namespace fastcpp::vision {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

constexpr int64_t kOut = 4;  // output pixels along a tile's side
constexpr int64_t kIn = 6;   // input pixels along a tile's side: kOut + 3 - 1
constexpr int64_t kPositions = kIn * kIn;
constexpr int64_t kChunk = 32;  // channels a transform holds at once, in stack arrays that stay in L1
// Where the 36 matrix products beat oneDNN's direct convolution in every run of
// bench_cpu_kernels: 128 channels or more, and 256 tiles or more, as many as half the
// channels (the transformed kernels, 36 x in x out, are read for every tile). At 64 and 128
// tiles (8x8 maps at batch 16, 4x4 at batch 128) it won in some runs and lost in others.
constexpr int64_t kMinTiles = 256, kMinChannels = 128;

// A channels-last map [n, h, w, c] cut into tiles of 4x4 output pixels, row by row, image by
// image; the last row and column of tiles overhang a map whose sides are not multiples of 4.
struct Tiling {
  int64_t n, h, w, c, rows, cols;
  Tiling(int64_t n_, int64_t h_, int64_t w_, int64_t c_)
      : n(n_), h(h_), w(w_), c(c_), rows((h_ + kOut - 1) / kOut), cols((w_ + kOut - 1) / kOut) {}
  int64_t tiles() const { return n * rows * cols; }
  // The size x size pixels of tile t's image from `offset` pixels down and right of its top-left
  // output pixel (-1: the padding), nullptr where a pixel is outside the map.
  template <int64_t size, typename T>
  std::array<std::array<T*, size>, size> block(T* map, int64_t t, int64_t offset) const {
    const int64_t image = t / (rows * cols), top = t / cols % rows * kOut + offset, left = t % cols * kOut + offset;
    std::array<std::array<T*, size>, size> pixels;
    for (int64_t r = 0; r < size; ++r)
      for (int64_t s = 0; s < size; ++s) {
        const int64_t y = top + r, x = left + s;
        pixels[r][s] = y < 0 || y >= h || x < 0 || x >= w ? nullptr : map + ((image * h + y) * w + x) * c;
      }
    return pixels;
  }
};

// Where a tile's 36 transformed vectors of channels lie.
struct Positions {
  float* data;
  int64_t tile_stride, position_stride;
  float* at(int64_t t, int64_t p) const { return data + t * tile_stride + p * position_stride; }
};

// Tiles per task: enough floats to be worth a thread.
int64_t grain(int64_t channels) { return std::max<int64_t>(1, 4096 / (kPositions * channels)); }

// V = B'dB for the channels [c0, c0 + n) of tile t: d is the 6x6 input block whose top-left
// pixel is one up and one left of the tile's (the padding), zeros outside the map.
using InputBlock = std::array<std::array<const float*, kIn>, kIn>;
using OutputBlock = std::array<std::array<float*, kOut>, kOut>;
using GradientBlock = std::array<std::array<const float*, kOut>, kOut>;

FASTCPP_ROW_LOOP void transform_input(const InputBlock& d, int64_t t, int64_t c0, int64_t n, const Positions& v) {
  alignas(64) static const float zeros[kChunk] = {};
  alignas(64) float b[kIn][kIn][kChunk];  // B'd
  for (int64_t s = 0; s < kIn; ++s) {
    const float* column[kIn];
    for (int64_t r = 0; r < kIn; ++r) {
      column[r] = d[r][s] ? d[r][s] + c0 : zeros;
    }
    const float *__restrict p0 = column[0], *__restrict p1 = column[1], *__restrict p2 = column[2],
                *__restrict p3 = column[3], *__restrict p4 = column[4], *__restrict p5 = column[5];
    for (int64_t i = 0; i < n; ++i) {
      const float d0 = p0[i], d1 = p1[i], d2 = p2[i], d3 = p3[i], d4 = p4[i], d5 = p5[i];
      b[0][s][i] = 4 * d0 - 5 * d2 + d4;
      b[1][s][i] = d3 + d4 - 4 * (d1 + d2);
      b[2][s][i] = d4 - d3 + 4 * (d1 - d2);
      b[3][s][i] = d4 - d2 + 2 * (d3 - d1);
      b[4][s][i] = d4 - d2 + 2 * (d1 - d3);
      b[5][s][i] = 4 * d1 - 5 * d3 + d5;
    }
  }
  for (int64_t a = 0; a < kIn; ++a) {
    float* __restrict v0 = v.at(t, a * kIn + 0) + c0;
    float* __restrict v1 = v.at(t, a * kIn + 1) + c0;
    float* __restrict v2 = v.at(t, a * kIn + 2) + c0;
    float* __restrict v3 = v.at(t, a * kIn + 3) + c0;
    float* __restrict v4 = v.at(t, a * kIn + 4) + c0;
    float* __restrict v5 = v.at(t, a * kIn + 5) + c0;
    for (int64_t i = 0; i < n; ++i) {
      const float d0 = b[a][0][i], d1 = b[a][1][i], d2 = b[a][2][i], d3 = b[a][3][i], d4 = b[a][4][i],
                  d5 = b[a][5][i];
      v0[i] = 4 * d0 - 5 * d2 + d4;
      v1[i] = d3 + d4 - 4 * (d1 + d2);
      v2[i] = d4 - d3 + 4 * (d1 - d2);
      v3[i] = d4 - d2 + 2 * (d3 - d1);
      v4[i] = d4 - d2 + 2 * (d1 - d3);
      v5[i] = 4 * d1 - 5 * d3 + d5;
    }
  }
}

// y = A'MA (+ bias) for the channels [c0, c0 + n) of tile t; the pixels outside the map are
// not written.
FASTCPP_ROW_LOOP void transform_output(const Positions& m, const float* bias, int64_t t, int64_t c0, int64_t n,
                                const OutputBlock& y) {
  alignas(64) float a[kOut][kIn][kChunk];  // A'M
  for (int64_t s = 0; s < kIn; ++s) {
    const float* __restrict m0 = m.at(t, 0 * kIn + s) + c0;
    const float* __restrict m1 = m.at(t, 1 * kIn + s) + c0;
    const float* __restrict m2 = m.at(t, 2 * kIn + s) + c0;
    const float* __restrict m3 = m.at(t, 3 * kIn + s) + c0;
    const float* __restrict m4 = m.at(t, 4 * kIn + s) + c0;
    const float* __restrict m5 = m.at(t, 5 * kIn + s) + c0;
    for (int64_t i = 0; i < n; ++i) {
      a[0][s][i] = m0[i] + m1[i] + m2[i] + m3[i] + m4[i];
      a[1][s][i] = m1[i] - m2[i] + 2 * (m3[i] - m4[i]);
      a[2][s][i] = m1[i] + m2[i] + 4 * (m3[i] + m4[i]);
      a[3][s][i] = m1[i] - m2[i] + 8 * (m3[i] - m4[i]) + m5[i];
    }
  }
  alignas(64) float row[kOut][kChunk];
  for (int64_t k = 0; k < kOut; ++k) {
    for (int64_t i = 0; i < n; ++i) {
      const float m0 = a[k][0][i], m1 = a[k][1][i], m2 = a[k][2][i], m3 = a[k][3][i], m4 = a[k][4][i],
                  m5 = a[k][5][i], b = bias ? bias[c0 + i] : 0.0f;
      row[0][i] = m0 + m1 + m2 + m3 + m4 + b;
      row[1][i] = m1 - m2 + 2 * (m3 - m4) + b;
      row[2][i] = m1 + m2 + 4 * (m3 + m4) + b;
      row[3][i] = m1 - m2 + 8 * (m3 - m4) + m5 + b;
    }
    for (int64_t l = 0; l < kOut; ++l)
      if (y[k][l]) std::memcpy(y[k][l] + c0, row[l], n * sizeof(float));
  }
}

// dM = A dy A' for the channels [c0, c0 + n) of tile t: the transpose of transform_output,
// the gradient of the 36 products from the tile's 4x4 output gradient (zeros outside the map).
FASTCPP_ROW_LOOP void transform_output_gradient(const GradientBlock& dy, int64_t t, int64_t c0, int64_t n,
                                         const Positions& dm) {
  alignas(64) float d[kOut][kOut][kChunk];
  alignas(64) float a[kIn][kOut][kChunk];  // A dy
  for (int64_t k = 0; k < kOut; ++k)
    for (int64_t l = 0; l < kOut; ++l) {
      if (dy[k][l]) std::memcpy(d[k][l], dy[k][l] + c0, n * sizeof(float));
      else std::memset(d[k][l], 0, n * sizeof(float));
    }
  for (int64_t l = 0; l < kOut; ++l)
    for (int64_t i = 0; i < n; ++i) {
      const float y0 = d[0][l][i], y1 = d[1][l][i], y2 = d[2][l][i], y3 = d[3][l][i];
      a[0][l][i] = y0;
      a[1][l][i] = y0 + y1 + y2 + y3;
      a[2][l][i] = y0 - y1 + y2 - y3;
      a[3][l][i] = y0 + 2 * y1 + 4 * y2 + 8 * y3;
      a[4][l][i] = y0 - 2 * y1 + 4 * y2 - 8 * y3;
      a[5][l][i] = y3;
    }
  for (int64_t r = 0; r < kIn; ++r) {
    float* __restrict o0 = dm.at(t, r * kIn + 0) + c0;
    float* __restrict o1 = dm.at(t, r * kIn + 1) + c0;
    float* __restrict o2 = dm.at(t, r * kIn + 2) + c0;
    float* __restrict o3 = dm.at(t, r * kIn + 3) + c0;
    float* __restrict o4 = dm.at(t, r * kIn + 4) + c0;
    float* __restrict o5 = dm.at(t, r * kIn + 5) + c0;
    for (int64_t i = 0; i < n; ++i) {
      const float y0 = a[r][0][i], y1 = a[r][1][i], y2 = a[r][2][i], y3 = a[r][3][i];
      o0[i] = y0;
      o1[i] = y0 + y1 + y2 + y3;
      o2[i] = y0 - y1 + y2 - y3;
      o3[i] = y0 + 2 * y1 + 4 * y2 + 8 * y3;
      o4[i] = y0 - 2 * y1 + 4 * y2 - 8 * y3;
      o5[i] = y3;
    }
  }
}

// Runs per_chunk(t, c0, n) over every tile t and chunk [c0, c0 + n) of the channels, tiles
// split between the threads; block(t) is what per_chunk needs of the tile's pixels.
template <typename Block, typename PerChunk>
void for_tiles(int64_t tiles, int64_t channels, const Block& block, const PerChunk& per_chunk) {
  at::parallel_for(0, tiles, grain(channels), [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const auto pixels = block(t);
      for (int64_t c0 = 0; c0 < channels; c0 += kChunk) per_chunk(pixels, t, c0, std::min(kChunk, channels - c0));
    }
  });
}

// G (x) G: the 3x3 kernel, as 9 taps, to the 6x6 one the 36 positions multiply by (U = GgG').
const torch::Tensor& kernel_transform() {
  static const torch::Tensor gg = [] {
    const auto g = torch::tensor({1.0 / 4, 0.0, 0.0,
                                  -1.0 / 6, -1.0 / 6, -1.0 / 6,
                                  -1.0 / 6, 1.0 / 6, -1.0 / 6,
                                  1.0 / 24, 1.0 / 12, 1.0 / 6,
                                  1.0 / 24, -1.0 / 12, 1.0 / 6,
                                  0.0, 0.0, 1.0},
                                 torch::kDouble)
                       .view({kIn, 3});
    return torch::kron(g, g).to(torch::kFloat);
  }();
  return gg;
}

// U as 36 matrices [k, n] for V[p] U[p]: U[p][i][o] from weight[o][i] (k = in channels,
// n = out), or with `turned`, from the kernel turned 180 degrees with its channels swapped
// (the input gradient's convolution): U[p][o][i] from weight[o][i][2 - r][2 - s].
torch::Tensor transform_kernel(const torch::Tensor& weight, bool turned) {
  const auto taps = turned ? weight.flip({2, 3}).permute({2, 3, 0, 1}) : weight.permute({2, 3, 1, 0});
  return torch::mm(kernel_transform(), taps.reshape({9, -1})).view({kPositions, taps.size(2), taps.size(3)});
}

// The weight's gradient (G (x) G)' dU from the 36 positions' dU [36, o, i], in the weight's layout.
torch::Tensor kernel_gradient(const torch::Tensor& du, const torch::Tensor& weight) {
  return torch::mm(kernel_transform().t(), du.view({kPositions, -1}))
      .view({3, 3, du.size(1), du.size(2)})
      .permute({2, 3, 0, 1})
      .contiguous(weight.suggest_memory_format());
}

// The transforms' buffers: kept per thread (the largest so far) rather than allocated per
// call, where the first writes to a fresh buffer's pages cost as much as the transform.
enum Buffer { kInputs, kProducts, kProductGradients, kBuffers };
torch::Tensor workspace(Buffer slot, const std::vector<int64_t>& shape) {
  thread_local torch::Tensor kept[kBuffers];
  int64_t numel = 1;
  for (auto s : shape) numel *= s;
  if (!kept[slot].defined() || kept[slot].numel() < numel) kept[slot] = torch::empty({numel});
  return kept[slot].narrow(0, 0, numel).view(shape);
}

// The 36 input transforms V [tiles, 36, c] of a channels-last map.
torch::Tensor transform_map(const torch::Tensor& x, const Tiling& g) {
  auto v = workspace(kInputs, {g.tiles(), kPositions, g.c});
  const Positions pv{v.data_ptr<float>(), kPositions * g.c, g.c};
  const float* in = x.const_data_ptr<float>();
  for_tiles(
      g.tiles(), g.c, [&](int64_t t) { return g.block<kIn>(in, t, -1); },
      [&](const InputBlock& d, int64_t t, int64_t c0, int64_t n) { transform_input(d, t, c0, n, pv); });
  return v;
}

// out[p] = a[p] b[p] for the 36 positions: a [36, m, k] in any strides, b [36, k, n] with
// its rows contiguous (every caller's), out [36, m, n] contiguous. Positions split between
// the threads.
void multiply_positions(const torch::Tensor& a, const torch::Tensor& b, torch::Tensor& out) {
  if (!block_gemm_available()) {
    torch::bmm_out(out, a, b);
    return;
  }
  const int64_t m = a.size(1), k = a.size(2), n = b.size(2);
  const float* pa = a.const_data_ptr<float>();
  const float* pb = b.const_data_ptr<float>();
  float* po = out.data_ptr<float>();
  at::parallel_for(0, kPositions, 1, [&](int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; ++p)
      block_gemm({pa + p * a.stride(0), a.stride(1), a.stride(2)}, pb + p * b.stride(0), b.stride(1),
                 po + p * m * n, n, m, k, n);
  });
}

// The convolution of a channels-last map x by the transformed kernel u [36, c, o] (+ bias).
torch::Tensor convolve(const torch::Tensor& x, const torch::Tensor& u, const torch::Tensor& bias) {
  const Tiling in(x.size(0), x.size(2), x.size(3), x.size(1));
  const int64_t o = u.size(2);
  auto m = workspace(kProducts, {kPositions, in.tiles(), o});
  multiply_positions(transform_map(x, in).transpose(0, 1), u, m);
  auto y = torch::empty({in.n, o, in.h, in.w}, x.options().memory_format(torch::MemoryFormat::ChannelsLast));
  const Tiling out(in.n, in.h, in.w, o);
  const Positions pm{m.data_ptr<float>(), o, in.tiles() * o};
  const float* b = bias.defined() ? bias.const_data_ptr<float>() : nullptr;
  float* py = y.data_ptr<float>();
  for_tiles(
      out.tiles(), o, [&](int64_t t) { return out.block<kOut>(py, t, 0); },
      [&](const OutputBlock& y, int64_t t, int64_t c0, int64_t n) { transform_output(pm, b, t, c0, n, y); });
  return y;
}

// The gradients where the backward pass records a graph of its own (create_graph: a second
// derivative, as a gradient penalty takes): through torch's convolution, which has one.
variable_list differentiable_backward(AutogradContext* ctx, const variable_list& saved, const torch::Tensor& dy) {
  const auto &x = saved[0], &weight = saved[1], &bias = saved[2];
  const auto y = torch::conv2d(x, weight, bias.numel() ? bias : torch::Tensor(), 1, 1);
  std::vector<torch::Tensor> wanted;
  for (size_t i = 0; i < saved.size(); ++i)
    if (ctx->needs_input_grad(i)) wanted.push_back(saved[i]);
  const auto grads = torch::autograd::grad({y}, wanted, {dy}, /*retain_graph=*/true, /*create_graph=*/true);
  variable_list out(3);
  for (size_t i = 0, next = 0; i < saved.size(); ++i)
    if (ctx->needs_input_grad(i)) out[i] = grads[next++];
  return out;
}

struct WinogradConv : torch::autograd::Function<WinogradConv> {
  // bias: a 0-element tensor where the convolution has none.
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& weight,
                               const torch::Tensor& bias) {
    ctx->save_for_backward({x, weight, bias});
    return convolve(x, transform_kernel(weight, false), bias.numel() ? bias : torch::Tensor());
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    variable_list out(3);
    if (!grads[0].defined()) return out;
    const auto saved = ctx->get_saved_variables();
    const auto &x = saved[0], &weight = saved[1], &bias = saved[2];
    if (torch::GradMode::is_enabled()) return differentiable_backward(ctx, saved, grads[0]);
    const auto dy = grads[0].contiguous(torch::MemoryFormat::ChannelsLast);
    if (ctx->needs_input_grad(0))  // the transposed convolution: the kernel turned and its channels swapped
      out[0] = convolve(dy, transform_kernel(weight, true), torch::Tensor());
    if (ctx->needs_input_grad(1)) {
      const Tiling g(x.size(0), x.size(2), x.size(3), weight.size(0));
      auto dm = workspace(kProductGradients, {kPositions, g.tiles(), g.c});
      const Positions pdm{dm.data_ptr<float>(), g.c, g.tiles() * g.c};
      const float* pdy = dy.const_data_ptr<float>();
      for_tiles(
          g.tiles(), g.c, [&](int64_t t) { return g.block<kOut>(pdy, t, 0); },
          [&](const GradientBlock& d, int64_t t, int64_t c0, int64_t n) {
            transform_output_gradient(d, t, c0, n, pdm);
          });
      const auto v = transform_map(x, Tiling(x.size(0), x.size(2), x.size(3), x.size(1)));
      auto du = torch::empty({kPositions, g.c, x.size(1)}, x.options());  // [36, o, c]
      multiply_positions(dm.transpose(1, 2), v.transpose(0, 1), du);
      out[1] = kernel_gradient(du, weight);
    }
    if (bias.numel() && ctx->needs_input_grad(2)) out[2] = dy.sum({0, 2, 3});
    return out;
  }
};

}  // namespace

bool winograd_applies(const torch::nn::Conv2dImpl& conv, const torch::Tensor& x) {
  const auto& o = conv.options;
  const auto* padding = std::get_if<torch::ExpandingArray<2>>(&o.padding());
  const auto& weight = conv.weight;
  const int64_t tiles = x.dim() == 4 ? Tiling(x.size(0), x.size(2), x.size(3), x.size(1)).tiles() : 0;
  return padding && (**padding)[0] == 1 && (**padding)[1] == 1 && (*o.stride())[0] == 1 && (*o.stride())[1] == 1 &&
         (*o.kernel_size())[0] == 3 && (*o.kernel_size())[1] == 3 && o.groups() == 1 && (*o.dilation())[0] == 1 &&
         (*o.dilation())[1] == 1 && std::holds_alternative<torch::enumtype::kZeros>(o.padding_mode()) &&
         x.dim() == 4 && x.size(1) == weight.size(1) && x.size(1) >= kMinChannels && weight.size(0) >= kMinChannels &&
         tiles >= kMinTiles && 2 * tiles >= std::max(x.size(1), weight.size(0)) && x.size(2) >= kOut &&
         x.size(3) >= kOut &&
         x.device().is_cpu() && x.scalar_type() == torch::kFloat && weight.scalar_type() == torch::kFloat &&
         x.is_contiguous(torch::MemoryFormat::ChannelsLast) && !at::autocast::is_autocast_enabled(at::kCPU);
}

torch::Tensor winograd_conv2d(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias) {
  return WinogradConv::apply(x.contiguous(torch::MemoryFormat::ChannelsLast), weight,
                             bias.defined() ? bias : torch::empty({0}, weight.options()));
}

}  // namespace fastcpp::vision
