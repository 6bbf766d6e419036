#pragma once
// Cross-entropy over few classes on the CPU. ATen's log-softmax reduces a row shorter than
// its vector width (16 floats with AVX-512, 8 with AVX2) one class at a time through a
// vector it stores and reloads: on 128 rows of 10 classes its forward and backward take
// about 44 us with AVX-512 (a tenth of an MLP's training step) against 18 us for 16
// classes. Row by row in plain loops, they take 20 us, most of it autograd's own.
#include <torch/types.h>

namespace fastcpp {

// Whether few_class_cross_entropy takes this input: float logits [batch, classes] on the
// CPU, contiguous, with fewer classes than ATen's vector width on this CPU.
bool takes_few_class_path(const torch::Tensor& pred);

// torch's cross_entropy with class-index targets (int64, checked to be in range), no class
// weights and no ignored index: the mean over the batch (`mean`) or each item's loss, with
// `label_smoothing`. Differentiable in `pred`. The mean is summed in double in row order, so
// the result does not depend on the thread count.
torch::Tensor few_class_cross_entropy(const torch::Tensor& pred, const torch::Tensor& labels, double label_smoothing,
                                      bool mean);

}  // namespace fastcpp
