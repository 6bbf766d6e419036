#pragma once
// Synchronized BatchNorm on inputs whose channels are innermost in memory (channels-last
// images, [N, C] features): the steps a peer takes, as tensors. On CUDA they run
// channels_last_batchnorm_kernels.cu (three kernels a forward, three a backward, besides
// the collectives); on the CPU a twin computes the same formulas
// (channels_last_batchnorm_math.h) for the tests. Every statistic is fp32. Each step is a
// named scope for profilers and tests (fastcpp::sync_batch_norm_statistics, _normalize,
// _grad_sums, _input_grad).
//
// A peer's forward: local_statistics, an all-gather of them over the peers, normalize.
// Its backward: grad_sums, an all-reduce of GradSums::sums, input_grad.
#include <torch/types.h>

namespace fastcpp::distributed {
struct SyncBatchNormImpl;
}

namespace fastcpp::distributed::channels_last {

// Where the synchronized paths run these steps. `automatic`: on CUDA wherever
// kernels_apply holds, never on the CPU (whose synced path sums in double). `aten`: never
// (ATen's kernels, PyTorch's synced path). `cpu_twin`: also on the CPU, by the twin, so that
// the paths that call the kernels on a GPU (to_distributed's and to_parallel's) can be run
// and checked without one; it is slow. FASTCPP_SYNC_BN_KERNELS=aten or =twin sets it at
// start-up; use_kernels changes it for the layers' next forwards.
enum class KernelChoice { automatic, aten, cpu_twin };
void use_kernels(KernelChoice choice);
KernelChoice kernel_choice();

// Whether these steps take this layer's training forward of x: x in fp32, fp16 or bf16 with
// its channels innermost and dense, at least one row, on a CUDA device (on the CPU with
// KernelChoice::cpu_twin); the layer's weight, bias and running statistics fp32 on x's device.
bool kernels_apply(const SyncBatchNormImpl& bn, const torch::Tensor& x);

// This peer's [mean (C), 1/sqrt(biased var + eps) (C), count (1)], fp32: what the peers gather.
torch::Tensor local_statistics(const torch::Tensor& x, double eps);

struct Normalized {
  torch::Tensor y;              // x's dtype and layout
  torch::Tensor mean, invstd;  // combined over the peers, [C]
  torch::Tensor count;          // values per channel over the peers, [1]
};

// The output from every peer's statistics (gathered: [peers, 2C + 1]); running_mean and
// running_var (undefined: left alone) updated as for one batch of all the values.
Normalized normalize(const torch::Tensor& x, const torch::Tensor& gathered, const torch::Tensor& weight,
                     const torch::Tensor& bias, torch::Tensor running_mean, torch::Tensor running_var,
                     double momentum, double eps);
// The same into tensors made beforehand by empty_normalized(x), written through their
// memory (their autograd versions unchanged): to_parallel's replicas make them before
// they meet, and the shared autograd node keeps them before they are filled.
Normalized empty_normalized(const torch::Tensor& x);
void normalize_into(Normalized& out, const torch::Tensor& x, const torch::Tensor& gathered,
                    const torch::Tensor& weight, const torch::Tensor& bias, torch::Tensor running_mean,
                    torch::Tensor running_var, double momentum, double eps);

// The output gradient in x's dtype with its channels innermost, as grad_sums and
// input_grad read it (a copy only where it is not; on CUDA they refuse it otherwise).
torch::Tensor gradient_like_input(const torch::Tensor& dy, const torch::Tensor& x);

struct GradSums {
  torch::Tensor sums;                     // [sum dy (C), sum dy * (x - mean) (C)]: what the peers add up
  torch::Tensor grad_weight, grad_bias;  // this peer's own
};

GradSums grad_sums(const torch::Tensor& dy, const torch::Tensor& x, const torch::Tensor& mean,
                   const torch::Tensor& invstd);

// The input gradient from every peer's sums (summed: [2C]) and the combined count.
torch::Tensor input_grad(const torch::Tensor& dy, const torch::Tensor& x, const torch::Tensor& mean,
                         const torch::Tensor& invstd, const torch::Tensor& weight, const torch::Tensor& summed,
                         const torch::Tensor& count);

}  // namespace fastcpp::distributed::channels_last
