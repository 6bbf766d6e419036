#pragma once
// DistributedTrainer (order 11): fastai's to_distributed for one process per device.
//   before_fit   a CUDA learner moved to this rank's GPU (cuda:LOCAL_RANK); the process
//                group from the environment (torchrun, fastcpp-launch, Slurm, Open MPI;
//                NCCL for CUDA models unless Gloo is chosen); BatchNorm converted to SyncBatchNorm (sync_bn; a
//                BatchNorm that cannot be reached is an error naming it); rank 0's weights (frozen ones
//                too) and buffers broadcast; a Reducer on the trainable parameters; both loaders
//                sharded with a DistributedSampler
//                (every rank's epoch checked to be rank 0's, padded to equal length,
//                every world-th item; each rank's random transforms drawn apart);
//                logging and progress on rank 0 only; saves on rank 0 with a barrier
//   after_loss   training: the logged loss averaged over ranks, so every rank's
//                smoothed loss (lr_find, TerminateOnNaN) takes the same decisions;
//                validation: predictions and targets gathered from all ranks, put in
//                the loader's order and the padding trimmed, so every rank computes
//                the exact full-set metrics (and get_preds is one process's)
//                (and EarlyStopping stops every rank together)
//   before_backward  with GradientAccumulation, hooks only on the micro-batch that
//                steps (no_sync for the others: gradients add up locally); the
//                gradients that zero_grad dropped pointed back at their bucket slots;
//                a parameter frozen or unfrozen since the last step (a callback's gradual
//                unfreezing) gets the Reducer rebuilt on the new trainable set, which
//                PyTorch's DDP does not follow (every rank must change it at the same step,
//                as a callback does); what a parameter frozen inside an accumulation window
//                accumulated so far is averaged over the ranks then
//   after_backward  the Reducer's all-reduce of the gradients
//   after_fit    the loaders, logging and hooks as they were
// In a single process (no launcher variables) it says so once and changes nothing.
#include <array>
#include <memory>
#include <optional>
#include <vector>

#include "data/sampler.h"
#include "distributed/env.h"
#include "distributed/process_group.h"
#include "distributed/reducer.h"
#include "learner/callback.h"

namespace fastcpp::distributed {

struct DistributedOptions {
  bool sync_bn = true;  // BatchNorm -> SyncBatchNorm (see sync_batchnorm.h)
  // This rank's device when the Learner is on CUDA; default the local rank's GPU,
  // cuda:<LOCAL_RANK modulo the visible GPUs> (one GPU per process). Several ranks may
  // share a GPU with the "gloo" backend.
  std::optional<torch::Device> device;
  ProcessGroupOptions process_group;  // its device is set from the Learner's
  ReducerOptions reducer;
};

class DistributedTrainer : public DevicePlacement {
 public:
  std::string method() const override { return "to_distributed"; }
  explicit DistributedTrainer(DistributedOptions options = {});
  void before_fit() override;
  void after_loss() override;
  void before_validate() override;
  void before_backward() override;
  void after_backward() override;
  void after_fit() override;
  void after_fit_failed() override { after_fit(); }

  const std::shared_ptr<Communicator>& communicator() const { return comm_; }
  // Synchronized backward passes (steps whose gradients were all-reduced, each in one
  // all-reduce per bucket) of the last (or current) fit.
  size_t reductions() const { return reductions_; }

 private:
  void gather_validation_batch();
  // An Error on every rank unless all serve the same epoch (items and order) from both loaders.
  void check_same_data(int64_t epoch) const;
  void synchronize_batchnorm();
  void move_to_rank_device();
  void broadcast_state();
  void broadcast_buffers();
  void make_reducer();
  bool trainable_changed() const;
  DistributedOptions options_;
  DistEnv env_;
  std::shared_ptr<Communicator> comm_;
  std::unique_ptr<Reducer> reducer_;
  std::vector<torch::Tensor> params_;  // the model's, and which of them the Reducer reduces
  std::vector<bool> trainable_;
  std::array<SamplerPtr, 2> whole_samplers_;  // the training and validation loaders' before they were sharded
  bool was_logging_ = true;
  size_t reductions_ = 0, earlier_reductions_ = 0;  // the latter by Reducers replaced within the fit
  bool single_process_noted_ = false;
};

}  // namespace fastcpp::distributed
