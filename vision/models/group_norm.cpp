#include "vision/models/group_norm.h"

#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/graph_backward.h"
#include "core/row_loop.h"

namespace fastcpp::vision {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// A channels-last x [N, C, H, W] is stored as N blocks of H*W rows of C values.
struct Layout {
  int64_t n, c, rows, groups, per_group;
};

Layout layout_of(const torch::Tensor& x, int64_t groups) {
  const int64_t n = x.size(0), c = x.size(1);
  return {n, c, x.numel() / (n * c), groups, c / groups};
}

// Per sample, each channel's sums over the rows (of a, and of a * b where b is given), in
// double: the rows are added whole, C values at a time, which is what makes this fast. Each
// block of rows is summed in float, vectorized, then added in double.
FASTCPP_ROW_LOOP void channel_sums(const float* a, const float* b, const Layout& l, int64_t n, double* sum_a,
                                   double* sum_ab) {
  constexpr int64_t block = 32;
  std::fill(sum_a, sum_a + l.c, 0.0);
  std::fill(sum_ab, sum_ab + l.c, 0.0);
  std::vector<float> part_a(l.c), part_ab(l.c);
  const float* row_a = a + n * l.rows * l.c;
  const float* row_b = (b ? b : a) + n * l.rows * l.c;
  for (int64_t first = 0; first < l.rows; first += block) {
    std::fill(part_a.begin(), part_a.end(), 0.0f);
    std::fill(part_ab.begin(), part_ab.end(), 0.0f);
    float* __restrict pa = part_a.data();
    float* __restrict pab = part_ab.data();
    for (int64_t r = first; r < std::min(first + block, l.rows); ++r, row_a += l.c, row_b += l.c)
      for (int64_t c = 0; c < l.c; ++c) {
        pa[c] += row_a[c];
        pab[c] += row_a[c] * row_b[c];
      }
    for (int64_t c = 0; c < l.c; ++c) sum_a[c] += pa[c], sum_ab[c] += pab[c];
  }
}

// y = x * scale[c] + shift[c] over sample n's rows.
FASTCPP_ROW_LOOP void scale_and_shift(const float* x, const Layout& l, int64_t n, const float* scale,
                                      const float* shift, float* y) {
  const int64_t start = n * l.rows * l.c;
  const float* in = x + start;
  float* out = y + start;
  for (int64_t r = 0; r < l.rows; ++r, in += l.c, out += l.c)
    for (int64_t c = 0; c < l.c; ++c) out[c] = in[c] * scale[c] + shift[c];
}

// dx = dy * a[c] + x * b[c] + shift[c] over sample n's rows.
FASTCPP_ROW_LOOP void combine(const float* dy, const float* x, const Layout& l, int64_t n, const float* a,
                              const float* b, const float* shift, float* dx) {
  const int64_t start = n * l.rows * l.c;
  const float *g = dy + start, *in = x + start;
  float* out = dx + start;
  for (int64_t r = 0; r < l.rows; ++r, g += l.c, in += l.c, out += l.c)
    for (int64_t c = 0; c < l.c; ++c) out[c] = g[c] * a[c] + in[c] * b[c] + shift[c];
}

struct ChannelsLastGroupNorm : torch::autograd::Function<ChannelsLastGroupNorm> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& weight,
                               const torch::Tensor& bias, int64_t groups, double eps) {
    const auto l = layout_of(x, groups);
    auto mean = torch::empty({l.n, groups}, torch::kFloat);
    auto rstd = torch::empty_like(mean);
    auto y = torch::empty_like(x);  // channels-last, as x
    const float* in = x.const_data_ptr<float>();
    const float *w = weight.const_data_ptr<float>(), *b = bias.const_data_ptr<float>();
    float *m = mean.data_ptr<float>(), *r = rstd.data_ptr<float>(), *out = y.data_ptr<float>();
    at::parallel_for(0, l.n, 1, [&](int64_t begin, int64_t end) {
      std::vector<double> sum(l.c), squares(l.c);
      std::vector<float> scale(l.c), shift(l.c);
      const double count = static_cast<double>(l.rows * l.per_group);
      for (int64_t n = begin; n < end; ++n) {
        channel_sums(in, nullptr, l, n, sum.data(), squares.data());
        for (int64_t g = 0; g < groups; ++g) {
          double s = 0, q = 0;
          for (int64_t c = g * l.per_group; c < (g + 1) * l.per_group; ++c) s += sum[c], q += squares[c];
          const double group_mean = s / count, var = std::max(q / count - group_mean * group_mean, 0.0);
          m[n * groups + g] = static_cast<float>(group_mean);
          r[n * groups + g] = static_cast<float>(1.0 / std::sqrt(var + eps));
        }
        for (int64_t c = 0; c < l.c; ++c) {
          const int64_t g = n * groups + c / l.per_group;
          scale[c] = r[g] * w[c];
          shift[c] = b[c] - m[g] * scale[c];
        }
        scale_and_shift(in, l, n, scale.data(), shift.data(), out);
      }
    });
    ctx->save_for_backward({x, weight, mean, rstd, bias});
    ctx->saved_data["eps"] = eps;
    return y;
  }

  // ATen's GroupNorm backward, per sample and group: with ds, db the sums of dy * x and dy
  // over the group weighted by the weight, and M its element count,
  //   dx = rstd * w * dy + c2 * x + c3,  c2 = (db * mean - ds) * rstd^3 / M,
  //   c3 = -c2 * mean - db * rstd / M.
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto &x = saved[0], &weight = saved[1], &mean = saved[2], &rstd = saved[3], &bias = saved[4];
    const int64_t groups = mean.size(1);
    if (!grads[0].defined()) return variable_list(5);
    if (torch::GradMode::is_enabled()) {  // a second derivative: through torch's GroupNorm
      const auto y = torch::group_norm(x, groups, weight, bias, ctx->saved_data["eps"].toDouble());
      auto grads_with_graph = gradients_with_graph(ctx, {x, weight, bias}, y, grads[0]);
      grads_with_graph.resize(5);  // and none for groups and eps
      return grads_with_graph;
    }
    const auto dy = grads[0].contiguous(torch::MemoryFormat::ChannelsLast);
    const auto l = layout_of(x, groups);
    auto ds = torch::empty({l.n, l.c}, x.options().dtype(torch::kDouble));  // per sample and channel
    auto db = torch::empty_like(ds);
    const bool input_grad = ctx->needs_input_grad(0);
    torch::Tensor dx = input_grad ? torch::empty_like(x) : torch::Tensor();
    const float *g = dy.const_data_ptr<float>(), *in = x.const_data_ptr<float>();
    const float* w = weight.const_data_ptr<float>();
    const float *m = mean.const_data_ptr<float>(), *r = rstd.const_data_ptr<float>();
    double *ds_all = ds.data_ptr<double>(), *db_all = db.data_ptr<double>();
    float* out = input_grad ? dx.data_ptr<float>() : nullptr;
    at::parallel_for(0, l.n, 1, [&](int64_t begin, int64_t end) {
      std::vector<float> a(l.c), b(l.c), shift(l.c);
      const double count = static_cast<double>(l.rows * l.per_group);
      for (int64_t n = begin; n < end; ++n) {
        double *ds_n = ds_all + n * l.c, *db_n = db_all + n * l.c;
        channel_sums(g, in, l, n, db_n, ds_n);
        if (!input_grad) continue;
        for (int64_t k = 0; k < groups; ++k) {
          double ds_w = 0, db_w = 0;
          for (int64_t c = k * l.per_group; c < (k + 1) * l.per_group; ++c) {
            ds_w += ds_n[c] * w[c];
            db_w += db_n[c] * w[c];
          }
          const double group_mean = m[n * groups + k], group_rstd = r[n * groups + k];
          const double c2 = (db_w * group_mean - ds_w) * group_rstd * group_rstd * group_rstd / count;
          const double c3 = -c2 * group_mean - db_w * group_rstd / count;
          for (int64_t c = k * l.per_group; c < (k + 1) * l.per_group; ++c) {
            a[c] = static_cast<float>(group_rstd * w[c]);
            b[c] = static_cast<float>(c2);
            shift[c] = static_cast<float>(c3);
          }
        }
        combine(g, in, l, n, a.data(), b.data(), shift.data(), out);
      }
    });
    torch::Tensor grad_weight, grad_bias;
    if (ctx->needs_input_grad(1)) {
      // sum over samples of (ds - db * mean) * rstd, the group's statistics per channel
      const auto per_channel = [&](const torch::Tensor& t) {
        return t.to(torch::kDouble).repeat_interleave(l.per_group, 1);
      };
      grad_weight = ((ds - db * per_channel(mean)) * per_channel(rstd)).sum(0).to(weight.scalar_type());
    }
    if (ctx->needs_input_grad(2)) grad_bias = db.sum(0).to(torch::kFloat);
    return {dx, grad_weight, grad_bias, torch::Tensor(), torch::Tensor()};
  }
};

// A weight or bias the kernels can read: one float a channel (a wrong length is torch's error).
bool float_vector(const torch::Tensor& t, int64_t channels) {
  return !t.defined() ||
         (t.device().is_cpu() && t.scalar_type() == torch::kFloat && t.is_contiguous() && t.numel() == channels);
}

}  // namespace

torch::Tensor group_norm(const torch::Tensor& x, int64_t groups, const torch::Tensor& weight,
                         const torch::Tensor& bias, double eps) {
  const bool own_path = x.device().is_cpu() && x.scalar_type() == torch::kFloat && x.dim() == 4 && x.numel() > 0 &&
                        x.size(1) % groups == 0 && x.is_contiguous(torch::MemoryFormat::ChannelsLast) &&
                        !x.is_contiguous() && float_vector(weight, x.size(1)) && float_vector(bias, x.size(1));
  if (!own_path) return torch::group_norm(x, groups, weight, bias, eps);
  // Without an affine part: a weight of ones and a bias of zeros, which take no gradient
  // (a custom autograd function cannot take an undefined tensor).
  return ChannelsLastGroupNorm::apply(x, weight.defined() ? weight : torch::ones({x.size(1)}),
                                      bias.defined() ? bias : torch::zeros({x.size(1)}), groups, eps);
}

GroupNormImpl::GroupNormImpl(int64_t groups, int64_t channels, double eps, bool affine)
    : groups(groups), channels(channels), eps(eps), affine(affine) {
  if (groups <= 0 || channels <= 0 || channels % groups != 0)
    throw Error("GroupNorm: " + std::to_string(channels) + " channels do not split into " + std::to_string(groups) +
                " groups");
  reset();
}

void GroupNormImpl::reset() {
  if (!affine) return;
  weight = register_parameter("weight", torch::ones({channels}));
  bias = register_parameter("bias", torch::zeros({channels}));
}

}  // namespace fastcpp::vision
