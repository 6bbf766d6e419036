#pragma once
// Synchronized BatchNorm's CUDA kernels for inputs whose channels are innermost (NHWC,
// channels-last, or [N, C]): the input seen as rows of C values. Each thread reads a pack
// of 16 bytes (8 fp16/bf16 or 4 fp32 channels) where the channels divide evenly, else one
// value; a reduction's blocks write partial results that one small kernel combines. What
// ATen's synced path does in six or seven kernels a forward (statistics, a count, their
// concatenation, the peers' combination, a cast, the normalization), these do in three,
// and the backward in three instead of four. Raw pointers and a stream: the callers
// (channels_last_batchnorm.cpp) check the tensors. Each launch returns CUDA's error, if any.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>

namespace fastcpp::distributed::channels_last {

enum class Dtype { kFloat, kHalf, kBFloat16 };

// rows x channels values; `pack` values per thread read (1, or 16 bytes' worth).
struct Shape {
  int64_t rows = 0;
  int channels = 0;
  int pack = 1;
};

// Blocks of 256 threads: block_x over the packs of channels, block_y over rows.
struct Tiling {
  int block_x = 1, block_y = 256, grid_x = 1;
  int reduce_grid_y = 1;       // blocks over rows in a reduction: the partial results
  int elementwise_grid_y = 1;  // blocks over rows in an elementwise pass
};

inline Tiling tiling(const Shape& shape, int multiprocessors) {
  Tiling t;
  const int packs = (shape.channels + shape.pack - 1) / shape.pack;
  while (t.block_x < packs && t.block_x < 32) t.block_x *= 2;
  t.block_y = 256 / t.block_x;
  t.grid_x = (packs + t.block_x - 1) / t.block_x;
  const int64_t per_block_row = t.block_y;
  // Enough blocks to keep every multiprocessor's loads in flight, each thread reading at
  // least 16 rows in a reduction (4 in an elementwise pass).
  const int64_t reduce_rows = (shape.rows + per_block_row * 16 - 1) / (per_block_row * 16);
  const int64_t elementwise_rows = (shape.rows + per_block_row * 4 - 1) / (per_block_row * 4);
  const int64_t reduce_cap = std::max<int64_t>(1, std::min<int64_t>(1024, 4 * multiprocessors / t.grid_x));
  const int64_t elementwise_cap = std::max<int64_t>(1, std::min<int64_t>(65535, 8 * multiprocessors / t.grid_x));
  t.reduce_grid_y = static_cast<int>(std::clamp<int64_t>(reduce_rows, 1, reduce_cap));
  t.elementwise_grid_y = static_cast<int>(std::clamp<int64_t>(elementwise_rows, 1, elementwise_cap));
  return t;
}

// The floats a reduction's partial results need: 2 per channel and block row, and a count per block row.
inline int64_t partials_size(const Shape& shape, const Tiling& t) {
  return static_cast<int64_t>(t.reduce_grid_y) * (2 * shape.channels + 1);
}

// This peer's statistics into out [mean (C), 1/sqrt(var + eps) (C), count (1)]: what the
// peers gather. `partials`: partials_size floats.
cudaError_t launch_statistics(Dtype dtype, const void* x, const Shape& shape, const Tiling& t, float eps,
                              float* partials, float* out, cudaStream_t stream);

// y from every peer's statistics (gathered: [peers, 2C + 1]); writes the combined mean and
// invstd (C each) and count (1), and updates the running statistics when they are given.
cudaError_t launch_normalize(Dtype dtype, const void* x, const Shape& shape, const Tiling& t, const float* gathered,
                             int peers, const float* weight, const float* bias, float* running_mean,
                             float* running_var, float momentum, float eps, void* y, float* mean, float* invstd,
                             float* count, cudaStream_t stream);

// This peer's backward sums into sums [sum dy (C), sum dy * (x - mean) (C)], and the
// weight's and bias's gradients from them (this peer's own, as DDP wants them).
cudaError_t launch_grad_sums(Dtype dtype, const void* dy, const void* x, const Shape& shape, const Tiling& t,
                             const float* mean, const float* invstd, float* partials, float* sums, float* grad_weight,
                             float* grad_bias, cudaStream_t stream);

// dx from every peer's backward sums (summed: 2C) and the combined count.
cudaError_t launch_input_grad(Dtype dtype, const void* dy, const void* x, const Shape& shape, const Tiling& t,
                              const float* mean, const float* invstd, const float* weight, const float* summed,
                              const float* count, void* dx, cudaStream_t stream);

}  // namespace fastcpp::distributed::channels_last
