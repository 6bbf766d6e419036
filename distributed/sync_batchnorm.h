#pragma once
// SyncBatchNorm: BatchNorm whose batch statistics span all its peers: every process of
// the run (set_communicator: to_distributed, on the CPU over Gloo as on CUDA), or every
// replica of to_parallel (parallel/replica_batchnorm.h). Forward adds up each
// channel's sum, sum of squares and count over the peers (so uneven per-peer batches
// weigh correctly); backward adds up the sums of dy and dy*(x-mean) that the input
// gradient needs, while weight and bias gradients stay local (DDP's reducer averages
// them, to_parallel sums them), as PyTorch's.
// Running statistics are updated as for one big batch (unbiased variance over the
// global count). Outside training, or without peers, it is plain BatchNorm.
// Parameter and buffer names are BatchNorm's, so state dicts load either way.
//
// convert_sync_batchnorm rebuilds Sequential containers with SyncBatchNorm in place of
// torch::nn::BatchNorm{1,2,3}d, sharing their parameters and buffers (the optimizer
// keeps working). A BatchNorm held as a member of another module cannot be swapped in
// C++: conversion names it in an error; build such modules with SyncBatchNorm.
#include <torch/nn/cloneable.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/types.h>

#include <memory>

#include "core/norm_layer.h"

namespace fastcpp::distributed {

class Communicator;
struct SyncBatchNormImpl;

// How a SyncBatchNorm meets its peers in training (a process group, or to_parallel's replicas).
class BatchNormSync {
 public:
  virtual ~BatchNormSync() = default;
  // False when there is nobody to meet (a world of one): the layer is then plain BatchNorm.
  virtual bool has_peers() const = 0;
  // Whether this layer adds the batch to num_batches_tracked (a batch split over several
  // layers is counted by one of them).
  virtual bool counts_batches() const { return true; }
  // The training output of `bn` for x, with statistics over every peer's batch (and the
  // running statistics updated from them).
  virtual torch::Tensor forward(SyncBatchNormImpl& bn, const torch::Tensor& x) = 0;
};

struct SyncBatchNormImpl : torch::nn::Cloneable<SyncBatchNormImpl>, NormLayer {
  explicit SyncBatchNormImpl(int64_t num_features, double eps = 1e-5, double momentum = 0.1);
  // Holding the given tensors (those of a BatchNorm being replaced); undefined ones are made anew.
  SyncBatchNormImpl(int64_t num_features, double eps, double momentum, torch::Tensor weight, torch::Tensor bias,
                    torch::Tensor running_mean, torch::Tensor running_var, torch::Tensor num_batches_tracked);
  torch::Tensor forward(const torch::Tensor& x);
  // relu(forward(x) + residual), residual optional: a ResNet block's ending. For channels-last
  // float input on the CPU, in training without peers or in evaluation without gradients, one
  // kernel each way (distributed/batchnorm_relu.h) instead of BatchNorm's, the add's and ReLU's.
  torch::Tensor forward_relu(const torch::Tensor& x, const torch::Tensor& residual = {});
  // Statistics over every process of `comm`'s group.
  void set_communicator(const std::shared_ptr<Communicator>& comm);
  void set_sync(std::shared_ptr<BatchNormSync> sync) { sync_ = std::move(sync); }
  // Fresh parameters and buffers (what clone() starts from before copying the values).
  void reset() override;

  int64_t num_features;
  double eps, momentum;
  torch::Tensor weight, bias, running_mean, running_var, num_batches_tracked;

 private:
  // Checks x's channels and counts the batch in num_batches_tracked (in training).
  void begin_batch(const torch::Tensor& x);
  std::shared_ptr<BatchNormSync> sync_;
};
TORCH_MODULE(SyncBatchNorm);

// A copy of `model` with its BatchNorm layers synchronized over `comm`; other
// modules are kept as they are, and SyncBatchNorm layers inside them get the
// communicator. With comm null the layers are converted and left without peers. (libtorch cannot nest a Sequential in a Sequential, so one level
// is the whole of what a Sequential can hold directly.)
torch::nn::Sequential convert_sync_batchnorm(const torch::nn::Sequential& model, const std::shared_ptr<Communicator>& comm);

// The training output of `bn` for x with statistics over every rank of `comm`, whatever
// the world size (the layer itself skips this at a world of one, as PyTorch's does;
// bench/sync_batchnorm times it there). With comm null: the same arithmetic on this
// batch alone, without the collectives (what bench/sync_batchnorm compares with
// BatchNorm's kernels).
torch::Tensor synchronized_batch_norm(SyncBatchNormImpl& bn, const torch::Tensor& x, Communicator* comm);

// The dotted names of torch::nn::BatchNorm layers that convert_sync_batchnorm cannot
// reach: those that are not direct children of the root Sequential.
std::vector<std::string> unconvertible_batchnorms(const torch::nn::Module& model);

// Throws fastcpp::Error naming those layers, if any: "<who>(sync_bn): cannot make these
// BatchNorm layers synchronized ... to keep per-<peer> statistics"; else naming the
// layers SyncBatchNorm would change (affine=false, track_running_stats=false, momentum
// none: it is affine, with running statistics and a momentum).
void check_batchnorms_convertible(const torch::nn::Module& model, const std::string& who, const std::string& peer);

}  // namespace fastcpp::distributed
