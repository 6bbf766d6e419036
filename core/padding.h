#pragma once
// Padding tensors of one kind whose sizes differ (box targets are padded to each batch's
// most boxes) to common sizes, so that they concatenate or gather.
#include <torch/torch.h>

#include <vector>

namespace fastcpp {

// `tensor` in the leading corner of a tensor of `sizes` (each at least tensor's), the rest `fill`.
inline torch::Tensor padded_to(const torch::Tensor& tensor, const std::vector<int64_t>& sizes, double fill) {
  if (tensor.sizes().vec() == sizes) return tensor;
  auto padded = torch::full(sizes, fill, tensor.options());
  auto corner = padded;
  for (int64_t d = 0; d < tensor.dim(); ++d) corner = corner.narrow(d, 0, tensor.size(d));
  corner.copy_(tensor);
  return padded;
}

}  // namespace fastcpp
