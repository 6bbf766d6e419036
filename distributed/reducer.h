#pragma once
// Reducer: DistributedDataParallel's gradient averaging, attached to the model's
// parameters rather than wrapping its forward.
//
// Parameters are grouped into buckets, one flat tensor each, and every parameter's .grad
// is a view into its bucket laid out as the parameter, at a 16-byte boundary (PyTorch's
// gradient_as_bucket_view): backward accumulates straight into the buckets, and nothing
// is copied per parameter.
// prepare(), before each backward, points the gradients that zero_grad dropped back at
// their slots, zeroed one bucket at a time; a gradient replaced by other code is copied
// into its slot (in the hook, when backward ran without prepare()).
//
// Buckets follow the order backward produces gradients: the reverse of the parameters'
// order at first, then the order the first synchronized backward showed (rank 0's, so
// that every rank builds the same buckets). The first bucket holds about
// first_bucket_bytes, the others bucket_bytes, so that the first all-reduce starts early.
// A hook after each parameter's gradient accumulation counts it in; a full bucket starts
// an asynchronous all-reduce while backward goes on. Buckets start strictly in index
// order on every rank (a bucket that is ready early waits for its predecessors), so the
// collectives match across ranks. Each bucket is divided by the world size before its
// all-reduce, as PyTorch's DDP does (a sum of fp16 gradients overflows where their
// average does not; at a world of 1 there is nothing to divide). finalize() (after
// backward) starts what is left and waits: the gradients are then the averages.
//
// Unused parameters: a parameter whose hook did not fire by finalize() contributes
// the gradient it carried into this backward (accumulated by backward passes under
// no_sync, or set by other code), or zeros; its bucket is reduced like any
// other, so no rank waits for a gradient that never comes, and every rank ends with the
// same .grad. A parameter no rank used keeps no .grad, as in one process (the buckets
// carry a used flag per parameter; reading it back is a host wait, paid only by a rank
// that has an unused parameter, as DDP's find_unused_parameters pays it).
// no_sync: while off, hooks do nothing and gradients accumulate in their slots; the next
// synchronized backward reduces the accumulated sums.
// A tensor listed twice (tied weights: a module's parameters() names a shared tensor once
// per module that holds it) is reduced once, as PyTorch's DDP does; indices into the
// parameters count it once too.
#include <torch/types.h>

#include <memory>
#include <cstdint>
#include <mutex>
#include <vector>

namespace c10d {
class Work;
}

namespace fastcpp::distributed {

class Communicator;

struct ReducerOptions {
  size_t bucket_bytes = 25 * 1024 * 1024;
  size_t first_bucket_bytes = 1024 * 1024;
};

class Reducer {
 public:
  Reducer(std::vector<torch::Tensor> params, std::shared_ptr<Communicator> comm, ReducerOptions options = {});
  ~Reducer();
  Reducer(const Reducer&) = delete;
  Reducer& operator=(const Reducer&) = delete;

  // Before a backward: dropped gradients become their zeroed slots again.
  void prepare();
  void finalize();
  void set_sync(bool sync) { sync_ = sync; }
  bool sync() const { return sync_; }
  size_t n_buckets() const { return buckets_.size(); }
  // The parameters of each bucket, in the order they fill it (by index into `params`, each
  // tensor counted once).
  std::vector<std::vector<size_t>> bucket_params() const;
  // For the last synchronized backward: how many gradients had arrived when each bucket
  // started its all-reduce (ideally a bucket starts as soon as its own are in).
  const std::vector<size_t>& launch_points() const { return launch_points_; }
  size_t reductions() const { return reductions_; }  // synchronized backward passes so far
  // Before a Reducer on another set of parameters replaces this one (between two backward
  // passes of an accumulation window, perhaps): the gradients that the `leaving` params
  // (by index) carry, averaged over the ranks now, as the synchronized step would have; a
  // param no rank has a gradient for keeps none; slots holding only prepare()'s zeros
  // are no gradient. Every rank calls it with the same params.
  void hand_over(const std::vector<size_t>& leaving);

 private:
  struct Bucket;
  void build_buckets(const std::vector<size_t>& order);
  void follow_first_backward();
  void on_grad_ready(size_t param);
  void take_in(size_t param);
  bool carries_gradient(size_t param) const;
  void launch_ready();
  void launch(Bucket& bucket);

  std::vector<torch::Tensor> params_;
  std::shared_ptr<Communicator> comm_;
  ReducerOptions options_;
  std::vector<std::unique_ptr<Bucket>> buckets_;
  std::vector<size_t> bucket_of_, order_, arrivals_, launching_, launch_points_;
  std::vector<torch::Tensor> views_;  // each param's gradient slot, laid out as the param
  std::vector<bool> ready_, carried_;  // hook fired this backward; a gradient came into it
  // The slot holds a gradient, not only the zeros prepare() wrote: a byte each, so that the
  // hooks of backward passes under no_sync set theirs without the lock.
  std::vector<uint8_t> filled_;
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators_;  // keeps the hooks' nodes alive
  std::vector<uintptr_t> hook_keys_;  // to take the hooks off again
  std::shared_ptr<bool> alive_;
  size_t next_to_launch_ = 0;
  size_t reductions_ = 0;
  bool prepared_ = false;
  bool sync_ = true;
  std::mutex mutex_;
};

}  // namespace fastcpp::distributed
