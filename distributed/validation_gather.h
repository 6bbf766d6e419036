#pragma once
// The ranks' validation batches gathered (DistributedTrainer): every rank then holds the
// whole batch, so the loss and metrics are computed over the set as by one process.
#include <torch/types.h>

namespace fastcpp::distributed {

class Communicator;

// Each rank's predictions, stacked [world, ...]. They must have one shape (a gather of
// unequal ones would read past the smaller): every rank throws the same Error otherwise.
torch::Tensor gather_same_shape(Communicator& comm, const torch::Tensor& pred);

// Each rank's targets, stacked [world, ...]. Their sizes past the batch may differ (box
// targets are padded to each batch's most boxes): each rank pads its own with -1,
// box_targets' padding, to the largest. Targets of other numbers of dimensions: an Error.
torch::Tensor gather_padded(Communicator& comm, const torch::Tensor& targets);

}  // namespace fastcpp::distributed
