#include "distributed/batchnorm_relu.h"

#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/graph_backward.h"
#include "core/row_loop.h"
#include "distributed/sync_batchnorm.h"

namespace fastcpp::distributed {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// x seen as `rows` pixel rows of `c` values, cut into `count` spans of rows, one per thread.
// The cut depends only on the sizes and the thread count, so the sums add up in the same
// order on every run. The loops take `group` rows at a time (a wide row of c * group values,
// the per-channel constants repeated to match): a row of few channels is too short a loop
// to vectorize well.
struct Spans {
  int64_t rows, c, count, group;
  int64_t begin(int64_t span) const { return rows * span / count; }
  int64_t width() const { return c * group; }
};

Spans spans_of(const torch::Tensor& x) {
  const int64_t c = x.size(1), rows = x.numel() / c;
  const int64_t by_size = std::max<int64_t>(1, rows * c / 16384);  // a small map is not worth a thread
  return {rows, c, std::min<int64_t>(at::get_num_threads(), by_size), std::max<int64_t>(1, (64 + c - 1) / c)};
}

// Per-channel values repeated to a wide row's width.
std::vector<float> widened(const Spans& spans, const std::vector<float>& per_channel) {
  std::vector<float> wide(spans.width());
  for (int64_t i = 0; i < spans.width(); ++i) wide[i] = per_channel[i % spans.c];
  return wide;
}

// Calls loop(first_row, wide_rows, width) over rows [begin, end): whole groups as wide rows,
// then the rows left over one at a time (width c).
template <class Loop>
void by_wide_rows(const Spans& spans, int64_t begin, int64_t end, const Loop& loop) {
  const int64_t grouped = (end - begin) / spans.group * spans.group;
  if (grouped > 0) loop(begin, grouped / spans.group, spans.width());
  if (begin + grouped < end) loop(begin + grouped, end - begin - grouped, spans.c);
}

// Each span's sums per lane of a wide row, [span][2][width], added in span order and folded
// into two vectors of c.
class SpanSums {
 public:
  explicit SpanSums(const Spans& spans) : spans_(spans), sums_(spans.count * 2 * spans.width(), 0.0) {}
  double* first(int64_t span) { return sums_.data() + span * 2 * spans_.width(); }
  double* second(int64_t span) { return first(span) + spans_.width(); }
  void total(std::vector<double>& first_total, std::vector<double>& second_total) const {
    const int64_t width = spans_.width(), c = spans_.c;
    first_total.assign(c, 0.0);
    second_total.assign(c, 0.0);
    for (size_t at = 0; at < sums_.size(); at += 2 * width)
      for (int64_t i = 0; i < width; ++i) first_total[i % c] += sums_[at + i], second_total[i % c] += sums_[at + width + i];
  }

 private:
  Spans spans_;
  std::vector<double> sums_;
};

// Rows are summed in float this many at a time (vectorized), each block then added in double.
constexpr int64_t kBlock = 16;

// Over `rows` rows of `width` values from x: each lane's sum of d and of d * d, d = x - k, k a
// value of the lane's channel, so that a mean far from zero does not cancel the variance's
// digits.
FASTCPP_ROW_LOOP void shifted_sums(const float* __restrict x, int64_t rows, int64_t width, const float* __restrict k,
                                   double* __restrict sum, double* __restrict squares) {
  std::vector<float> block_sum(width), block_squares(width);
  float* __restrict s = block_sum.data();
  float* __restrict q = block_squares.data();
  for (int64_t first = 0; first < rows; first += kBlock) {
    std::fill_n(s, width, 0.0f);
    std::fill_n(q, width, 0.0f);
    for (int64_t r = first; r < std::min(first + kBlock, rows); ++r) {
      const float* __restrict row = x + r * width;
      for (int64_t i = 0; i < width; ++i) {
        const float d = row[i] - k[i];
        s[i] += d;
        q[i] += d * d;
      }
    }
    for (int64_t i = 0; i < width; ++i) sum[i] += s[i], squares[i] += q[i];
  }
}

// Over `rows` rows of `width` values: out = max((x - mean) * scale + bias + residual, 0),
// residual optional.
FASTCPP_ROW_LOOP void normalize_add_relu(const float* __restrict x, const float* __restrict residual, int64_t rows,
                                         int64_t width, const float* __restrict mean, const float* __restrict scale,
                                         const float* __restrict bias, float* __restrict out) {
  for (int64_t r = 0; r < rows; ++r, x += width, out += width) {
    if (residual) {
      const float* __restrict add = residual + r * width;
      for (int64_t i = 0; i < width; ++i) out[i] = std::max((x[i] - mean[i]) * scale[i] + bias[i] + add[i], 0.0f);
    } else {
      for (int64_t i = 0; i < width; ++i) out[i] = std::max((x[i] - mean[i]) * scale[i] + bias[i], 0.0f);
    }
  }
}

// Over `rows` rows of `width` values, with dz = dy where y > 0 (ReLU's gradient): each lane's
// sum of dz and of dz * (x - mean); dz is also written to dz_out when given (the residual's
// gradient).
FASTCPP_ROW_LOOP void gradient_sums(const float* __restrict dy, const float* __restrict y, const float* __restrict x,
                                    int64_t rows, int64_t width, const float* __restrict mean,
                                    float* __restrict dz_out, double* __restrict sum_dz,
                                    double* __restrict sum_dz_xmu) {
  std::vector<float> block_dz(width), block_dz_xmu(width);
  float* __restrict s = block_dz.data();
  float* __restrict p = block_dz_xmu.data();
  for (int64_t first = 0; first < rows; first += kBlock) {
    std::fill_n(s, width, 0.0f);
    std::fill_n(p, width, 0.0f);
    for (int64_t r = first; r < std::min(first + kBlock, rows); ++r) {
      const int64_t at = r * width;
      for (int64_t i = 0; i < width; ++i) {
        const float d = y[at + i] > 0.0f ? dy[at + i] : 0.0f;
        if (dz_out) dz_out[at + i] = d;  // the compiler takes the test out of the loop
        s[i] += d;
        p[i] += d * (x[at + i] - mean[i]);
      }
    }
    for (int64_t i = 0; i < width; ++i) sum_dz[i] += s[i], sum_dz_xmu[i] += p[i];
  }
}

// Over `rows` rows of `width` values: dx = dz * a + (x - mean) * b + shift, dz read from dz
// when given, else made from dy and y again.
FASTCPP_ROW_LOOP void input_gradient(const float* __restrict dy, const float* __restrict y, const float* __restrict dz,
                                     const float* __restrict x, int64_t rows, int64_t width,
                                     const float* __restrict mean, const float* __restrict a,
                                     const float* __restrict b, const float* __restrict shift,
                                     float* __restrict dx) {
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t at = r * width;
    if (dz) {
      for (int64_t i = 0; i < width; ++i)
        dx[at + i] = dz[at + i] * a[i] + (x[at + i] - mean[i]) * b[i] + shift[i];
    } else {
      for (int64_t i = 0; i < width; ++i)
        dx[at + i] = (y[at + i] > 0.0f ? dy[at + i] : 0.0f) * a[i] + (x[at + i] - mean[i]) * b[i] + shift[i];
    }
  }
}

// Runs body(span, begin, end) on each span's rows, one span per thread.
template <class Body>
void over_spans(const Spans& spans, const Body& body) {
  at::parallel_for(0, spans.count, 1, [&](int64_t first, int64_t last) {
    for (int64_t span = first; span < last; ++span) body(span, spans.begin(span), spans.begin(span + 1));
  });
}

// relu((x - mean) * scale + bias + residual) per channel, residual optional.
torch::Tensor normalized_relu(const Spans& spans, const torch::Tensor& x, const torch::Tensor& residual,
                              const std::vector<float>& mean, const std::vector<float>& scale,
                              const std::vector<float>& bias) {
  const auto wide_mean = widened(spans, mean), wide_scale = widened(spans, scale), wide_bias = widened(spans, bias);
  auto y = torch::empty_like(x);
  const float* in = x.const_data_ptr<float>();
  const float* add = residual.defined() ? residual.const_data_ptr<float>() : nullptr;
  float* out = y.data_ptr<float>();
  const int64_t c = spans.c;
  over_spans(spans, [&](int64_t, int64_t begin, int64_t end) {
    by_wide_rows(spans, begin, end, [&](int64_t row, int64_t rows, int64_t width) {
      normalize_add_relu(in + row * c, add ? add + row * c : nullptr, rows, width, wide_mean.data(),
                         wide_scale.data(), wide_bias.data(), out + row * c);
    });
  });
  return y;
}

struct BatchNormReLUFunction : torch::autograd::Function<BatchNormReLUFunction> {
  // residual: without one, a tensor of no elements (an autograd function takes no undefined tensor).
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& residual,
                               const torch::Tensor& weight, const torch::Tensor& bias, SyncBatchNormImpl* bn) {
    const Spans spans = spans_of(x);
    const int64_t c = spans.c;
    const float* in = x.const_data_ptr<float>();
    const auto first_row = widened(spans, std::vector<float>(in, in + c));
    SpanSums span_sums(spans);
    over_spans(spans, [&](int64_t span, int64_t begin, int64_t end) {
      by_wide_rows(spans, begin, end, [&](int64_t row, int64_t rows, int64_t w) {
        shifted_sums(in + row * c, rows, w, first_row.data(), span_sums.first(span), span_sums.second(span));
      });
    });
    std::vector<double> sum, squares;
    span_sums.total(sum, squares);

    auto mean = torch::empty({c}, torch::kFloat), invstd = torch::empty({c}, torch::kFloat);
    float *m = mean.data_ptr<float>(), *r = invstd.data_ptr<float>();
    float *running_mean = bn->running_mean.data_ptr<float>(), *running_var = bn->running_var.data_ptr<float>();
    const float *w = weight.const_data_ptr<float>(), *b = bias.const_data_ptr<float>();
    std::vector<float> scale(c);
    const double n = static_cast<double>(spans.rows), momentum = bn->momentum;
    for (int64_t i = 0; i < c; ++i) {
      const double shift = sum[i] / n, var = std::max(squares[i] / n - shift * shift, 0.0);
      const double channel_mean = first_row[i] + shift;
      m[i] = static_cast<float>(channel_mean);
      r[i] = static_cast<float>(1.0 / std::sqrt(var + bn->eps));
      scale[i] = r[i] * w[i];
      running_mean[i] = static_cast<float>(momentum * channel_mean + (1 - momentum) * running_mean[i]);
      running_var[i] = static_cast<float>(momentum * var * n / (n - 1) + (1 - momentum) * running_var[i]);
    }
    const bool with_residual = residual.numel() > 0;
    auto y = normalized_relu(spans, x, with_residual ? residual : torch::Tensor(), std::vector<float>(m, m + c), scale,
                             std::vector<float>(b, b + c));
    ctx->save_for_backward({x, y, weight, mean, invstd, bias});  // not the residual: its gradient needs none
    ctx->saved_data["residual"] = with_residual;
    ctx->saved_data["eps"] = bn->eps;
    return y;
  }

  // ATen's BatchNorm backward on dz, ReLU's gradient: with S the sum of dz and P that of
  // dz * (x - mean) over the channel's n values,
  //   dx = (dz - S / n - (x - mean) * invstd^2 * P / n) * invstd * weight,
  //   dweight = P * invstd,  dbias = S,  dresidual = dz.
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    if (!grads[0].defined()) return variable_list(5);
    const auto saved = ctx->get_saved_variables();
    const auto &x = saved[0], &y = saved[1], &weight = saved[2], &mean = saved[3], &invstd = saved[4];
    if (torch::GradMode::is_enabled()) {  // a second derivative: through torch's BatchNorm
      // ReLU's gradient is its output's sign, whose own derivative is 0: dz = dy where y > 0,
      // the residual's gradient, and BatchNorm's through ATen.
      const auto dz = grads[0] * y.gt(0).to(grads[0].scalar_type());
      const auto normalized = torch::batch_norm(x, weight, saved[5], {}, {}, /*training=*/true, 0.0,
                                                ctx->saved_data["eps"].toDouble(), /*cudnn_enabled=*/false);
      auto grads_with_graph = gradients_with_graph(ctx, {x, torch::Tensor(), weight, saved[5]}, normalized, dz);
      if (ctx->needs_input_grad(1) && ctx->saved_data["residual"].toBool()) grads_with_graph[1] = dz;
      grads_with_graph.emplace_back();  // the layer's
      return grads_with_graph;
    }
    const auto dy = grads[0].contiguous(torch::MemoryFormat::ChannelsLast);
    const Spans spans = spans_of(x);
    const int64_t c = spans.c;
    const float *g = dy.const_data_ptr<float>(), *out = y.const_data_ptr<float>(), *in = x.const_data_ptr<float>();
    const float *m = mean.const_data_ptr<float>(), *r = invstd.const_data_ptr<float>();
    const float* w = weight.const_data_ptr<float>();
    const auto wide_mean = widened(spans, std::vector<float>(m, m + c));
    const bool residual_grad = ctx->needs_input_grad(1) && ctx->saved_data["residual"].toBool();
    const auto dresidual = residual_grad ? torch::empty_like(x) : torch::Tensor();
    float* dz = residual_grad ? dresidual.data_ptr<float>() : nullptr;
    SpanSums span_sums(spans);
    over_spans(spans, [&](int64_t span, int64_t begin, int64_t end) {
      by_wide_rows(spans, begin, end, [&](int64_t row, int64_t rows, int64_t width) {
        const int64_t at = row * c;
        gradient_sums(g + at, out + at, in + at, rows, width, wide_mean.data(), dz ? dz + at : nullptr,
                      span_sums.first(span), span_sums.second(span));
      });
    });
    std::vector<double> sum_dz, sum_dz_xmu;
    span_sums.total(sum_dz, sum_dz_xmu);

    torch::Tensor dx;
    if (ctx->needs_input_grad(0)) {
      dx = torch::empty_like(x);
      std::vector<float> a(c), b(c), shift(c);
      const double n = static_cast<double>(spans.rows);
      for (int64_t i = 0; i < c; ++i) {
        const double scale = static_cast<double>(r[i]) * w[i];
        a[i] = static_cast<float>(scale);
        b[i] = static_cast<float>(-scale * r[i] * r[i] * sum_dz_xmu[i] / n);
        shift[i] = static_cast<float>(-scale * sum_dz[i] / n);
      }
      const auto wide_a = widened(spans, a), wide_b = widened(spans, b), wide_shift = widened(spans, shift);
      float* grad_in = dx.data_ptr<float>();
      over_spans(spans, [&](int64_t, int64_t begin, int64_t end) {
        by_wide_rows(spans, begin, end, [&](int64_t row, int64_t rows, int64_t width) {
          const int64_t at = row * c;
          input_gradient(g + at, out + at, dz ? dz + at : nullptr, in + at, rows, width, wide_mean.data(),
                         wide_a.data(), wide_b.data(), wide_shift.data(), grad_in + at);
        });
      });
    }
    // dweight = P * invstd and dbias = S, rounded to float.
    const auto per_channel = [&](const std::vector<double>& v, const float* times) {
      auto t = torch::empty({c}, torch::kFloat);
      float* values = t.data_ptr<float>();
      for (int64_t i = 0; i < c; ++i) values[i] = static_cast<float>(times ? v[i] * times[i] : v[i]);
      return t;
    };
    torch::Tensor grad_weight, grad_bias;
    if (ctx->needs_input_grad(2)) grad_weight = per_channel(sum_dz_xmu, r);
    if (ctx->needs_input_grad(3)) grad_bias = per_channel(sum_dz, nullptr);
    return {dx, dresidual, grad_weight, grad_bias, torch::Tensor()};
  }
};

bool float_on_cpu(const torch::Tensor& t) {
  return t.defined() && t.device().is_cpu() && t.scalar_type() == torch::kFloat;
}

bool float_vector(const torch::Tensor& t, int64_t c) {
  return float_on_cpu(t) && t.dim() == 1 && t.size(0) == c && t.is_contiguous();
}

}  // namespace

bool fused_batchnorm_relu_applies(const SyncBatchNormImpl& bn, const torch::Tensor& x, const torch::Tensor& residual) {
  const auto channels_last = torch::MemoryFormat::ChannelsLast;
  if (!float_on_cpu(x) || x.dim() != 4 || !x.is_contiguous(channels_last) || x.numel() <= x.size(1)) return false;
  if (residual.defined() &&
      (!float_on_cpu(residual) || residual.sizes() != x.sizes() || !residual.is_contiguous(channels_last)))
    return false;
  const int64_t c = x.size(1);
  return float_vector(bn.weight, c) && float_vector(bn.bias, c) && float_vector(bn.running_mean, c) &&
         float_vector(bn.running_var, c);
}

torch::Tensor fused_batchnorm_relu(SyncBatchNormImpl& bn, const torch::Tensor& x, const torch::Tensor& residual) {
  if (bn.is_training())
    return BatchNormReLUFunction::apply(x, residual.defined() ? residual : torch::empty({0}), bn.weight, bn.bias, &bn);
  // Evaluation: the running statistics, as ATen's (scale = weight / sqrt(running_var + eps)).
  const int64_t c = x.size(1);
  std::vector<float> mean(c), scale(c), bias(c);
  const float *running_mean = bn.running_mean.const_data_ptr<float>(), *running_var = bn.running_var.const_data_ptr<float>();
  const float *w = bn.weight.const_data_ptr<float>(), *b = bn.bias.const_data_ptr<float>();
  for (int64_t i = 0; i < c; ++i) {
    mean[i] = running_mean[i];
    scale[i] = static_cast<float>(w[i] / std::sqrt(static_cast<double>(running_var[i]) + bn.eps));
    bias[i] = b[i];
  }
  return normalized_relu(spans_of(x), x, residual, mean, scale, bias);
}

}  // namespace fastcpp::distributed
