#pragma once
// SyncBatchNorm: BatchNorm whose batch statistics span every process of the run,
// on the CPU (Gloo) as on CUDA. Forward all-reduces each channel's sum, sum of
// squares and count (so uneven per-rank batches weigh correctly); backward
// all-reduces the sums of dy and dy*(x-mean) that the input gradient needs, while
// weight and bias gradients stay local for the DDP reducer to average, as PyTorch's.
// Running statistics are updated as for one big batch (unbiased variance over the
// global count). Outside training, or without a communicator, it is plain BatchNorm.
// Parameter and buffer names are BatchNorm's, so state dicts load either way.
//
// convert_sync_batchnorm rebuilds Sequential containers with SyncBatchNorm in place of
// torch::nn::BatchNorm{1,2,3}d, sharing their parameters and buffers (the optimizer
// keeps working). A BatchNorm held as a member of another module cannot be swapped in
// C++: conversion names it in an error; build such modules with SyncBatchNorm.
#include <torch/nn/module.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/types.h>

#include <memory>

namespace fastcpp::distributed {

class Communicator;

struct SyncBatchNormImpl : torch::nn::Module {
  explicit SyncBatchNormImpl(int64_t num_features, double eps = 1e-5, double momentum = 0.1);
  // Holding the given tensors (those of a BatchNorm being replaced); undefined ones are made anew.
  SyncBatchNormImpl(int64_t num_features, double eps, double momentum, torch::Tensor weight, torch::Tensor bias,
                    torch::Tensor running_mean, torch::Tensor running_var, torch::Tensor num_batches_tracked);
  torch::Tensor forward(const torch::Tensor& x);
  void set_communicator(std::shared_ptr<Communicator> comm) { comm_ = std::move(comm); }

  int64_t num_features;
  double eps, momentum;
  torch::Tensor weight, bias, running_mean, running_var, num_batches_tracked;

 private:
  std::shared_ptr<Communicator> comm_;
};
TORCH_MODULE(SyncBatchNorm);

// A copy of `model` with its BatchNorm layers synchronized over `comm`; other
// modules are kept as they are, and SyncBatchNorm layers inside them get the
// communicator. (libtorch cannot nest a Sequential in a Sequential, so one level
// is the whole of what a Sequential can hold directly.)
torch::nn::Sequential convert_sync_batchnorm(const torch::nn::Sequential& model, const std::shared_ptr<Communicator>& comm);

// The dotted names of torch::nn::BatchNorm layers that convert_sync_batchnorm cannot
// reach: those that are not direct children of the root Sequential.
std::vector<std::string> unconvertible_batchnorms(const torch::nn::Module& model);

}  // namespace fastcpp::distributed
