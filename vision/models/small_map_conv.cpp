#include "vision/models/small_map_conv.h"

#include <ATen/Parallel.h>
#include <ATen/autocast_mode.h>
#include <torch/torch.h>

#include <algorithm>
#include <utility>
#include <variant>
#include <vector>

#include "core/graph_backward.h"
#include "vision/models/winograd_conv.h"

namespace fastcpp::vision {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// x [n, c, h, w] convolved into [n, o, oh, ow] by a kh x kw kernel at stride (sh, sw) over
// a padding (ph, pw). Pixels are numbered row by row: p of the output, q of the input.
struct Geometry {
  int64_t n, c, h, w, o, oh, ow, kh, kw, sh, sw, ph, pw;

  // The tap that joins output pixel p and input pixel q, where one does.
  std::pair<int64_t, int64_t> tap(int64_t p, int64_t q) const {
    return {q / w - p / ow * sh + ph, q % w - p % ow * sw + pw};
  }
  bool joins(std::pair<int64_t, int64_t> t) const {
    return t.first >= 0 && t.first < kh && t.second >= 0 && t.second < kw;
  }
  int64_t in_pixels() const { return h * w; }
  int64_t out_pixels() const { return oh * ow; }

  std::vector<int64_t> to_vector() const { return {n, c, h, w, o, oh, ow, kh, kw, sh, sw, ph, pw}; }
  static Geometry from(const std::vector<int64_t>& v) {
    return {v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8], v[9], v[10], v[11], v[12]};
  }
};

// Rows per task of a loop whose row holds `values` floats: enough work to be worth a thread.
int64_t grain(int64_t values) { return std::max<int64_t>(1, 16384 / std::max<int64_t>(1, values)); }

// The matrix [oh*ow*o, h*w*c] whose row (p, output channel) and column (q, input channel)
// hold weight[output channel, input channel, tap(p, q)], zero where no tap joins p and q.
torch::Tensor pixel_pair_weights(const torch::Tensor& weight, const Geometry& g) {
  const int64_t columns = g.in_pixels() * g.c;
  auto pairs = torch::empty({g.out_pixels() * g.o, columns}, weight.options());
  const float* w = weight.const_data_ptr<float>();
  const auto s = weight.strides();
  float* out = pairs.data_ptr<float>();
  at::parallel_for(0, g.out_pixels() * g.o, grain(columns), [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      const int64_t p = row / g.o, o = row % g.o;
      for (int64_t q = 0; q < g.in_pixels(); ++q) {
        float* dst = out + row * columns + q * g.c;
        const auto t = g.tap(p, q);
        if (!g.joins(t)) {
          std::fill_n(dst, g.c, 0.0f);
          continue;
        }
        const float* src = w + o * s[0] + t.first * s[2] + t.second * s[3];
        if (s[1] == 1) std::copy_n(src, g.c, dst);  // a channels-last weight
        else for (int64_t ch = 0; ch < g.c; ++ch) dst[ch] = src[ch * s[1]];
      }
    }
  });
  return pairs;
}

// The weight's gradient from the matrix's: each tap sums the blocks of the pixel pairs it
// joins, in a fixed order (output channels split between the threads).
torch::Tensor tap_gradient(const torch::Tensor& pairs_grad, const torch::Tensor& weight, const Geometry& g) {
  auto grad = torch::zeros_like(weight);
  const auto s = grad.strides();
  const int64_t columns = g.in_pixels() * g.c;
  const float* pg = pairs_grad.const_data_ptr<float>();
  float* out = grad.data_ptr<float>();
  at::parallel_for(0, g.o, grain(g.out_pixels() * columns), [&](int64_t begin, int64_t end) {
    for (int64_t o = begin; o < end; ++o)
      for (int64_t p = 0; p < g.out_pixels(); ++p)
        for (int64_t q = 0; q < g.in_pixels(); ++q) {
          const auto t = g.tap(p, q);
          if (!g.joins(t)) continue;
          const float* src = pg + (p * g.o + o) * columns + q * g.c;
          float* dst = out + o * s[0] + t.first * s[2] + t.second * s[3];
          if (s[1] == 1) for (int64_t ch = 0; ch < g.c; ++ch) dst[ch] += src[ch];
          else for (int64_t ch = 0; ch < g.c; ++ch) dst[ch * s[1]] += src[ch];
        }
  });
  return grad;
}

// [n, c, h, w] in channels-last memory as [n, h*w*c]: a view where it is channels-last.
torch::Tensor as_rows(const torch::Tensor& map) {
  return map.permute({0, 2, 3, 1}).reshape({map.size(0), -1});
}

// A channels-last map of its own (not a view: autograd lets in-place ReLUs modify it).
torch::Tensor empty_map(int64_t n, int64_t c, int64_t h, int64_t w, const torch::TensorOptions& options) {
  return torch::empty({n, c, h, w}, options.memory_format(torch::MemoryFormat::ChannelsLast));
}

// bias: a 0-element tensor where the convolution has none.
struct SmallMapConv : torch::autograd::Function<SmallMapConv> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& weight,
                               const torch::Tensor& bias, const Geometry& g) {
    const auto pairs = pixel_pair_weights(weight, g);
    const auto rows = as_rows(x);
    auto y = empty_map(g.n, g.o, g.oh, g.ow, x.options());
    auto y_rows = as_rows(y);
    if (bias.numel()) torch::addmm_out(y_rows, bias.repeat({g.out_pixels()}), rows, pairs.t());
    else torch::mm_out(y_rows, rows, pairs.t());
    ctx->save_for_backward({rows, weight, pairs, x, bias});
    ctx->saved_data["geometry"] = g.to_vector();
    ctx->saved_data["bias"] = bias.numel() > 0;
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    variable_list out(4);
    if (!grads[0].defined()) return out;
    const auto saved = ctx->get_saved_variables();
    const auto &rows = saved[0], &weight = saved[1], &pairs = saved[2], &x = saved[3], &bias = saved[4];
    const auto g = Geometry::from(ctx->saved_data["geometry"].toIntVector());
    if (torch::GradMode::is_enabled()) {  // a second derivative: through torch's convolution
      const auto y = torch::conv2d(x, weight, bias.numel() ? bias : torch::Tensor(), {g.sh, g.sw}, {g.ph, g.pw});
      auto grads_with_graph = gradients_with_graph(ctx, {x, weight, bias}, y, grads[0]);
      grads_with_graph.emplace_back();  // the geometry's
      return grads_with_graph;
    }
    const auto dy = as_rows(grads[0]);
    if (ctx->needs_input_grad(0)) {
      out[0] = empty_map(g.n, g.c, g.h, g.w, dy.options());
      auto dx_rows = as_rows(out[0]);
      torch::mm_out(dx_rows, dy, pairs);
    }
    if (ctx->needs_input_grad(1)) out[1] = tap_gradient(torch::mm(dy.t(), rows), weight, g);
    if (ctx->saved_data["bias"].toBool() && ctx->needs_input_grad(2))
      out[2] = dy.sum(0).view({g.out_pixels(), g.o}).sum(0);
    return out;
  }
};

}  // namespace

torch::Tensor conv2d(torch::nn::Conv2dImpl& conv, const torch::Tensor& x) {
  const auto& o = conv.options;
  const auto* padding = std::get_if<torch::ExpandingArray<2>>(&o.padding());
  const auto& weight = conv.weight;
  const int64_t pixels = x.dim() == 4 ? x.size(2) * x.size(3) : 0;
  const bool small_map = pixels >= 2 && pixels * 2 <= weight.size(2) * weight.size(3);
  const bool plain_conv = padding && o.groups() == 1 && (*o.dilation())[0] == 1 && (*o.dilation())[1] == 1 &&
                          std::holds_alternative<torch::enumtype::kZeros>(o.padding_mode());
  const bool own_path = small_map && plain_conv && x.device().is_cpu() && x.scalar_type() == torch::kFloat &&
                        weight.scalar_type() == torch::kFloat && weight.device().is_cpu() &&
                        (!conv.bias.defined() || conv.bias.device().is_cpu()) && x.numel() > 0 &&
                        x.is_contiguous(torch::MemoryFormat::ChannelsLast) && !at::autocast::is_autocast_enabled(at::kCPU);
  if (!own_path) return winograd_applies(conv, x) ? winograd_conv2d(x, weight, conv.bias) : conv.forward(x);
  const int64_t kh = weight.size(2), kw = weight.size(3), sh = (*o.stride())[0], sw = (*o.stride())[1],
                ph = (**padding)[0], pw = (**padding)[1];
  const Geometry g{x.size(0), x.size(1), x.size(2), x.size(3), weight.size(0),
                   (x.size(2) + 2 * ph - kh) / sh + 1, (x.size(3) + 2 * pw - kw) / sw + 1,
                   kh, kw, sh, sw, ph, pw};
  // A kernel larger than the padded map, or channels that differ: torch's error.
  if (x.size(2) + 2 * ph < kh || x.size(3) + 2 * pw < kw || x.size(1) != weight.size(1)) return conv.forward(x);
  const auto& bias = conv.bias;
  return SmallMapConv::apply(x, weight, bias.defined() ? bias : torch::empty({0}, weight.options()), g);
}

}  // namespace fastcpp::vision
