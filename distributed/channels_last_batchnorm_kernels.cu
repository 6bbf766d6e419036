#include "distributed/channels_last_batchnorm_kernels.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

#include "distributed/channels_last_batchnorm_math.h"

namespace fastcpp::distributed::channels_last {
namespace {

constexpr int kThreads = 256;  // a block's threads (block_x * block_y)
constexpr int kLoads = 4;      // rows a thread reads before it uses them: loads in flight

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }

template <class T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ float from_float<float>(float v) { return v; }
template <>
__device__ __forceinline__ __half from_float<__half>(float v) { return __float2half_rn(v); }
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

// PACK values read or written as one access (16 bytes when PACK > 1).
template <class T, int PACK>
struct alignas(sizeof(T) * PACK) Pack {
  T v[PACK];
};

template <class T, int PACK>
__device__ __forceinline__ void load(const T* p, float (&out)[PACK]) {
  const Pack<T, PACK> pack = *reinterpret_cast<const Pack<T, PACK>*>(p);
#pragma unroll
  for (int i = 0; i < PACK; ++i) out[i] = to_float(pack.v[i]);
}

template <class T, int PACK>
__device__ __forceinline__ void store(T* p, const float (&in)[PACK]) {
  Pack<T, PACK> pack;
#pragma unroll
  for (int i = 0; i < PACK; ++i) pack.v[i] = from_float<T>(in[i]);
  *reinterpret_cast<Pack<T, PACK>*>(p) = pack;
}

// This thread's rows of its block row, kLoads at a time so that their loads are in flight
// together: use(row, values of a, values of b) for each (b read only when kTwo).
template <class T, int PACK, bool kTwo, class Use>
__device__ __forceinline__ void for_each_row(const T* a, const T* b, int64_t rows, int channels, int c0, Use use) {
  const int64_t step = static_cast<int64_t>(gridDim.y) * blockDim.y;
  for (int64_t row = static_cast<int64_t>(blockIdx.y) * blockDim.y + threadIdx.y; row < rows; row += kLoads * step) {
    float va[kLoads][PACK], vb[kLoads][kTwo ? PACK : 1];
#pragma unroll
    for (int j = 0; j < kLoads; ++j)
      if (row + j * step < rows) {
        load<T, PACK>(a + (row + j * step) * channels + c0, va[j]);
        if constexpr (kTwo) load<T, PACK>(b + (row + j * step) * channels + c0, vb[j]);
      }
#pragma unroll
    for (int j = 0; j < kLoads; ++j) {
      if (row + j * step >= rows) break;
      use(row + j * step, va[j], vb[j]);
    }
  }
}

// A tree over threadIdx.y in shared memory, after which thread (x, 0) holds what every
// thread (x, y) held, combined: save(slot) writes this thread's values into its slot,
// combine(other) folds in another slot's.
template <class Save, class Combine>
__device__ void tree_over_rows(Save save, Combine combine) {
  const int slot = threadIdx.y * blockDim.x + threadIdx.x;
  save(slot);
  for (int half = blockDim.y / 2; half > 0; half /= 2) {
    __syncthreads();
    if (threadIdx.y < half) {
      combine(slot + half * blockDim.x);
      save(slot);
    }
  }
}

// The block's moments of each channel (one count for a thread's PACK channels).
template <int PACK>
__device__ void merge_over_rows(float* s_count, float* s_mean, float* s_m2, Moments (&m)[PACK]) {
  tree_over_rows(
      [&](int slot) {
        s_count[slot] = m[0].count;
#pragma unroll
        for (int i = 0; i < PACK; ++i) {
          s_mean[slot * PACK + i] = m[i].mean;
          s_m2[slot * PACK + i] = m[i].m2;
        }
      },
      [&](int other) {
#pragma unroll
        for (int i = 0; i < PACK; ++i)
          m[i] = merge(m[i], Moments{s_count[other], s_mean[other * PACK + i], s_m2[other * PACK + i]});
      });
}

// The block's two sums of each channel.
template <int PACK>
__device__ void sum_over_rows(float* s_a, float* s_b, float (&a)[PACK], float (&b)[PACK]) {
  tree_over_rows(
      [&](int slot) {
#pragma unroll
        for (int i = 0; i < PACK; ++i) {
          s_a[slot * PACK + i] = a[i];
          s_b[slot * PACK + i] = b[i];
        }
      },
      [&](int other) {
#pragma unroll
        for (int i = 0; i < PACK; ++i) {
          a[i] += s_a[other * PACK + i];
          b[i] += s_b[other * PACK + i];
        }
      });
}

// Partial moments of each block row's share of the rows: partial_mean and partial_m2
// [reduce_grid_y, C], partial_count [reduce_grid_y].
template <class T, int PACK>
__global__ void __launch_bounds__(kThreads) statistics_partials(const T* __restrict__ x, int64_t rows, int channels,
                                                                 float* partial_mean, float* partial_m2,
                                                                 float* partial_count) {
  __shared__ float s_count[kThreads], s_mean[kThreads * PACK], s_m2[kThreads * PACK];
  const int c0 = (blockIdx.x * blockDim.x + threadIdx.x) * PACK;
  const bool has_channels = c0 < channels;
  const int64_t first_row = static_cast<int64_t>(blockIdx.y) * blockDim.y + threadIdx.y;
  float shift[PACK], s1[PACK], s2[PACK], count = 0;
#pragma unroll
  for (int i = 0; i < PACK; ++i) shift[i] = s1[i] = s2[i] = 0;
  if (has_channels && first_row < rows) {
    load<T, PACK>(x + first_row * channels + c0, shift);
    for_each_row<T, PACK, false>(x, x, rows, channels, c0, [&](int64_t, const float(&v)[PACK], const float(&)[1]) {
      count += 1;
#pragma unroll
      for (int i = 0; i < PACK; ++i) {
        const float d = v[i] - shift[i];
        s1[i] += d;
        s2[i] = fmaf(d, d, s2[i]);
      }
    });
  }
  Moments m[PACK];
#pragma unroll
  for (int i = 0; i < PACK; ++i) m[i] = from_shifted_sums(count, shift[i], s1[i], s2[i]);
  merge_over_rows<PACK>(s_count, s_mean, s_m2, m);
  if (threadIdx.y != 0) return;
  if (has_channels)
#pragma unroll
    for (int i = 0; i < PACK; ++i) {
      partial_mean[static_cast<int64_t>(blockIdx.y) * channels + c0 + i] = m[i].mean;
      partial_m2[static_cast<int64_t>(blockIdx.y) * channels + c0 + i] = m[i].m2;
    }
  if (blockIdx.x == 0 && threadIdx.x == 0) partial_count[blockIdx.y] = m[0].count;
}

// Blocks of 32 channels x 8: the partials of each channel merged into out [mean, invstd, count].
__global__ void __launch_bounds__(kThreads) statistics_combine(const float* partial_mean, const float* partial_m2,
                                                                const float* partial_count, int parts, int channels,
                                                                float eps, float* out) {
  __shared__ float s_count[kThreads], s_mean[kThreads], s_m2[kThreads];
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  Moments m[1];
  if (c < channels)
    for (int p = threadIdx.y; p < parts; p += blockDim.y)
      m[0] = merge(m[0], Moments{partial_count[p], partial_mean[static_cast<int64_t>(p) * channels + c],
                                 partial_m2[static_cast<int64_t>(p) * channels + c]});
  // Every thread's count takes part, those of channels past the end included (they merged nothing).
  merge_over_rows<1>(s_count, s_mean, s_m2, m);
  if (threadIdx.y != 0 || c >= channels) return;
  out[c] = m[0].mean;
  out[channels + c] = invstd_of(m[0], eps);
  if (c == 0) out[2 * channels] = m[0].count;
}

// The block's channels' combined statistics, from every peer's, into shared memory
// (mean, invstd * weight, bias); the first block row also writes them out and updates the
// running statistics.
__device__ void combine_peers(const float* gathered, int peers, int channels, const float* weight, const float* bias,
                              float* running_mean, float* running_var, float momentum, float eps, float* mean_out,
                              float* invstd_out, float* count_out, int block_channels, float* s_mean, float* s_scale,
                              float* s_bias) {
  const int first = blockIdx.x * block_channels, t = threadIdx.y * blockDim.x + threadIdx.x;
  for (int k = t; k < block_channels; k += blockDim.x * blockDim.y) {
    const int c = first + k;
    if (c >= channels) break;
    Moments m;
    for (int p = 0; p < peers; ++p) {
      const float* peer = gathered + static_cast<int64_t>(p) * (2 * channels + 1);
      m = merge(m, from_peer(peer[c], peer[channels + c], peer[2 * channels], eps));
    }
    const float invstd = invstd_of(m, eps);
    s_mean[k] = m.mean;
    s_scale[k] = invstd * (weight ? weight[c] : 1.0f);
    s_bias[k] = bias ? bias[c] : 0.0f;
    if (blockIdx.y != 0) continue;
    mean_out[c] = m.mean;
    invstd_out[c] = invstd;
    if (running_mean) update_running(m, momentum, running_mean[c], running_var[c]);
    if (c == 0) *count_out = m.count;
  }
  __syncthreads();
}

template <class T, int PACK>
__global__ void __launch_bounds__(kThreads)
    normalize_rows(const T* __restrict__ x, int64_t rows, int channels, const float* gathered, int peers,
                   const float* weight, const float* bias, float* running_mean, float* running_var, float momentum,
                   float eps, T* __restrict__ y, float* mean_out, float* invstd_out, float* count_out) {
  __shared__ float s_mean[kThreads], s_scale[kThreads], s_bias[kThreads];
  combine_peers(gathered, peers, channels, weight, bias, running_mean, running_var, momentum, eps, mean_out,
                invstd_out, count_out, blockDim.x * PACK, s_mean, s_scale, s_bias);
  const int local = threadIdx.x * PACK, c0 = blockIdx.x * blockDim.x * PACK + local;
  if (c0 >= channels) return;
  for_each_row<T, PACK, false>(x, x, rows, channels, c0, [&](int64_t row, const float(&v)[PACK], const float(&)[1]) {
    float out[PACK];
#pragma unroll
    for (int i = 0; i < PACK; ++i) out[i] = normalized(v[i], s_mean[local + i], s_scale[local + i], s_bias[local + i]);
    store<T, PACK>(y + row * channels + c0, out);
  });
}

// Partial sums of dy and dy * (x - mean): [reduce_grid_y, C] each.
template <class T, int PACK>
__global__ void __launch_bounds__(kThreads) grad_partials(const T* __restrict__ dy, const T* __restrict__ x,
                                                           int64_t rows, int channels, const float* mean,
                                                           float* partial_dy, float* partial_dy_xmu) {
  __shared__ float s_a[kThreads * PACK], s_b[kThreads * PACK];
  const int c0 = (blockIdx.x * blockDim.x + threadIdx.x) * PACK;
  const bool has_channels = c0 < channels;
  float m[PACK], sum_dy[PACK], sum_dy_xmu[PACK];
#pragma unroll
  for (int i = 0; i < PACK; ++i) {
    m[i] = has_channels ? mean[c0 + i] : 0.0f;
    sum_dy[i] = sum_dy_xmu[i] = 0;
  }
  if (has_channels)
    for_each_row<T, PACK, true>(dy, x, rows, channels, c0, [&](int64_t, const float(&g)[PACK], const float(&v)[PACK]) {
#pragma unroll
      for (int i = 0; i < PACK; ++i) {
        sum_dy[i] += g[i];
        sum_dy_xmu[i] = fmaf(g[i], v[i] - m[i], sum_dy_xmu[i]);
      }
    });
  sum_over_rows<PACK>(s_a, s_b, sum_dy, sum_dy_xmu);
  if (threadIdx.y != 0 || !has_channels) return;
#pragma unroll
  for (int i = 0; i < PACK; ++i) {
    partial_dy[static_cast<int64_t>(blockIdx.y) * channels + c0 + i] = sum_dy[i];
    partial_dy_xmu[static_cast<int64_t>(blockIdx.y) * channels + c0 + i] = sum_dy_xmu[i];
  }
}

// Blocks of 32 channels x 8: the partial sums added into sums [sum dy, sum dy_xmu], and the
// weight's and bias's gradients.
__global__ void __launch_bounds__(kThreads)
    grad_combine(const float* partial_dy, const float* partial_dy_xmu, int parts, int channels, const float* invstd,
                 float* sums, float* grad_weight, float* grad_bias) {
  __shared__ float s_a[kThreads], s_b[kThreads];
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  float a[1] = {0}, b[1] = {0};
  if (c < channels)
    for (int p = threadIdx.y; p < parts; p += blockDim.y) {
      a[0] += partial_dy[static_cast<int64_t>(p) * channels + c];
      b[0] += partial_dy_xmu[static_cast<int64_t>(p) * channels + c];
    }
  sum_over_rows<1>(s_a, s_b, a, b);
  if (threadIdx.y != 0 || c >= channels) return;
  sums[c] = a[0];
  sums[channels + c] = b[0];
  if (grad_weight) grad_weight[c] = b[0] * invstd[c];
  if (grad_bias) grad_bias[c] = a[0];
}

template <class T, int PACK>
__global__ void __launch_bounds__(kThreads)
    input_grad_rows(const T* __restrict__ dy, const T* __restrict__ x, int64_t rows, int channels, const float* mean,
                    const float* invstd, const float* weight, const float* summed, const float* count,
                    T* __restrict__ dx) {
  __shared__ InputGradCoefficients s_k[kThreads];
  const int block_channels = blockDim.x * PACK, first = blockIdx.x * block_channels;
  const int t = threadIdx.y * blockDim.x + threadIdx.x;
  for (int k = t; k < block_channels && first + k < channels; k += blockDim.x * blockDim.y) {
    const int c = first + k;
    s_k[k] = input_grad_coefficients(mean[c], invstd[c], weight ? weight[c] : 1.0f, summed[c], summed[channels + c],
                                     *count);
  }
  __syncthreads();
  const int local = threadIdx.x * PACK, c0 = first + local;
  if (c0 >= channels) return;
  for_each_row<T, PACK, true>(dy, x, rows, channels, c0, [&](int64_t row, const float(&g)[PACK], const float(&v)[PACK]) {
    float out[PACK];
#pragma unroll
    for (int i = 0; i < PACK; ++i) out[i] = input_grad(g[i], v[i], s_k[local + i]);
    store<T, PACK>(dx + row * channels + c0, out);
  });
}

// Calls f(T{}, std::integral_constant<int, PACK>{}) with dtype's CUDA type and a pack width
// the kernels have: 16 bytes' worth of T, or 1.
template <class T, class F>
cudaError_t with_pack(int pack, F& f) {
  constexpr int kWide = 16 / sizeof(T);
  if (pack == 1) return f(T{}, std::integral_constant<int, 1>{});
  if (pack == kWide) return f(T{}, std::integral_constant<int, kWide>{});
  return cudaErrorInvalidValue;
}

template <class F>
cudaError_t dispatch(Dtype dtype, int pack, F f) {
  switch (dtype) {
    case Dtype::kFloat: return with_pack<float>(pack, f);
    case Dtype::kHalf: return with_pack<__half>(pack, f);
    case Dtype::kBFloat16: return with_pack<__nv_bfloat16>(pack, f);
  }
  return cudaErrorInvalidValue;
}

dim3 combine_grid(int channels) { return dim3((channels + 31) / 32); }
const dim3 kCombineBlock(32, 8);

}  // namespace

cudaError_t launch_statistics(Dtype dtype, const void* x, const Shape& shape, const Tiling& t, float eps,
                              float* partials, float* out, cudaStream_t stream) {
  float* partial_mean = partials;
  float* partial_m2 = partials + static_cast<int64_t>(t.reduce_grid_y) * shape.channels;
  float* partial_count = partial_m2 + static_cast<int64_t>(t.reduce_grid_y) * shape.channels;
  const cudaError_t launched = dispatch(dtype, shape.pack, [&](auto type, auto pack) {
    using T = decltype(type);
    constexpr int P = decltype(pack)::value;
    statistics_partials<T, P><<<dim3(t.grid_x, t.reduce_grid_y), dim3(t.block_x, t.block_y), 0, stream>>>(
        static_cast<const T*>(x), shape.rows, shape.channels, partial_mean, partial_m2, partial_count);
    return cudaGetLastError();
  });
  if (launched != cudaSuccess) return launched;
  statistics_combine<<<combine_grid(shape.channels), kCombineBlock, 0, stream>>>(
      partial_mean, partial_m2, partial_count, t.reduce_grid_y, shape.channels, eps, out);
  return cudaGetLastError();
}

cudaError_t launch_normalize(Dtype dtype, const void* x, const Shape& shape, const Tiling& t, const float* gathered,
                             int peers, const float* weight, const float* bias, float* running_mean,
                             float* running_var, float momentum, float eps, void* y, float* mean, float* invstd,
                             float* count, cudaStream_t stream) {
  return dispatch(dtype, shape.pack, [&](auto type, auto pack) {
    using T = decltype(type);
    constexpr int P = decltype(pack)::value;
    normalize_rows<T, P><<<dim3(t.grid_x, t.elementwise_grid_y), dim3(t.block_x, t.block_y), 0, stream>>>(
        static_cast<const T*>(x), shape.rows, shape.channels, gathered, peers, weight, bias, running_mean,
        running_var, momentum, eps, static_cast<T*>(y), mean, invstd, count);
    return cudaGetLastError();
  });
}

cudaError_t launch_grad_sums(Dtype dtype, const void* dy, const void* x, const Shape& shape, const Tiling& t,
                             const float* mean, const float* invstd, float* partials, float* sums, float* grad_weight,
                             float* grad_bias, cudaStream_t stream) {
  float* partial_dy = partials;
  float* partial_dy_xmu = partials + static_cast<int64_t>(t.reduce_grid_y) * shape.channels;
  const cudaError_t launched = dispatch(dtype, shape.pack, [&](auto type, auto pack) {
    using T = decltype(type);
    constexpr int P = decltype(pack)::value;
    grad_partials<T, P><<<dim3(t.grid_x, t.reduce_grid_y), dim3(t.block_x, t.block_y), 0, stream>>>(
        static_cast<const T*>(dy), static_cast<const T*>(x), shape.rows, shape.channels, mean, partial_dy,
        partial_dy_xmu);
    return cudaGetLastError();
  });
  if (launched != cudaSuccess) return launched;
  grad_combine<<<combine_grid(shape.channels), kCombineBlock, 0, stream>>>(
      partial_dy, partial_dy_xmu, t.reduce_grid_y, shape.channels, invstd, sums, grad_weight, grad_bias);
  return cudaGetLastError();
}

cudaError_t launch_input_grad(Dtype dtype, const void* dy, const void* x, const Shape& shape, const Tiling& t,
                              const float* mean, const float* invstd, const float* weight, const float* summed,
                              const float* count, void* dx, cudaStream_t stream) {
  return dispatch(dtype, shape.pack, [&](auto type, auto pack) {
    using T = decltype(type);
    constexpr int P = decltype(pack)::value;
    input_grad_rows<T, P><<<dim3(t.grid_x, t.elementwise_grid_y), dim3(t.block_x, t.block_y), 0, stream>>>(
        static_cast<const T*>(dy), static_cast<const T*>(x), shape.rows, shape.channels, mean, invstd, weight,
        summed, count, static_cast<T*>(dx));
    return cudaGetLastError();
  });
}

}  // namespace fastcpp::distributed::channels_last
