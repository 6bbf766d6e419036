#pragma once
// A float matrix product on one CPU thread, in AVX-512 register blocks: 14 rows by 32
// columns of the result held in 28 of the 32 registers while the shared dimension streams
// through, the left matrix read in any strides (a transposed view costs nothing). For the
// many mid-sized products of a Winograd convolution (36 of [256, 128] x [128, 128] a
// layer) it runs at about 85% of a Zen 4 core's peak, where MKL's batched product, whose
// kernels on AMD CPUs are its generic ones, reaches about half (bench_cpu_kernels).
#include <cstdint>

namespace fastcpp {

// Element (r, k) at data[r * row + k * column].
struct MatrixView {
  const float* data;
  int64_t row, column;
};

// The rows of its register block: a product of m rows takes m / 14 whole blocks and one short one.
constexpr int64_t kBlockGemmRows = 14;

// Whether block_gemm runs on this CPU (AVX-512F); where not, use torch's matmul.
bool block_gemm_available();

// c[m, n] = a[m, k] b[k, n], or with `accumulate` c += a b: b's and c's rows contiguous,
// b_row and c_row floats apart. Call only where block_gemm_available().
void block_gemm(MatrixView a, const float* b, int64_t b_row, float* c, int64_t c_row, int64_t m, int64_t k, int64_t n,
                bool accumulate = false);

}  // namespace fastcpp
