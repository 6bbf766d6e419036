#pragma once
// DataParallel (order 12): fastai's to_parallel, one process driving several devices,
// with replicas that persist and BatchNorm synchronized over them.
//   before_fit      the Learner on devices[0]; the model (BatchNorm made SyncBatchNorm,
//                   as to_distributed does) copied once onto every other device; the
//                   Learner's forward becomes the parallel one below
//   forward         parameters and buffers brought from replica 0 to the others; the batch
//                   split along dim 0 (as evenly as it goes; a batch of fewer items than
//                   devices uses that many replicas); replica 0's forward on the caller's
//                   thread and stream, each other replica's on a thread of its own that
//                   lives as long as this callback (replica_workers.h), with the caller's
//                   thread-local state (grad mode, autocast), on
//                   a CUDA stream of its own where it shares a GPU (replica_streams.h); the
//                   outputs gathered on devices[0] in order. Loss, metrics and backward are
//                   the Learner's own, on the whole batch, so autograd carries the gradient
//                   into every replica (on CUDA, each device's backward on its own thread)
//   after_backward  each replica's gradients summed into replica 0's (the Learner's
//                   model), which the one optimizer steps: NCCL's reduce on distinct
//                   GPUs, plain sums elsewhere (replica_grads.h)
//   after_fit       the Learner's model is the plain one again
// Replica 0 is the Learner's model itself: checkpoints, the optimizer and its state are
// those of the plain model. Unlike PyTorch's DataParallel (and libtorch's
// data_parallel), nothing is copied onto the devices per step but the parameters and
// buffers (no new replicas).
#include <c10/core/Stream.h>
#include <torch/types.h>

#include <memory>
#include <optional>
#include <vector>

#include "parallel/replica_batchnorm.h"
#include "parallel/replica_workers.h"
#include "learner/callback.h"
#include "learner/model.h"

namespace fastcpp::distributed {

class DataParallel : public DevicePlacement {
 public:
  std::string method() const override { return "to_parallel"; }
  // devices empty: every visible CUDA device.
  explicit DataParallel(std::vector<torch::Device> devices = {}, bool sync_bn = true);
  void before_fit() override;
  void after_backward() override;
  void after_fit() override;
  void after_fit_failed() override { after_fit(); }

  // The devices of the last (or current) fit, replica 0's first; one or none: not parallel.
  const std::vector<torch::Device>& devices() const { return devices_; }
  // How many replicas the last forward used.
  int last_replicas() const { return last_replicas_; }

 private:
  torch::Tensor forward(const torch::Tensor& x);
  void make_replicas();
  void restore();
  void follow_trainable();
  void copy_to_replicas();
  std::vector<torch::Device> asked_;
  bool sync_bn_;
  std::vector<torch::Device> devices_;
  std::optional<Model> plain_;  // the Learner's model before the fit
  std::vector<Model> replicas_;  // [0]: the Learner's model (its BatchNorm synchronized)
  std::vector<std::vector<torch::Tensor>> params_;  // per replica, in the same order
  // The plain model's modules in pre-order, and each replica's: twins at the same place.
  std::vector<std::shared_ptr<torch::nn::Module>> plain_modules_;
  std::vector<std::vector<std::shared_ptr<torch::nn::Module>>> replica_modules_;
  // Per replica: its parameters and buffers, one list per dtype (what each forward copies).
  std::vector<std::vector<std::vector<torch::Tensor>>> state_;
  std::vector<std::optional<c10::Stream>> streams_;  // a replica's own CUDA stream where it shares a GPU
  ReplicaGroup group_;
  std::unique_ptr<ReplicaWorkers> workers_;  // kept from fit to fit: their thread-local caches with them
  int last_replicas_ = 0;
};

}  // namespace fastcpp::distributed
