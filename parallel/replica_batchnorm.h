#pragma once
// SyncBatchNorm across to_parallel's replicas, whose forwards run on threads of one
// process. At each synchronized layer every replica's thread computes the statistics of
// its own input, then the replicas meet: the last to arrive gathers the statistics (and,
// on ATen's and the CPU's paths, combines them and updates the running ones) and makes one
// autograd node for all of them, and each thread normalizes its own input with the whole
// batch's statistics and its replica's weight and bias (with the library's channels-last
// kernels that normalization combines the gathered statistics itself, and replica 0's
// updates the running ones). The meeting holds only the gathering, so the threads queue the
// rest of the layer side by side. In backward nobody has to meet: autograd runs that node
// once the gradients of all its outputs are there (whichever device threads computed
// them), and it combines the replicas' gradient sums itself. Running statistics and the
// batch count are kept by replica 0's layer.
#include <torch/nn/module.h>

#include <atomic>
#include <memory>
#include <vector>

namespace fastcpp::distributed {

class ReplicaGroup {
 public:
  ReplicaGroup();
  // Connects the SyncBatchNorm layers of `replicas` (one model and its clones, replica 0
  // first): layer k of each meets layer k of the others. Returns how many layers met.
  size_t connect(const std::vector<std::shared_ptr<torch::nn::Module>>& replicas);
  // Undoes connect: the layers go back to plain BatchNorm.
  void disconnect();
  // Before each forward: how many replicas (0 .. n-1) run it.
  void start_step(int replicas);
  // A replica's forward failed: the others stop waiting at their meetings and fail too.
  void abort();

  struct Meeting;
  struct State {
    std::atomic<int> replicas{1};
    std::atomic<bool> aborted{false};
  };

 private:
  std::shared_ptr<State> state_;
  std::vector<std::shared_ptr<Meeting>> meetings_;
  std::vector<std::shared_ptr<torch::nn::Module>> layers_;
};

}  // namespace fastcpp::distributed
