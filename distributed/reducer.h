#pragma once
// Reducer: DistributedDataParallel's gradient averaging, attached to the model's
// parameters rather than wrapping its forward.
//
// Parameters are grouped into buckets of about bucket_bytes, in reverse order (the
// order backward produces gradients). A hook after each parameter's gradient
// accumulation copies the gradient into its bucket; a full bucket starts an
// asynchronous all-reduce while backward goes on. Buckets start strictly in index
// order on every rank (a bucket that is ready early waits for its predecessors), so
// the collectives match across ranks. finalize() (after backward) starts what is
// left, waits, divides by the world size and writes the averages into .grad.
//
// Unused parameters: a parameter whose hook did not fire by finalize() contributes
// its current .grad, or zeros; its bucket is reduced like any other, so no rank
// waits for a gradient that never comes, and every rank ends with the same .grad.
// A parameter no rank used keeps no .grad, as in one process (the buckets carry a
// used flag per parameter; reading it back is a host wait, paid only by a rank that
// has an unused parameter, as DDP's find_unused_parameters pays it).
// no_sync: while off, hooks do nothing and gradients accumulate locally; the next
// synchronized backward reduces the accumulated sums.
#include <torch/types.h>

#include <memory>
#include <mutex>
#include <vector>

namespace c10d {
class Work;
}

namespace fastcpp::distributed {

class Communicator;

struct ReducerOptions {
  size_t bucket_bytes = 25 * 1024 * 1024;
};

class Reducer {
 public:
  Reducer(std::vector<torch::Tensor> params, std::shared_ptr<Communicator> comm, ReducerOptions options = {});
  ~Reducer();
  Reducer(const Reducer&) = delete;
  Reducer& operator=(const Reducer&) = delete;

  void finalize();
  void set_sync(bool sync) { sync_ = sync; }
  bool sync() const { return sync_; }
  size_t n_buckets() const { return buckets_.size(); }
  size_t reductions() const { return reductions_; }  // synchronized backward passes so far

 private:
  struct Bucket;
  void on_grad_ready(size_t param);
  void launch_ready();
  void launch(Bucket& bucket);

  std::vector<torch::Tensor> params_;
  std::shared_ptr<Communicator> comm_;
  std::vector<std::unique_ptr<Bucket>> buckets_;
  std::vector<size_t> bucket_of_, offset_of_;
  std::vector<bool> ready_;
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators_;  // keeps the hooks' nodes alive
  std::shared_ptr<bool> alive_;
  size_t next_to_launch_ = 0;
  size_t reductions_ = 0;
  bool sync_ = true;
  std::mutex mutex_;
};

}  // namespace fastcpp::distributed
