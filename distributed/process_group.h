#pragma once
// The process group of a run: a TCPStore rendezvous at MASTER_ADDR:MASTER_PORT (rank 0
// serves it, or torchrun's agent) and a c10d backend. Only Gloo is built so far ("auto"
// means Gloo; NCCL for CUDA is still to come). Every collective fails within `timeout`
// instead of hanging.
#include <torch/types.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "distributed/env.h"

namespace c10d {
class ProcessGroup;
}

namespace fastcpp::distributed {

struct ProcessGroupOptions {
  std::string backend = "auto";  // auto, gloo, nccl
  std::chrono::milliseconds timeout{std::chrono::seconds(60)};
};

// A process group and the collectives the framework needs, synchronous unless noted.
class Communicator {
 public:
  Communicator(const DistEnv& env, ProcessGroupOptions options = {});
  ~Communicator();

  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  const std::string& backend() const { return backend_; }

  void all_reduce_sum(torch::Tensor& tensor);
  void broadcast(torch::Tensor& tensor, int root = 0);
  // Each rank's tensor (same shape everywhere), in rank order.
  std::vector<torch::Tensor> all_gather(const torch::Tensor& tensor);
  void barrier();

  // The underlying c10d group, for asynchronous use (the DDP reducer).
  c10d::ProcessGroup& group();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int rank_, world_size_;
  std::string backend_;
};

// The communicator of this process, made from `env` on first use and shared after
// (to_distributed and rank0_first use it, so one process forms one group).
std::shared_ptr<Communicator> process_communicator(const DistEnv& env, ProcessGroupOptions options = {});

// Runs `fn` on rank 0 first and then, after a barrier, on the other ranks: for work
// that one process should do before the others reuse it (preparing a dataset, writing
// a cache). Without launcher variables it just runs `fn`.
void rank0_first(const std::function<void()>& fn, ProcessGroupOptions options = {});

}  // namespace fastcpp::distributed
