#include "core/block_gemm.h"

#include <immintrin.h>

#include <algorithm>
#include <utility>

namespace fastcpp {
namespace {

constexpr int64_t kRows = kBlockGemmRows, kColumns = 32;

// c[0, rows)[0, columns) = a b over k_count (+ c with `accumulate`), columns <= 32 (the rest
// masked off).
template <int rows>
__attribute__((target("avx512f"))) void multiply_block(MatrixView a, const float* b, int64_t b_row, int64_t k_count,
                                                       float* c, int64_t c_row, int64_t columns, bool accumulate) {
  const __mmask16 low = columns >= 16 ? 0xFFFF : (1u << columns) - 1;
  const __mmask16 high = columns >= 32 ? 0xFFFF : columns <= 16 ? 0 : (1u << (columns - 16)) - 1;
  __m512 sum0[rows], sum1[rows];
#pragma GCC unroll 16
  for (int r = 0; r < rows; ++r) {
    sum0[r] = accumulate ? _mm512_maskz_loadu_ps(low, c + r * c_row) : _mm512_setzero_ps();
    sum1[r] = accumulate ? _mm512_maskz_loadu_ps(high, c + r * c_row + 16) : _mm512_setzero_ps();
  }
  for (int64_t k = 0; k < k_count; ++k) {
    const __m512 b0 = _mm512_maskz_loadu_ps(low, b + k * b_row), b1 = _mm512_maskz_loadu_ps(high, b + k * b_row + 16);
    const float* ak = a.data + k * a.column;
#pragma GCC unroll 16
    for (int r = 0; r < rows; ++r) {
      const __m512 ar = _mm512_set1_ps(ak[r * a.row]);
      sum0[r] = _mm512_fmadd_ps(ar, b0, sum0[r]);
      sum1[r] = _mm512_fmadd_ps(ar, b1, sum1[r]);
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < rows; ++r) {
    _mm512_mask_storeu_ps(c + r * c_row, low, sum0[r]);
    _mm512_mask_storeu_ps(c + r * c_row + 16, high, sum1[r]);
  }
}

// multiply_block<rows> for rows = count, 1 <= count <= kRows.
template <int... index>
void multiply_rows(int count, std::integer_sequence<int, index...>, MatrixView a, const float* b, int64_t b_row,
                   int64_t k_count, float* c, int64_t c_row, int64_t columns, bool accumulate) {
  ((count == index + 1 ? multiply_block<index + 1>(a, b, b_row, k_count, c, c_row, columns, accumulate) : void()),
   ...);
}

}  // namespace

bool block_gemm_available() {
  static const bool available = __builtin_cpu_supports("avx512f");
  return available;
}

void block_gemm(MatrixView a, const float* b, int64_t b_row, float* c, int64_t c_row, int64_t m, int64_t k, int64_t n,
                bool accumulate) {
  // A block of a's rows (14 x k) stays in L1 while it meets every column block of b.
  for (int64_t r0 = 0; r0 < m; r0 += kRows)
    for (int64_t c0 = 0; c0 < n; c0 += kColumns)
      multiply_rows(static_cast<int>(std::min(kRows, m - r0)), std::make_integer_sequence<int, kRows>(),
                    MatrixView{a.data + r0 * a.row, a.row, a.column}, b + c0, b_row, k, c + r0 * c_row + c0, c_row,
                    std::min(kColumns, n - c0), accumulate);
}

}  // namespace fastcpp
