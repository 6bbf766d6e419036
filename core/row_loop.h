#pragma once
// The library's own CPU kernels walk a channels-last tensor [N, C, H, W] as N*H*W pixel rows
// of C values, vectorized over C. Their row loops are built for AVX2 as well as the
// baseline, and the CPU picks one when the library loads.
#define FASTCPP_ROW_LOOP __attribute__((target_clones("avx2", "default")))
