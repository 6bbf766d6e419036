#include "distributed/channels_last_batchnorm.h"

#include <torch/torch.h>

#include <climits>
#include <cstdlib>
#include <string>

#include "core/error.h"
#include "distributed/channels_last_batchnorm_math.h"
#include "distributed/sync_batchnorm.h"

#ifdef FASTCPP_HAS_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include "distributed/channels_last_batchnorm_kernels.h"
#endif

namespace fastcpp::distributed::channels_last {
namespace {

// t.movedim(1, -1).is_contiguous() without making the view: this runs per layer and step.
bool channels_innermost(const torch::Tensor& t) {
  int64_t expected = 1;
  const auto dense = [&](int64_t dim) {
    if (t.size(dim) != 1 && t.stride(dim) != expected) return false;
    expected *= t.size(dim);
    return true;
  };
  if (!dense(1)) return false;
  for (int64_t dim = t.dim() - 1; dim >= 2; --dim)
    if (!dense(dim)) return false;
  return dense(0);
}

float fp32(double v) { return static_cast<float>(v); }

// ---- The CPU twin: the kernels' formulas over [rows, C] in fp32, the rows read in the
// kernels' interleaved groups (each with its own shift), for the tests. ----

torch::Tensor rows_of(const torch::Tensor& x) {
  return x.movedim(1, -1).reshape({-1, x.size(1)}).to(torch::kFloat).contiguous();
}

// [rows, C] back to x's shape, dtype and layout.
torch::Tensor like(const torch::Tensor& rows, const torch::Tensor& x) {
  auto sizes = x.movedim(1, -1).sizes().vec();
  return rows.view(sizes).movedim(-1, 1).to(x.scalar_type()).contiguous(x.suggest_memory_format());
}

torch::Tensor cpu_local_statistics(const torch::Tensor& x, float eps) {
  const auto v = rows_of(x);
  const int64_t rows = v.size(0), channels = v.size(1), groups = std::min<int64_t>(rows, 3);
  const float* p = v.data_ptr<float>();
  auto out = torch::empty({2 * channels + 1});
  float* o = out.data_ptr<float>();
  for (int64_t c = 0; c < channels; ++c) {
    Moments m;
    for (int64_t g = 0; g < groups; ++g) {
      const float shift = p[g * channels + c];
      float count = 0, s1 = 0, s2 = 0;
      for (int64_t r = g; r < rows; r += groups, ++count) {
        const float d = p[r * channels + c] - shift;
        s1 += d;
        s2 += d * d;
      }
      m = merge(m, from_shifted_sums(count, shift, s1, s2));
    }
    o[c] = m.mean;
    o[channels + c] = invstd_of(m, eps);
  }
  o[2 * channels] = static_cast<float>(rows);
  return out;
}

// The twin reads fp32 parameters and statistics, as the kernels do.
const float* floats_of(const torch::Tensor& t) { return t.data_ptr<float>(); }

Normalized cpu_normalize(const torch::Tensor& x, const torch::Tensor& gathered, const torch::Tensor& weight,
                         const torch::Tensor& bias, torch::Tensor running_mean, torch::Tensor running_var,
                         float momentum, float eps) {
  const auto v = rows_of(x);
  const int64_t rows = v.size(0), channels = v.size(1), peers = gathered.size(0);
  auto y = torch::empty_like(v);
  Normalized n{{}, torch::empty({channels}), torch::empty({channels}), torch::empty({1})};
  const float *in = floats_of(v), *g = floats_of(gathered), *w = floats_of(weight), *b = floats_of(bias);
  float *out = y.data_ptr<float>(), *mean = n.mean.data_ptr<float>(), *invstd = n.invstd.data_ptr<float>();
  for (int64_t c = 0; c < channels; ++c) {
    Moments m;
    for (int64_t peer = 0; peer < peers; ++peer) {
      const float* s = g + peer * (2 * channels + 1);
      m = merge(m, from_peer(s[c], s[channels + c], s[2 * channels], eps));
    }
    mean[c] = m.mean;
    invstd[c] = invstd_of(m, eps);
    n.count.data_ptr<float>()[0] = m.count;
    if (running_mean.defined())
      update_running(m, momentum, running_mean.data_ptr<float>()[c], running_var.data_ptr<float>()[c]);
    for (int64_t r = 0; r < rows; ++r)
      out[r * channels + c] = normalized(in[r * channels + c], m.mean, invstd[c] * w[c], b[c]);
  }
  n.y = like(y, x);
  return n;
}

GradSums cpu_grad_sums(const torch::Tensor& dy, const torch::Tensor& x, const torch::Tensor& mean,
                       const torch::Tensor& invstd) {
  const auto g = rows_of(dy), v = rows_of(x);
  const int64_t rows = v.size(0), channels = v.size(1);
  auto sums = torch::zeros({2 * channels});
  const float *grad = floats_of(g), *in = floats_of(v), *m = floats_of(mean);
  float* s = sums.data_ptr<float>();
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < channels; ++c) {
      const float d = grad[r * channels + c];
      s[c] += d;
      s[channels + c] += d * (in[r * channels + c] - m[c]);
    }
  return {sums, sums.narrow(0, channels, channels) * invstd, sums.narrow(0, 0, channels).clone()};
}

torch::Tensor cpu_input_grad(const torch::Tensor& dy, const torch::Tensor& x, const torch::Tensor& mean,
                             const torch::Tensor& invstd, const torch::Tensor& weight, const torch::Tensor& summed,
                             const torch::Tensor& count) {
  const auto g = rows_of(dy), v = rows_of(x);
  const int64_t rows = v.size(0), channels = v.size(1);
  auto dx = torch::empty_like(v);
  const float *grad = floats_of(g), *in = floats_of(v), *s = floats_of(summed);
  float* out = dx.data_ptr<float>();
  for (int64_t c = 0; c < channels; ++c) {
    const auto k = input_grad_coefficients(floats_of(mean)[c], floats_of(invstd)[c], floats_of(weight)[c], s[c],
                                           s[channels + c], floats_of(count)[0]);
    for (int64_t r = 0; r < rows; ++r)
      out[r * channels + c] = input_grad(grad[r * channels + c], in[r * channels + c], k);
  }
  return like(dx, x);
}

#ifdef FASTCPP_HAS_CUDA
// ---- CUDA: the kernels, on x's device and current stream. ----

Dtype dtype_of(const torch::Tensor& x) {
  switch (x.scalar_type()) {
    case torch::kFloat: return Dtype::kFloat;
    case torch::kHalf: return Dtype::kHalf;
    case torch::kBFloat16: return Dtype::kBFloat16;
    default: throw Error("SyncBatchNorm's CUDA kernels: no kernel for " + std::string(c10::toString(x.scalar_type())));
  }
}

// The shape as rows of channels, read 16 bytes at a time where the channels and every
// tensor's address allow it.
Shape shape_of(const torch::Tensor& x, std::initializer_list<const void*> addresses) {
  Shape shape{x.numel() / x.size(1), static_cast<int>(x.size(1)), static_cast<int>(16 / x.element_size())};
  bool aligned = shape.channels % shape.pack == 0;
  for (const void* p : addresses) aligned = aligned && reinterpret_cast<uintptr_t>(p) % 16 == 0;
  if (!aligned) shape.pack = 1;
  return shape;
}

Tiling tiling_for(const torch::Tensor& x, const Shape& shape) {
  return tiling(shape, at::cuda::getDeviceProperties(x.device().index())->multiProcessorCount);
}

void check(cudaError_t error, const char* kernel) {
  if (error != cudaSuccess)
    throw Error(std::string("SyncBatchNorm's CUDA kernels: launching ") + kernel +
                " failed: " + cudaGetErrorString(error));
}

float* fp32_ptr(const torch::Tensor& t) { return t.defined() ? t.data_ptr<float>() : nullptr; }

void require_channels_innermost(const torch::Tensor& x) {
  if (!channels_innermost(x))
    throw Error("SyncBatchNorm's CUDA kernels: the input " + c10::str(x.sizes()) + " with strides " +
                c10::str(x.strides()) + " does not hold its channels innermost (channels-last, or [N, C])");
}

void require_gradient_like(const torch::Tensor& dy, const torch::Tensor& x) {
  if (dy.sizes() != x.sizes() || dy.scalar_type() != x.scalar_type() || !channels_innermost(dy))
    throw Error("SyncBatchNorm's CUDA kernels: the output gradient " + c10::str(dy.sizes()) + " " +
                c10::toString(dy.scalar_type()) + " is not laid out as the input " + c10::str(x.sizes()) + " " +
                c10::toString(x.scalar_type()) + " (gradient_like_input makes it so)");
}

torch::Tensor cuda_local_statistics(const torch::Tensor& x, float eps) {
  require_channels_innermost(x);
  const c10::cuda::CUDAGuard guard(x.device());
  const auto shape = shape_of(x, {x.data_ptr()});
  const auto t = tiling_for(x, shape);
  const auto floats = x.options().dtype(torch::kFloat);
  auto partials = torch::empty({partials_size(shape, t)}, floats), out = torch::empty({2 * shape.channels + 1}, floats);
  check(launch_statistics(dtype_of(x), x.data_ptr(), shape, t, eps, partials.data_ptr<float>(), out.data_ptr<float>(),
                          at::cuda::getCurrentCUDAStream()),
        "the statistics");
  return out;
}

Normalized cuda_normalize(const torch::Tensor& x, const torch::Tensor& gathered, const torch::Tensor& weight,
                          const torch::Tensor& bias, const torch::Tensor& running_mean,
                          const torch::Tensor& running_var, float momentum, float eps) {
  require_channels_innermost(x);
  const c10::cuda::CUDAGuard guard(x.device());
  auto y = torch::empty_like(x);
  const auto shape = shape_of(x, {x.data_ptr(), y.data_ptr()});
  const auto floats = x.options().dtype(torch::kFloat);
  Normalized n{y, torch::empty({shape.channels}, floats), torch::empty({shape.channels}, floats),
               torch::empty({1}, floats)};
  const auto g = gathered.to(floats).contiguous();
  check(launch_normalize(dtype_of(x), x.data_ptr(), shape, tiling_for(x, shape), g.data_ptr<float>(),
                         static_cast<int>(g.size(0)), fp32_ptr(weight), fp32_ptr(bias), fp32_ptr(running_mean),
                         fp32_ptr(running_var), momentum, eps, y.data_ptr(), n.mean.data_ptr<float>(),
                         n.invstd.data_ptr<float>(), n.count.data_ptr<float>(), at::cuda::getCurrentCUDAStream()),
        "the normalization");
  return n;
}

GradSums cuda_grad_sums(const torch::Tensor& dy, const torch::Tensor& x, const torch::Tensor& mean,
                        const torch::Tensor& invstd) {
  require_channels_innermost(x);
  require_gradient_like(dy, x);
  const c10::cuda::CUDAGuard guard(x.device());
  const auto shape = shape_of(x, {x.data_ptr(), dy.data_ptr()});
  const auto t = tiling_for(x, shape);
  const auto floats = x.options().dtype(torch::kFloat);
  auto partials = torch::empty({partials_size(shape, t)}, floats);
  GradSums g{torch::empty({2 * shape.channels}, floats), torch::empty({shape.channels}, floats),
             torch::empty({shape.channels}, floats)};
  check(launch_grad_sums(dtype_of(x), dy.data_ptr(), x.data_ptr(), shape, t, mean.data_ptr<float>(),
                         invstd.data_ptr<float>(), partials.data_ptr<float>(), g.sums.data_ptr<float>(),
                         g.grad_weight.data_ptr<float>(), g.grad_bias.data_ptr<float>(),
                         at::cuda::getCurrentCUDAStream()),
        "the backward sums");
  return g;
}

torch::Tensor cuda_input_grad(const torch::Tensor& dy, const torch::Tensor& x, const torch::Tensor& mean,
                              const torch::Tensor& invstd, const torch::Tensor& weight, const torch::Tensor& summed,
                              const torch::Tensor& count) {
  require_channels_innermost(x);
  require_gradient_like(dy, x);
  const c10::cuda::CUDAGuard guard(x.device());
  auto dx = torch::empty_like(x);
  const auto shape = shape_of(x, {x.data_ptr(), dy.data_ptr(), dx.data_ptr()});
  const auto s = summed.to(torch::kFloat).contiguous();
  check(launch_input_grad(dtype_of(x), dy.data_ptr(), x.data_ptr(), shape, tiling_for(x, shape),
                          mean.data_ptr<float>(), invstd.data_ptr<float>(), fp32_ptr(weight), s.data_ptr<float>(),
                          count.data_ptr<float>(), dx.data_ptr(), at::cuda::getCurrentCUDAStream()),
        "the input gradient");
  return dx;
}
#endif

}  // namespace

bool kernels_apply(const SyncBatchNormImpl& bn, const torch::Tensor& x) {
#ifdef FASTCPP_HAS_CUDA
  static const bool aten = [] {
    const char* choice = std::getenv("FASTCPP_SYNC_BN_KERNELS");
    return choice && std::string(choice) == "aten";
  }();
  const auto type = x.scalar_type();
  if (aten || !x.is_cuda() || x.dim() < 2 || x.numel() == 0 || x.size(1) > INT_MAX) return false;
  if (type != torch::kFloat && type != torch::kHalf && type != torch::kBFloat16) return false;
  if (!channels_innermost(x)) return false;
  const auto fp32_beside_x = [&](const torch::Tensor& t) {
    return t.defined() && t.scalar_type() == torch::kFloat && t.device() == x.device() && t.is_contiguous() &&
           t.numel() == x.size(1);
  };
  return fp32_beside_x(bn.weight) && fp32_beside_x(bn.bias) && fp32_beside_x(bn.running_mean) &&
         fp32_beside_x(bn.running_var);
#else
  return false;
#endif
}

torch::Tensor gradient_like_input(const torch::Tensor& dy, const torch::Tensor& x) {
  const auto typed = dy.to(x.scalar_type());
  return channels_innermost(typed) ? typed : typed.movedim(1, -1).contiguous().movedim(-1, 1);
}

torch::Tensor local_statistics(const torch::Tensor& x, double eps) {
#ifdef FASTCPP_HAS_CUDA
  if (x.is_cuda()) return cuda_local_statistics(x, fp32(eps));
#endif
  return cpu_local_statistics(x, fp32(eps));
}

Normalized normalize(const torch::Tensor& x, const torch::Tensor& gathered, const torch::Tensor& weight,
                     const torch::Tensor& bias, torch::Tensor running_mean, torch::Tensor running_var,
                     double momentum, double eps) {
#ifdef FASTCPP_HAS_CUDA
  if (x.is_cuda())
    return cuda_normalize(x, gathered, weight, bias, running_mean, running_var, fp32(momentum), fp32(eps));
#endif
  return cpu_normalize(x, gathered, weight, bias, running_mean, running_var, fp32(momentum), fp32(eps));
}

GradSums grad_sums(const torch::Tensor& dy, const torch::Tensor& x, const torch::Tensor& mean,
                   const torch::Tensor& invstd) {
#ifdef FASTCPP_HAS_CUDA
  if (x.is_cuda()) return cuda_grad_sums(dy, x, mean, invstd);
#endif
  return cpu_grad_sums(dy, x, mean, invstd);
}

torch::Tensor input_grad(const torch::Tensor& dy, const torch::Tensor& x, const torch::Tensor& mean,
                         const torch::Tensor& invstd, const torch::Tensor& weight, const torch::Tensor& summed,
                         const torch::Tensor& count) {
#ifdef FASTCPP_HAS_CUDA
  if (x.is_cuda()) return cuda_input_grad(dy, x, mean, invstd, weight, summed, count);
#endif
  return cpu_input_grad(dy, x, mean, invstd, weight, summed, count);
}

}  // namespace fastcpp::distributed::channels_last
