#pragma once
// to_parallel's gradient reduction: every replica's gradients summed into replica 0's
// (the Learner's model, which the one optimizer steps). On distinct CUDA devices the
// gradients of each replica are flattened into one buffer per dtype and NCCL's
// in-process reduce sums the buffers across the GPUs; elsewhere (CPU replicas, replicas
// sharing a GPU) each gradient is added to replica 0's where it lies. A parameter gets
// a gradient when any replica has one, unless replica 0's no longer requires one (frozen
// between the forward and the backward: autograd leaves it without one on one device);
// the replicas' own are cleared.
#include <torch/types.h>

#include <vector>

namespace fastcpp::distributed {

// True when NCCL can sum over `devices`: all CUDA, no two alike, NCCL compiled in.
bool nccl_reduces(const std::vector<torch::Device>& devices);

// A weight tied between modules is one tensor that replica 0 lists twice and, in copies
// that cloning untied, two tensors with a part of its gradient each. Sums each copy's parts
// into the first place (a copy still tied has one gradient already). Returns the repeated
// places, which the reduction leaves out: replica 0's would add its gradient twice, and a
// multi-tensor add given one tensor twice may lose an update.
std::vector<bool> merge_tied_parts(const std::vector<std::vector<torch::Tensor>>& params, int replicas);

// params[r][i]: parameter i of replica r; the first `replicas` replicas took part.
void reduce_into_first(const std::vector<std::vector<torch::Tensor>>& params, int replicas, bool nccl);

}  // namespace fastcpp::distributed
