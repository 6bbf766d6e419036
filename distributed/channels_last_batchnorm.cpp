#include "distributed/channels_last_batchnorm.h"

#include <ATen/record_function.h>
#include <torch/torch.h>

#include <atomic>
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

// ---- What the kernels and their twin read, checked before either runs: a tensor of the
// wrong shape or device would be an out-of-range read on the GPU. ----

const std::string kWho = "SyncBatchNorm's channels-last kernels: ";

void require_channels_innermost(const torch::Tensor& x) {
  if (!channels_innermost(x))
    throw Error(kWho + "the input " + c10::str(x.sizes()) + " with strides " + c10::str(x.strides()) +
                " does not hold its channels innermost (channels-last, or [N, C])");
}

// `t` (the output gradient, or the output: `what`, which `maker` makes right) as the kernels read x.
void require_laid_out_as_input(const torch::Tensor& t, const char* what, const torch::Tensor& x, const char* maker) {
  if (t.sizes() != x.sizes() || t.scalar_type() != x.scalar_type() || t.device() != x.device() ||
      !channels_innermost(t))
    throw Error(kWho + "the " + what + " " + c10::str(t.sizes()) + " " + c10::toString(t.scalar_type()) + " on " +
                t.device().str() + " is not laid out as the input " + c10::str(x.sizes()) + " " +
                c10::toString(x.scalar_type()) + " on " + x.device().str() + " (" + maker + " makes it so)");
}

void require_gradient_like(const torch::Tensor& dy, const torch::Tensor& x) {
  require_laid_out_as_input(dy, "output gradient", x, "gradient_like_input");
}

// `numel` fp32 values, contiguous, on x's device: a statistic, parameter or sum the kernels
// read or write per channel. Undefined is allowed where `optional` (no weight, no running statistics).
void require_floats_beside(const torch::Tensor& t, int64_t numel, const char* what, const torch::Tensor& x,
                           bool optional = false) {
  if (!t.defined()) {
    if (optional) return;
    throw Error(kWho + what + " is missing");
  }
  if (t.scalar_type() != torch::kFloat || t.device() != x.device() || !t.is_contiguous() || t.numel() != numel)
    throw Error(kWho + what + " must be " + std::to_string(numel) + " contiguous fp32 values on " +
                x.device().str() + ", as the input " + c10::str(x.sizes()) + " has " + std::to_string(x.size(1)) +
                " channels; got " + c10::str(t.sizes()) + " " + c10::toString(t.scalar_type()) + " on " +
                t.device().str());
}

// What both backward steps read: the input, the output gradient laid out as it, and the
// whole batch's mean and 1/std.
void require_backward_inputs(const torch::Tensor& dy, const torch::Tensor& x, const torch::Tensor& mean,
                             const torch::Tensor& invstd) {
  require_channels_innermost(x);
  require_gradient_like(dy, x);
  require_floats_beside(mean, x.size(1), "the mean", x);
  require_floats_beside(invstd, x.size(1), "the 1/std", x);
}

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

void cpu_normalize_into(Normalized& n, const torch::Tensor& x, const torch::Tensor& gathered,
                        const torch::Tensor& weight, const torch::Tensor& bias, torch::Tensor running_mean,
                        torch::Tensor running_var, float momentum, float eps) {
  const auto v = rows_of(x);
  const int64_t rows = v.size(0), channels = v.size(1), peers = gathered.size(0);
  auto y = torch::empty_like(v);
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
  // Not counted as a change of n.y by autograd, as the kernel's writes are not.
  n.y.variable_data().copy_(like(y, x));
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

torch::Tensor cuda_local_statistics(const torch::Tensor& x, float eps) {
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

void cuda_normalize_into(Normalized& n, const torch::Tensor& x, const torch::Tensor& gathered,
                         const torch::Tensor& weight, const torch::Tensor& bias, const torch::Tensor& running_mean,
                         const torch::Tensor& running_var, float momentum, float eps) {
  const c10::cuda::CUDAGuard guard(x.device());
  const auto& y = n.y;
  const auto shape = shape_of(x, {x.data_ptr(), y.data_ptr()});
  check(launch_normalize(dtype_of(x), x.data_ptr(), shape, tiling_for(x, shape), gathered.data_ptr<float>(),
                         static_cast<int>(gathered.size(0)), fp32_ptr(weight), fp32_ptr(bias), fp32_ptr(running_mean),
                         fp32_ptr(running_var), momentum, eps, y.data_ptr(), n.mean.data_ptr<float>(),
                         n.invstd.data_ptr<float>(), n.count.data_ptr<float>(), at::cuda::getCurrentCUDAStream()),
        "the normalization");
}

GradSums cuda_grad_sums(const torch::Tensor& dy, const torch::Tensor& x, const torch::Tensor& mean,
                        const torch::Tensor& invstd) {
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
  const c10::cuda::CUDAGuard guard(x.device());
  auto dx = torch::empty_like(x);
  const auto shape = shape_of(x, {x.data_ptr(), dy.data_ptr(), dx.data_ptr()});
  check(launch_input_grad(dtype_of(x), dy.data_ptr(), x.data_ptr(), shape, tiling_for(x, shape),
                          mean.data_ptr<float>(), invstd.data_ptr<float>(), fp32_ptr(weight), summed.data_ptr<float>(),
                          count.data_ptr<float>(), dx.data_ptr(), at::cuda::getCurrentCUDAStream()),
        "the input gradient");
  return dx;
}
#endif

}  // namespace

namespace {

std::atomic<KernelChoice>& chosen_kernels() {
  static std::atomic<KernelChoice> choice = [] {
    const char* name = std::getenv("FASTCPP_SYNC_BN_KERNELS");
    const std::string given = name ? name : "";
    if (given == "aten") return KernelChoice::aten;
    if (given == "twin") return KernelChoice::cpu_twin;
    if (!given.empty() && given != "auto")
      throw Error("FASTCPP_SYNC_BN_KERNELS=" + given + ": expected auto, aten or twin");
    return KernelChoice::automatic;
  }();
  return choice;
}

}  // namespace

void use_kernels(KernelChoice choice) { chosen_kernels() = choice; }

KernelChoice kernel_choice() { return chosen_kernels(); }

bool kernels_apply(const SyncBatchNormImpl& bn, const torch::Tensor& x) {
  const auto choice = kernel_choice();
  if (choice == KernelChoice::aten || (!x.is_cuda() && choice != KernelChoice::cpu_twin)) return false;
#ifndef FASTCPP_HAS_CUDA
  if (x.is_cuda()) return false;
#endif
  const auto type = x.scalar_type();
  if (x.dim() < 2 || x.numel() == 0 || x.size(1) > INT_MAX) return false;
  if (type != torch::kFloat && type != torch::kHalf && type != torch::kBFloat16) return false;
  if (!channels_innermost(x)) return false;
  const auto fp32_beside_x = [&](const torch::Tensor& t) {
    return t.defined() && t.scalar_type() == torch::kFloat && t.device() == x.device() && t.is_contiguous() &&
           t.numel() == x.size(1);
  };
  return fp32_beside_x(bn.weight) && fp32_beside_x(bn.bias) && fp32_beside_x(bn.running_mean) &&
         fp32_beside_x(bn.running_var);
}

torch::Tensor gradient_like_input(const torch::Tensor& dy, const torch::Tensor& x) {
  const auto typed = dy.to(x.scalar_type());
  return channels_innermost(typed) ? typed : typed.movedim(1, -1).contiguous().movedim(-1, 1);
}

torch::Tensor local_statistics(const torch::Tensor& x, double eps) {
  RECORD_FUNCTION("fastcpp::sync_batch_norm_statistics", std::vector<c10::IValue>());
  require_channels_innermost(x);
#ifdef FASTCPP_HAS_CUDA
  if (x.is_cuda()) return cuda_local_statistics(x, fp32(eps));
#endif
  return cpu_local_statistics(x, fp32(eps));
}

Normalized empty_normalized(const torch::Tensor& x) {
  const auto floats = x.options().dtype(torch::kFloat);
  return {at::empty_like(x), torch::empty({x.size(1)}, floats), torch::empty({x.size(1)}, floats),
          torch::empty({1}, floats)};
}

void normalize_into(Normalized& out, const torch::Tensor& x, const torch::Tensor& gathered,
                    const torch::Tensor& weight, const torch::Tensor& bias, torch::Tensor running_mean,
                    torch::Tensor running_var, double momentum, double eps) {
  RECORD_FUNCTION("fastcpp::sync_batch_norm_normalize", std::vector<c10::IValue>());
  const int64_t channels = x.size(1);
  require_channels_innermost(x);
  require_laid_out_as_input(out.y, "output", x, "empty_normalized");
  if (gathered.dim() != 2 || gathered.size(0) < 1 || gathered.size(1) != 2 * channels + 1)
    throw Error(kWho + "the gathered statistics must be [peers, " + std::to_string(2 * channels + 1) +
                "] for the input's " + std::to_string(channels) + " channels, got " + c10::str(gathered.sizes()));
  require_floats_beside(gathered, gathered.numel(), "the gathered statistics", x);
  require_floats_beside(weight, channels, "the weight", x, /*optional=*/true);
  require_floats_beside(bias, channels, "the bias", x, /*optional=*/true);
  require_floats_beside(running_mean, channels, "the running mean", x, /*optional=*/true);
  require_floats_beside(running_var, channels, "the running variance", x, /*optional=*/!running_mean.defined());
  require_floats_beside(out.mean, channels, "the mean's output", x);
  require_floats_beside(out.invstd, channels, "the 1/std's output", x);
  require_floats_beside(out.count, 1, "the count's output", x);
#ifdef FASTCPP_HAS_CUDA
  if (x.is_cuda())
    return cuda_normalize_into(out, x, gathered, weight, bias, running_mean, running_var, fp32(momentum), fp32(eps));
#endif
  cpu_normalize_into(out, x, gathered, weight, bias, running_mean, running_var, fp32(momentum), fp32(eps));
}

Normalized normalize(const torch::Tensor& x, const torch::Tensor& gathered, const torch::Tensor& weight,
                     const torch::Tensor& bias, torch::Tensor running_mean, torch::Tensor running_var,
                     double momentum, double eps) {
  auto out = empty_normalized(x);
  normalize_into(out, x, gathered, weight, bias, std::move(running_mean), std::move(running_var), momentum, eps);
  return out;
}

GradSums grad_sums(const torch::Tensor& dy, const torch::Tensor& x, const torch::Tensor& mean,
                   const torch::Tensor& invstd) {
  RECORD_FUNCTION("fastcpp::sync_batch_norm_grad_sums", std::vector<c10::IValue>());
  require_backward_inputs(dy, x, mean, invstd);
#ifdef FASTCPP_HAS_CUDA
  if (x.is_cuda()) return cuda_grad_sums(dy, x, mean, invstd);
#endif
  return cpu_grad_sums(dy, x, mean, invstd);
}

torch::Tensor input_grad(const torch::Tensor& dy, const torch::Tensor& x, const torch::Tensor& mean,
                         const torch::Tensor& invstd, const torch::Tensor& weight, const torch::Tensor& summed,
                         const torch::Tensor& count) {
  RECORD_FUNCTION("fastcpp::sync_batch_norm_input_grad", std::vector<c10::IValue>());
  require_backward_inputs(dy, x, mean, invstd);
  require_floats_beside(weight, x.size(1), "the weight", x, /*optional=*/true);
  require_floats_beside(summed, 2 * x.size(1), "the summed gradient sums", x);
  require_floats_beside(count, 1, "the count", x);
#ifdef FASTCPP_HAS_CUDA
  if (x.is_cuda()) return cuda_input_grad(dy, x, mean, invstd, weight, summed, count);
#endif
  return cpu_input_grad(dy, x, mean, invstd, weight, summed, count);
}

}  // namespace fastcpp::distributed::channels_last
