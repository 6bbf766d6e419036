#pragma once
// pooled_empty: an uninitialized CPU tensor whose memory comes back to a pool when
// the tensor dies, for the large buffers a loader makes every batch. glibc maps
// blocks over 32 MB fresh each time (and smaller ones after heap trims), so without
// reuse every page of every batch is faulted in again: that was a third of the
// image pipeline's time. The pool keeps a few blocks per size, bounded in bytes.
#include <torch/types.h>

namespace fastcpp {

torch::Tensor pooled_empty(at::IntArrayRef sizes, at::ScalarType dtype);

}  // namespace fastcpp
