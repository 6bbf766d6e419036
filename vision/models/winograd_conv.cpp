#include "vision/models/winograd_conv.h"

#include <ATen/Parallel.h>
#include <ATen/autocast_mode.h>
#include <immintrin.h>
#include <torch/torch.h>

#include <algorithm>
#include <array>
#include <variant>
#include <vector>

#include "core/block_gemm.h"
#include "core/error.h"
#include "core/graph_backward.h"

namespace fastcpp::vision {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

constexpr int64_t kOut = 4;  // output pixels along a tile's side
constexpr int64_t kIn = 6;   // input pixels along a tile's side: kOut + 3 - 1
constexpr int64_t kPositions = kIn * kIn;
// Where this beat oneDNN's direct convolution in every run of bench_cpu_kernels: 64 input
// channels or more, 32 output channels or more, 64 tiles or more, and at least half as many
// tiles as channels (every block of tiles reads the transformed kernel, 36 x in x out: ResNet's
// 256 channels over 64 tiles lost in some runs, its 512 over 16 and 16 or 32 channels in all).
constexpr int64_t kMinTiles = 64, kMinInChannels = 64, kMinOutChannels = 32;

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

using InputBlock = std::array<std::array<const float*, kIn>, kIn>;
using OutputBlock = std::array<std::array<float*, kOut>, kOut>;
using GradientBlock = std::array<std::array<const float*, kOut>, kOut>;

// The tile transforms, 16 channels to an AVX-512 register, the last registers of a pixel
// masked. They are built for AVX-512 alone: the path runs only where block_gemm does.
#pragma GCC push_options
#pragma GCC target("avx512f")

using Lanes = __m512;

inline __mmask16 lanes_mask(int64_t channels) { return channels >= 16 ? 0xFFFF : (1u << channels) - 1; }

// The 16 channels from `c0` of a pixel (or the bias); zeros for nullptr: a pixel outside the
// map, no bias.
[[gnu::always_inline]] inline Lanes load(const float* pixel, int64_t c0, __mmask16 mask) {
  return pixel ? _mm512_maskz_loadu_ps(mask, pixel + c0) : _mm512_setzero_ps();
}

// The three 1-D transforms, applied along a tile's columns and then its rows.
// B'd: 6 input pixels to 6 positions.
[[gnu::always_inline]] inline void input_1d(const Lanes (&d)[kIn], Lanes (&v)[kIn]) {
  v[0] = 4.0f * d[0] - 5.0f * d[2] + d[4];
  v[1] = d[3] + d[4] - 4.0f * (d[1] + d[2]);
  v[2] = d[4] - d[3] + 4.0f * (d[1] - d[2]);
  v[3] = d[4] - d[2] + 2.0f * (d[3] - d[1]);
  v[4] = d[4] - d[2] + 2.0f * (d[1] - d[3]);
  v[5] = 4.0f * d[1] - 5.0f * d[3] + d[5];
}

// A'm: 6 positions to 4 output pixels.
[[gnu::always_inline]] inline void output_1d(const Lanes (&m)[kIn], Lanes (&y)[kOut]) {
  y[0] = m[0] + m[1] + m[2] + m[3] + m[4];
  y[1] = m[1] - m[2] + 2.0f * (m[3] - m[4]);
  y[2] = m[1] + m[2] + 4.0f * (m[3] + m[4]);
  y[3] = m[1] - m[2] + 8.0f * (m[3] - m[4]) + m[5];
}

// A dy: the transpose of output_1d, 4 output gradients to 6 positions'.
[[gnu::always_inline]] inline void output_gradient_1d(const Lanes (&y)[kOut], Lanes (&m)[kIn]) {
  m[0] = y[0];
  m[1] = y[0] + y[1] + y[2] + y[3];
  m[2] = y[0] - y[1] + y[2] - y[3];
  m[3] = y[0] + 2.0f * y[1] + 4.0f * y[2] + 8.0f * y[3];
  m[4] = y[0] - 2.0f * y[1] + 4.0f * y[2] - 8.0f * y[3];
  m[5] = y[3];
}

// For each 16 of the channels: a 1-D transform along each column of a size x size block of
// registers, then along each row of the result, a block of the transform's output size.
// load(r, s, c0, mask) reads the block's element at row r and column s, store(r, s, c0, mask,
// value) writes the result's.
template <int64_t size, int64_t out, typename Transform, typename Load, typename Store>
[[gnu::always_inline]] inline void transform_2d(int64_t channels, const Transform& transform, const Load& load,
                                                const Store& store) {
  for (int64_t c0 = 0; c0 < channels; c0 += 16) {
    const __mmask16 mask = lanes_mask(channels - c0);
    Lanes half[out][size];  // the columns transformed
    for (int64_t s = 0; s < size; ++s) {
      Lanes column[size], transformed[out];
      for (int64_t r = 0; r < size; ++r) column[r] = load(r, s, c0, mask);
      transform(column, transformed);
      for (int64_t r = 0; r < out; ++r) half[r][s] = transformed[r];
    }
    for (int64_t r = 0; r < out; ++r) {
      Lanes row[out];
      transform(half[r], row);
      for (int64_t s = 0; s < out; ++s) store(r, s, c0, mask, row[s]);
    }
  }
}

// A store for transform_2d into tile t's 36 positions.
auto to_positions(const Positions& positions, int64_t t) {
  return [&positions, t](int64_t r, int64_t s, int64_t c0, __mmask16 mask, Lanes value) {
    _mm512_mask_storeu_ps(positions.at(t, r * kIn + s) + c0, mask, value);
  };
}

// V = B'dB for tile t: d is the 6x6 input block whose top-left pixel is one up and one left
// of the tile's (the padding), zeros outside the map.
void transform_input(const InputBlock& d, int64_t t, int64_t channels, const Positions& v) {
  transform_2d<kIn, kIn>(
      channels, input_1d, [&](int64_t r, int64_t s, int64_t c0, __mmask16 mask) { return load(d[r][s], c0, mask); },
      to_positions(v, t));
}

// y = A'MA (+ bias) for tile t; the pixels outside the map are not written.
void transform_output(const Positions& m, const float* bias, int64_t t, int64_t channels, const OutputBlock& y) {
  transform_2d<kIn, kOut>(
      channels, output_1d,
      [&](int64_t r, int64_t s, int64_t c0, __mmask16 mask) { return load(m.at(t, r * kIn + s), c0, mask); },
      [&](int64_t k, int64_t l, int64_t c0, __mmask16 mask, Lanes value) {
        if (y[k][l]) _mm512_mask_storeu_ps(y[k][l] + c0, mask, value + load(bias, c0, mask));
      });
}

// dM = A dy A' for tile t: the transpose of transform_output, the gradient of the 36
// products from the tile's 4x4 output gradient (zeros outside the map).
void transform_output_gradient(const GradientBlock& dy, int64_t t, int64_t channels, const Positions& dm) {
  transform_2d<kOut, kIn>(
      channels, output_gradient_1d,
      [&](int64_t k, int64_t l, int64_t c0, __mmask16 mask) { return load(dy[k][l], c0, mask); }, to_positions(dm, t));
}

#pragma GCC pop_options

// Tiles that one thread transforms, multiplies and transforms back in one go: their V and M
// (36 x tiles x channels each) near 1 MiB, in the core's L2 cache, in whole row blocks of
// block_gemm.
int64_t block_tiles(int64_t in_channels, int64_t out_channels) {
  const int64_t fitting = 256 * 1024 / (kPositions * (in_channels + out_channels));
  return std::max(kBlockGemmRows, fitting / kBlockGemmRows * kBlockGemmRows);
}

// Runs per_block(begin, end, first) over blocks of at most `block` tiles, the threads
// splitting the tiles; `first`: the block is its thread's first. Each thread reads back only
// what it wrote itself: handing the transforms from one thread to another made two threads
// no faster than one in some processes on a 2-core virtual machine (likely its cores on two of
// the host's core complexes, which share no cache).
template <typename PerBlock>
void for_tile_blocks(int64_t tiles, int64_t block, const PerBlock& per_block) {
  at::parallel_for(0, tiles, kBlockGemmRows, [&](int64_t begin, int64_t end) {
    for (int64_t b0 = begin; b0 < end; b0 += block) per_block(b0, std::min(end, b0 + block), b0 == begin);
  });
}

// The transforms' buffers, the kernels' too: kept per thread (the largest so far) rather than
// allocated per call, where the first writes to a fresh buffer's pages cost as much as the
// transform. No tensor a call returns is one of them.
enum Buffer { kInputs, kProducts, kProductGradients, kKernel, kKernelTaps, kKernelGradient, kBuffers };
thread_local torch::Tensor kept[kBuffers];
torch::Tensor workspace(Buffer slot, const std::vector<int64_t>& shape) {
  int64_t numel = 1;
  for (auto s : shape) numel *= s;
  if (!kept[slot].defined() || kept[slot].numel() < numel) kept[slot] = torch::empty({numel});
  return kept[slot].narrow(0, 0, numel).view(shape);
}

// out = a b for the kernels' transforms: a [m, k] in any strides, b [k, n] and out [m, n]
// contiguous, the threads splitting the columns.
void multiply_columns(const torch::Tensor& a, const torch::Tensor& b, torch::Tensor& out) {
  const int64_t m = a.size(0), k = a.size(1), n = b.size(1), slice = 512;
  const float* pa = a.const_data_ptr<float>();
  const float* pb = b.const_data_ptr<float>();
  float* po = out.data_ptr<float>();
  at::parallel_for(0, (n + slice - 1) / slice, 1, [&](int64_t begin, int64_t end) {
    for (int64_t c0 = begin * slice; c0 < std::min(n, end * slice); c0 += slice)
      block_gemm({pa, a.stride(0), a.stride(1)}, pb + c0, n, po + c0, n, m, k, std::min(slice, n - c0));
  });
}

// G (x) G: the 3x3 kernel, as 9 taps, to the 6x6 one the 36 positions multiply by (U = GgG');
// with `turned`, from the kernel turned 180 degrees (its taps in reverse order).
const torch::Tensor& kernel_transform(bool turned) {
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
  static const torch::Tensor gg_turned = gg.flip({1});
  return turned ? gg_turned : gg;
}

// U as 36 matrices [k, n] for V[p] U[p]: U[p][i][o] from weight[o][i] (k = in channels,
// n = out), or with `turned`, from the kernel turned 180 degrees with its channels swapped
// (the input gradient's convolution): U[p][o][i] from weight[o][i][2 - r][2 - s].
torch::Tensor transform_kernel(const torch::Tensor& weight, bool turned) {
  const auto taps = turned ? weight.permute({2, 3, 0, 1}) : weight.permute({2, 3, 1, 0});  // [3, 3, k, n]
  const int64_t k = taps.size(2), n = taps.size(3);
  auto flat = workspace(kKernelTaps, {9, k * n});
  flat.view({3, 3, k, n}).copy_(taps);
  auto u = workspace(kKernel, {kPositions, k * n});
  multiply_columns(kernel_transform(turned), flat, u);
  return u.view({kPositions, k, n});
}

// The weight's gradient (G (x) G)' dU from the 36 positions' dU [36, o, i], in the weight's layout.
torch::Tensor kernel_gradient(const torch::Tensor& du, const torch::Tensor& weight) {
  auto taps = workspace(kKernelTaps, {9, du.size(1) * du.size(2)});
  multiply_columns(kernel_transform(false).t(), du.view({kPositions, -1}), taps);
  return taps.view({3, 3, du.size(1), du.size(2)}).permute({2, 3, 0, 1}).clone(weight.suggest_memory_format());
}

// The convolution of a channels-last map x by the transformed kernel u [36, c, o] (+ bias).
torch::Tensor convolve(const torch::Tensor& x, const torch::Tensor& u, const torch::Tensor& bias) {
  const Tiling in(x.size(0), x.size(2), x.size(3), x.size(1));
  const int64_t c = in.c, o = u.size(2);
  auto y = torch::empty({in.n, o, in.h, in.w}, x.options().memory_format(torch::MemoryFormat::ChannelsLast));
  const Tiling out(in.n, in.h, in.w, o);
  const float* px = x.const_data_ptr<float>();
  const float* pu = u.const_data_ptr<float>();
  const float* pb = bias.defined() ? bias.const_data_ptr<float>() : nullptr;
  float* py = y.data_ptr<float>();
  for_tile_blocks(in.tiles(), block_tiles(c, o), [&](int64_t begin, int64_t end, bool) {
    const int64_t n = end - begin;
    const Positions v{workspace(kInputs, {n, kPositions, c}).data_ptr<float>(), kPositions * c, c};
    const Positions m{workspace(kProducts, {kPositions, n, o}).data_ptr<float>(), o, n * o};
    for (int64_t t = begin; t < end; ++t) transform_input(in.block<kIn>(px, t, -1), t - begin, c, v);
    for (int64_t p = 0; p < kPositions; ++p)
      block_gemm({v.at(0, p), v.tile_stride, 1}, pu + p * c * o, o, m.at(0, p), o, n, c, o);
    for (int64_t t = begin; t < end; ++t) transform_output(m, pb, t - begin, o, out.block<kOut>(py, t, 0));
  });
  return y;
}

// The weight's gradient: dU[p] = dM[p]' V[p] over the tiles, dM = A dy A', V = B'xB. Each
// thread sums its own tiles' products; their sums are added at the end.
torch::Tensor weight_gradient(const torch::Tensor& x, const torch::Tensor& dy, const torch::Tensor& weight) {
  const Tiling in(x.size(0), x.size(2), x.size(3), x.size(1)), out(dy.size(0), dy.size(2), dy.size(3), dy.size(1));
  const int64_t c = in.c, o = out.c, threads = at::get_num_threads();
  auto sums = workspace(kKernelGradient, {threads, kPositions, o, c});
  float* thread_sums = sums.data_ptr<float>();
  std::vector<uint8_t> summed(threads, 0);
  const float* px = x.const_data_ptr<float>();
  const float* pdy = dy.const_data_ptr<float>();
  for_tile_blocks(in.tiles(), block_tiles(c, o), [&](int64_t begin, int64_t end, bool first) {
    const int64_t n = end - begin, thread = at::get_thread_num();
    const Positions v{workspace(kInputs, {n, kPositions, c}).data_ptr<float>(), kPositions * c, c};
    const Positions dm{workspace(kProductGradients, {kPositions, n, o}).data_ptr<float>(), o, n * o};
    for (int64_t t = begin; t < end; ++t) {
      transform_input(in.block<kIn>(px, t, -1), t - begin, c, v);
      transform_output_gradient(out.block<kOut>(pdy, t, 0), t - begin, o, dm);
    }
    float* du = thread_sums + thread * kPositions * o * c;
    for (int64_t p = 0; p < kPositions; ++p)  // dU[p] [o, c] (+)= dM[p]' [o, n] V[p] [n, c]
      block_gemm({dm.at(0, p), 1, o}, v.at(0, p), v.tile_stride, du + p * o * c, c, o, n, c, !first);
    summed[thread] = 1;
  });
  torch::Tensor du;
  for (int64_t thread = 0; thread < threads; ++thread)
    if (summed[thread]) du = du.defined() ? du.add_(sums[thread]) : sums[thread];
  auto gradient = kernel_gradient(du, weight);
  // The threads' sums grow with threads x channels^2 (151 MB for 256 channels on 16
  // threads): kept past the call only while small.
  constexpr int64_t kKeptSums = int64_t{4} << 20;  // floats: 16 MB
  if (sums.numel() > kKeptSums) kept[kKernelGradient] = torch::Tensor();
  return gradient;
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
    if (torch::GradMode::is_enabled())  // a second derivative: through torch's convolution
      return gradients_with_graph(ctx, saved, torch::conv2d(x, weight, bias.numel() ? bias : torch::Tensor(), 1, 1),
                                  grads[0]);
    const auto dy = grads[0].contiguous(torch::MemoryFormat::ChannelsLast);
    if (ctx->needs_input_grad(0))  // the transposed convolution: the kernel turned and its channels swapped
      out[0] = convolve(dy, transform_kernel(weight, true), torch::Tensor());
    if (ctx->needs_input_grad(1)) out[1] = weight_gradient(x, dy, weight);
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
         x.dim() == 4 && x.size(1) == weight.size(1) && x.size(1) >= kMinInChannels && weight.size(0) >= kMinOutChannels &&
         tiles >= kMinTiles && 2 * tiles >= std::max(x.size(1), weight.size(0)) && x.size(2) >= kOut &&
         x.size(3) >= kOut &&
         x.device().is_cpu() && weight.device().is_cpu() && (!conv.bias.defined() || conv.bias.device().is_cpu()) &&
         x.scalar_type() == torch::kFloat && weight.scalar_type() == torch::kFloat &&
         x.is_contiguous(torch::MemoryFormat::ChannelsLast) && !at::autocast::is_autocast_enabled(at::kCPU) &&
         block_gemm_available();
}

torch::Tensor winograd_conv2d(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias) {
  if (!block_gemm_available()) throw Error("winograd_conv2d: this CPU has no AVX-512, which its kernels need");
  return WinogradConv::apply(x.contiguous(torch::MemoryFormat::ChannelsLast), weight,
                             bias.defined() ? bias : torch::empty({0}, weight.options()));
}

}  // namespace fastcpp::vision
