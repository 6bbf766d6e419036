#pragma once
// The process group of a run: a TCPStore rendezvous at MASTER_ADDR:MASTER_PORT (rank 0
// serves it, or torchrun's agent) and c10d backends, as torch.distributed's default group:
// backend "auto" sends CUDA tensors through NCCL and CPU tensors through Gloo; "gloo"
// sends every tensor through Gloo (CUDA tensors too: several ranks can then share one
// GPU, which NCCL refuses); "nccl" is for CUDA models only. Forming the group fails within
// `rendezvous_timeout`, every collective within `timeout`, instead of hanging.
#include <c10/util/intrusive_ptr.h>
#include <torch/types.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "distributed/env.h"

namespace c10d {
class Work;
}

namespace fastcpp::distributed {

struct ProcessGroupOptions {
  std::string backend = "auto";  // auto, gloo, nccl
  // Gloo's collectives fail after this.
  std::chrono::milliseconds timeout{std::chrono::seconds(60)};
  // Forming the group waits this long for every process to join: the nodes of a job may
  // start minutes apart (torchrun's agents wait 10 minutes for theirs to join).
  std::chrono::milliseconds rendezvous_timeout{std::chrono::minutes(10)};
  // A barrier waits out the other ranks' own work (rank 0 preparing a dataset in
  // rank0_first, a checkpoint being written): torch's default for collectives.
  std::chrono::milliseconds barrier_timeout{std::chrono::minutes(30)};
  // NCCL's watchdog aborts the process when a collective has not finished after this:
  // torch's default, long enough for a rank that waits out a peer's checkpoint.
  std::chrono::milliseconds nccl_timeout{std::chrono::minutes(10)};
  torch::Device device = torch::kCPU;  // where the tensors live: with "auto", CUDA brings NCCL in
};

// A process group and the collectives the framework needs, synchronous unless noted.
class Communicator {
 public:
  Communicator(const DistEnv& env, ProcessGroupOptions options = {});
  ~Communicator();

  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  // The backend CUDA tensors go through: "nccl" or "gloo" (CPU tensors always use Gloo).
  const std::string& backend() const { return backend_; }
  // Brings in what `options` needs beyond what this group has (NCCL for a CUDA model,
  // after rank0_first formed a CPU group); every rank must call it at the same point.
  void require(const ProcessGroupOptions& options);

  void all_reduce_sum(torch::Tensor& tensor);
  void broadcast(torch::Tensor& tensor, int root = 0);
  // Each rank's tensor (same shape everywhere), stacked in rank order: [world, ...].
  torch::Tensor all_gather(const torch::Tensor& tensor);
  void barrier();
  // Ends NCCL's communicators and watchdog (torch's destroy_process_group; aborts them
  // after a failed collective, whose pending work would hold a graceful end); done at exit.
  void shutdown();

  // Starts an all-reduce (sum) of `tensor` in place; wait on the returned work (the DDP reducer).
  c10::intrusive_ptr<c10d::Work> all_reduce_async(torch::Tensor& tensor);
  // Waits for `work`; a failure is an Error naming `what`, this rank and host, and the
  // rank and host it lost when the transport says which.
  void wait(const c10::intrusive_ptr<c10d::Work>& work, const std::string& what) const;

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
// a cache). In a world of one (or without launcher variables) it just runs `fn`.
void rank0_first(const std::function<void()>& fn, ProcessGroupOptions options = {});

}  // namespace fastcpp::distributed
