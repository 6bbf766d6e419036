#pragma once
// The per-channel arithmetic of synchronized BatchNorm's channels-last kernels
// (channels_last_batchnorm_kernels.cu), compiled for the GPU and for the CPU twin in
// channels_last_batchnorm.cpp, so that the CPU's tests check the very formulas the kernels
// run. Plain C++ and CUDA: no libtorch here.
#ifdef __CUDACC__
#define FASTCPP_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define FASTCPP_HOST_DEVICE inline
#include <cmath>
#endif

namespace fastcpp::distributed::channels_last {

// A channel's count, mean and sum of squared deviations (m2) over some of its values.
struct Moments {
  float count = 0, mean = 0, m2 = 0;
};

FASTCPP_HOST_DEVICE float reciprocal_sqrt(float v) {
#ifdef __CUDA_ARCH__
  return rsqrtf(v);
#else
  return 1.0f / std::sqrt(v);
#endif
}

// Chan's parallel combination: the moments of both sets of values together.
FASTCPP_HOST_DEVICE Moments merge(const Moments& a, const Moments& b) {
  if (b.count == 0) return a;
  if (a.count == 0) return b;
  const float count = a.count + b.count, delta = b.mean - a.mean, share = b.count / count;
  return {count, a.mean + delta * share, a.m2 + b.m2 + delta * delta * a.count * share};
}

// From sums of differences to a shift (a value of the set: the sums stay small, so the
// squares lose nothing to cancellation): s1 = sum(v - shift), s2 = sum((v - shift)^2).
FASTCPP_HOST_DEVICE Moments from_shifted_sums(float count, float shift, float s1, float s2) {
  if (count == 0) return {};
  const float m2 = s2 - s1 * s1 / count;
  return {count, shift + s1 / count, m2 > 0 ? m2 : 0.0f};
}

// A peer's moments from what it shares: its mean, 1/sqrt(var + eps) and count (as
// PyTorch's gather of the ranks' statistics reads them). A constant channel's variance can
// come back a rounding below zero: it is zero.
FASTCPP_HOST_DEVICE Moments from_peer(float mean, float invstd, float count, float eps) {
  if (count == 0) return {};
  const float variance = 1.0f / (invstd * invstd) - eps;
  return {count, mean, variance > 0 ? variance * count : 0.0f};
}

// 1/sqrt(biased variance + eps): what the normalization multiplies by.
FASTCPP_HOST_DEVICE float invstd_of(const Moments& m, float eps) { return reciprocal_sqrt(m.m2 / m.count + eps); }

// The running statistics' update for one batch of every peer's values; the variance
// unbiased. A single value has no variance: the running variance keeps its value then.
FASTCPP_HOST_DEVICE void update_running(const Moments& m, float momentum, float& running_mean, float& running_var) {
  running_mean = (1 - momentum) * running_mean + momentum * m.mean;
  if (m.count > 1) running_var = (1 - momentum) * running_var + momentum * m.m2 / (m.count - 1);
}

// y = (x - mean) * invstd * weight + bias, with scale = invstd * weight.
FASTCPP_HOST_DEVICE float normalized(float x, float mean, float scale, float bias) { return (x - mean) * scale + bias; }

// What the input gradient of a channel needs from every peer's sums of dy and of dy * (x - mean).
struct InputGradCoefficients {
  float mean, mean_dy, xmu_factor, scale;
};

FASTCPP_HOST_DEVICE InputGradCoefficients input_grad_coefficients(float mean, float invstd, float weight, float sum_dy,
                                                                  float sum_dy_xmu, float count) {
  return {mean, sum_dy / count, invstd * invstd * sum_dy_xmu / count, invstd * weight};
}

// dx = (dy - mean(dy) - (x - mean) * invstd^2 * mean(dy * (x - mean))) * invstd * weight.
FASTCPP_HOST_DEVICE float input_grad(float dy, float x, const InputGradCoefficients& k) {
  return (dy - k.mean_dy - (x - k.mean) * k.xmu_factor) * k.scale;
}

}  // namespace fastcpp::distributed::channels_last
