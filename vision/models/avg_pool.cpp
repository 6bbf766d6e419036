#include "vision/models/avg_pool.h"

#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <algorithm>
#include <string>

#include "core/error.h"
#include "core/graph_backward.h"
#include "core/row_loop.h"

namespace fastcpp::vision {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// A channels-last map [n, c, h, w] pooled by kernel k into [n, c, oh, ow].
struct Geometry {
  int64_t n, c, h, w, oh, ow, k;
  // The values a window holds: k x k, fewer for a last window that runs past the edge.
  int64_t window(int64_t o_h, int64_t o_w) const {
    return (std::min(o_h * k + k, h) - o_h * k) * (std::min(o_w * k + k, w) - o_w * k);
  }
};

int64_t pooled_size(int64_t size, int64_t k, bool ceil_mode) { return ceil_mode ? (size + k - 1) / k : size / k; }

// Output row o_h of sample `sample`: each window's values summed (pixel row by pixel row, in
// ATen's order), then divided by their count.
FASTCPP_ROW_LOOP void pool_row(const float* __restrict x, const Geometry& g, int64_t sample, int64_t o_h,
                               float* __restrict out) {
  const int64_t c = g.c, h_end = std::min(o_h * g.k + g.k, g.h);
  for (int64_t o_w = 0; o_w < g.ow; ++o_w) {
    float* __restrict o = out + ((sample * g.oh + o_h) * g.ow + o_w) * c;
    std::fill_n(o, c, 0.0f);
    const int64_t w_end = std::min(o_w * g.k + g.k, g.w);
    for (int64_t i = o_h * g.k; i < h_end; ++i)
      for (int64_t j = o_w * g.k; j < w_end; ++j) {
        const float* __restrict in = x + ((sample * g.h + i) * g.w + j) * c;
        for (int64_t ch = 0; ch < c; ++ch) o[ch] += in[ch];
      }
    const float count = static_cast<float>(g.window(o_h, o_w));
    for (int64_t ch = 0; ch < c; ++ch) o[ch] /= count;
  }
}

// Input row i of sample `sample` of the gradient: each value its window's gradient divided by
// the window's count; zero where no window reaches (the edge a floor-mode pooling drops).
FASTCPP_ROW_LOOP void unpool_row(const float* __restrict dy, const Geometry& g, int64_t sample, int64_t i,
                                 float* __restrict dx) {
  const int64_t c = g.c, o_h = i / g.k;
  float* __restrict row = dx + (sample * g.h + i) * g.w * c;
  for (int64_t j = 0; j < g.w; ++j) {
    float* __restrict d = row + j * c;
    const int64_t o_w = j / g.k;
    if (o_h >= g.oh || o_w >= g.ow) {
      std::fill_n(d, c, 0.0f);
      continue;
    }
    const float* __restrict grad = dy + ((sample * g.oh + o_h) * g.ow + o_w) * c;
    const float count = static_cast<float>(g.window(o_h, o_w));
    for (int64_t ch = 0; ch < c; ++ch) d[ch] = grad[ch] / count;
  }
}

struct ChannelsLastAvgPool : torch::autograd::Function<ChannelsLastAvgPool> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, int64_t k, bool ceil_mode) {
    const Geometry g{x.size(0), x.size(1), x.size(2), x.size(3), pooled_size(x.size(2), k, ceil_mode),
                     pooled_size(x.size(3), k, ceil_mode), k};
    auto y = torch::empty({g.n, g.c, g.oh, g.ow}, x.options().memory_format(torch::MemoryFormat::ChannelsLast));
    const float* in = x.const_data_ptr<float>();
    float* out = y.data_ptr<float>();
    at::parallel_for(0, g.n * g.oh, std::max<int64_t>(1, 4096 / (g.ow * g.c * k * k)), [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) pool_row(in, g, r / g.oh, r % g.oh, out);
    });
    ctx->saved_data["geometry"] = std::vector<int64_t>{g.n, g.c, g.h, g.w, g.oh, g.ow, g.k};
    ctx->saved_data["ceil_mode"] = ceil_mode;
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    if (!grads[0].defined()) return variable_list(3);
    const auto v = ctx->saved_data["geometry"].toIntVector();
    const Geometry g{v[0], v[1], v[2], v[3], v[4], v[5], v[6]};
    if (torch::GradMode::is_enabled()) {  // a second derivative: ATen's backward, differentiable in dy
      const auto x = torch::empty({g.n, g.c, g.h, g.w}, grads[0].options());  // its shape alone is read
      const bool ceil_mode = ctx->saved_data["ceil_mode"].toBool();
      return {at::avg_pool2d_backward(grads[0], x, {g.k, g.k}, {g.k, g.k}, {0, 0}, ceil_mode,
                                      /*count_include_pad=*/true, std::nullopt),
              torch::Tensor(), torch::Tensor()};
    }
    const auto dy = grads[0].contiguous(torch::MemoryFormat::ChannelsLast);
    auto dx = torch::empty({g.n, g.c, g.h, g.w}, dy.options().memory_format(torch::MemoryFormat::ChannelsLast));
    const float* grad = dy.const_data_ptr<float>();
    float* out = dx.data_ptr<float>();
    at::parallel_for(0, g.n * g.h, std::max<int64_t>(1, 4096 / (g.w * g.c)), [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) unpool_row(grad, g, r / g.h, r % g.h, out);
    });
    return {dx, torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor avg_pool(const torch::Tensor& x, int64_t kernel, bool ceil_mode) {
  const bool own_path = x.device().is_cpu() && x.scalar_type() == torch::kFloat && x.dim() == 4 && x.numel() > 0 &&
                        x.size(2) >= kernel && x.size(3) >= kernel &&
                        x.is_contiguous(torch::MemoryFormat::ChannelsLast) && !x.is_contiguous();
  if (!own_path) return torch::avg_pool2d(x, kernel, kernel, 0, ceil_mode);
  return ChannelsLastAvgPool::apply(x, kernel, ceil_mode);
}

AvgPoolImpl::AvgPoolImpl(int64_t kernel, bool ceil_mode) : kernel(kernel), ceil_mode(ceil_mode) {
  if (kernel < 1) throw Error("AvgPool: the kernel must be at least 1, got " + std::to_string(kernel));
}

}  // namespace fastcpp::vision
