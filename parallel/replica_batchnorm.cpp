#include "parallel/replica_batchnorm.h"

#include <torch/torch.h>

#include <algorithm>
#include <condition_variable>
#include <exception>
#include <mutex>

#include "core/error.h"
#include "distributed/batchnorm_math.h"
#include "parallel/replica_streams.h"
#include "distributed/sync_batchnorm.h"

namespace fastcpp::distributed {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// One node for all replicas: inputs x_0..x_n-1, outputs their normalized x_hat_0..x_hat_n-1.
// The affine part (x_hat * weight + bias) stays with each replica, on its own thread and
// stream, so each weight's and bias's gradient is made on the stream of the replica that
// owns it, where its AccumulateGrad node expects it.
struct ReplicaSyncBatchNormFunction : torch::autograd::Function<ReplicaSyncBatchNormFunction> {
  static variable_list forward(AutogradContext* ctx, at::TensorList xs, SyncBatchNormImpl* keeper) {
    const auto home = keeper->running_mean.device();
    auto summed = batchnorm::local_stats(xs[0]).to(home);
    for (size_t i = 1; i < xs.size(); ++i) summed += batchnorm::local_stats(xs[i]).to(home);
    const auto n = batchnorm::normalization(summed, xs[0].size(1), keeper->eps, keeper->momentum,
                                            keeper->running_mean, keeper->running_var);
    variable_list x_hats;
    for (const auto& x : xs) x_hats.push_back(batchnorm::normalize(x, n));
    variable_list saved(x_hats);
    saved.push_back(n.invstd);
    ctx->save_for_backward(saved);
    ctx->saved_data["count"] = n.count;
    return x_hats;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const size_t n = grads.size();
    const auto& invstd = saved[n];
    std::vector<torch::Tensor> d_x_hats, locals;
    for (size_t i = 0; i < n; ++i) {
      d_x_hats.push_back(grads[i].defined() ? grads[i].contiguous() : torch::zeros_like(saved[i]));
      locals.push_back(batchnorm::local_grad_sums(d_x_hats[i], saved[i]));
    }
    auto summed = locals[0].to(invstd.device(), torch::kDouble);
    for (size_t i = 1; i < n; ++i) summed += locals[i].to(invstd.device(), torch::kDouble);
    const double count = ctx->saved_data["count"].toDouble();
    variable_list dx(n);
    for (size_t i = 0; i < n; ++i)
      dx[i] = batchnorm::input_grad(d_x_hats[i], saved[i], summed, count, invstd, /*weight=*/{});
    dx.emplace_back();  // for `keeper`
    return dx;
  }
};

// On CUDA, as the processes' synced layer does (distributed/sync_batchnorm.cpp): ATen's
// kernels for each replica's statistics, their gather over the replicas' counts (which
// also updates the running statistics), the normalization and the backward, in the
// input's dtype and memory format. Nothing is read back to the host, so the replicas'
// threads keep queueing work while the GPU runs: the arithmetic above converts to
// double, reads the count with .item() and makes the gradient contiguous, which on a GPU
// stops every replica at every layer.
struct CudaReplicaSyncBatchNormFunction : torch::autograd::Function<CudaReplicaSyncBatchNormFunction> {
  static variable_list forward(AutogradContext* ctx, at::TensorList xs, SyncBatchNormImpl* keeper) {
    const auto home = keeper->running_mean.device();
    const int64_t channels = xs[0].size(1);
    std::vector<torch::Tensor> means, invstds, counts;
    for (const auto& x : xs) {
      auto [mean, invstd] = at::batch_norm_stats(x, keeper->eps);
      means.push_back(mean.to(home));
      invstds.push_back(invstd.to(home));
      counts.push_back(torch::full({1}, static_cast<double>(x.numel() / channels), means.back().options()));
    }
    // In the running statistics' dtype, which is how the kernel reads them.
    const auto all_counts = torch::cat(counts).to(keeper->running_mean.scalar_type());
    const auto [mean, invstd] = at::batch_norm_gather_stats_with_counts(
        xs[0], torch::stack(means), torch::stack(invstds), keeper->running_mean, keeper->running_var,
        keeper->momentum, keeper->eps, all_counts);
    variable_list x_hats, saved(xs.begin(), xs.end());
    for (const auto& x : xs)
      x_hats.push_back(at::batch_norm_elemt(x, /*weight=*/{}, /*bias=*/{}, mean.to(x.device()),
                                            invstd.to(x.device()), keeper->eps));
    saved.push_back(mean);
    saved.push_back(invstd);
    saved.push_back(all_counts.to(torch::kInt));
    ctx->save_for_backward(saved);
    return x_hats;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const size_t n = grads.size();
    const auto &mean = saved[n], &invstd = saved[n + 1], &counts = saved[n + 2];
    const auto home = mean.device();
    const int64_t channels = mean.size(0);
    // Autograd knows this node by one stream, the home device's current one: it made that
    // stream wait for every incoming gradient and takes every output as ready there. The
    // work on another GPU's current stream starts after it and ends before it.
    std::vector<torch::Device> others;
    for (size_t i = 0; i < n; ++i)
      if (const auto device = saved[i].device();
          device != home && std::find(others.begin(), others.end(), device) == others.end())
        others.push_back(device);
    const StreamMark gradients_ready(home);
    for (const auto& device : others) gradients_ready.wait_on(device);
    // Per replica, on its device: the incoming gradient and the statistics.
    std::vector<torch::Tensor> dys, means, invstds;
    torch::Tensor summed;  // [sum of dy (C), sum of dy * (x - mean) (C)] over every replica
    for (size_t i = 0; i < n; ++i) {
      const auto& x = saved[i];
      // Made on the replica's stream, read on this one (autograd's, or the default
      // stream of a replica's other GPU): not reused before these reads are done.
      keep_for_current_stream(x);
      keep_for_current_stream(grads[i]);
      dys.push_back(grads[i].defined() ? grads[i].contiguous(x.suggest_memory_format()) : torch::zeros_like(x));
      means.push_back(mean.to(x.device()));
      invstds.push_back(invstd.to(x.device()));
      auto [sum_dy, sum_dy_xmu, grad_weight, grad_bias] =
          at::batch_norm_backward_reduce(dys[i], x, means[i], invstds[i], /*weight=*/{},
                                         /*input_g=*/true, /*weight_g=*/false, /*bias_g=*/false);
      auto local = torch::cat({sum_dy, sum_dy_xmu}).to(home);
      summed = summed.defined() ? summed + local : local;
    }
    variable_list dx(n);
    for (size_t i = 0; i < n; ++i) {
      const auto& x = saved[i];
      const auto sums = summed.to(x.device());
      dx[i] = at::batch_norm_backward_elemt(dys[i], x, means[i], invstds[i], /*weight=*/{},
                                            sums.narrow(0, 0, channels), sums.narrow(0, channels, channels),
                                            counts.to(x.device()));
    }
    for (const auto& device : others) StreamMark(device).wait_on(home);
    dx.emplace_back();  // for `keeper`
    return dx;
  }
};

variable_list synchronized_normalization(at::TensorList xs, SyncBatchNormImpl* keeper) {
  if (xs[0].is_cuda()) return CudaReplicaSyncBatchNormFunction::apply(xs, keeper);
  return ReplicaSyncBatchNormFunction::apply(xs, keeper);
}

}  // namespace

// Where the replicas' layer k meets: the inputs of this step, then the outputs. On CUDA
// the last to arrive computes on its stream after every input is ready on its
// replica's stream (`ready`), and each replica's stream waits for its output (`done`).
struct ReplicaGroup::Meeting {
  std::mutex mutex;
  std::condition_variable all_there;
  std::vector<torch::Tensor> xs, ys;
  std::vector<std::optional<StreamMark>> ready, done;
  std::vector<SyncBatchNormImpl*> layers;
  int arrived = 0;
  uint64_t round = 0;
  std::exception_ptr error;

  torch::Tensor meet(const ReplicaGroup::State& state, size_t replica, SyncBatchNormImpl& layer, const torch::Tensor& x) {
    std::unique_lock<std::mutex> lock(mutex);
    const int expected = state.replicas.load();
    const uint64_t my_round = round;
    xs[replica] = x;
    layers[replica] = &layer;
    ready[replica].emplace(x.device());
    if (++arrived == expected) {
      error = nullptr;
      try {
        for (int r = 0; r < expected; ++r) {
          ready[static_cast<size_t>(r)]->wait();
          keep_for_current_stream(xs[static_cast<size_t>(r)]);
        }
        std::vector<torch::Tensor> inputs(xs.begin(), xs.begin() + expected);
        // A TensorList, so that autograd sees each tensor as an input.
        auto outputs = synchronized_normalization(at::TensorList(inputs), layers[0]);
        std::copy(outputs.begin(), outputs.end(), ys.begin());
        for (size_t r = 0; r < outputs.size(); ++r) done[r].emplace(outputs[r].device());
      } catch (...) {
        error = std::current_exception();
      }
      arrived = 0;
      ++round;
      all_there.notify_all();
    } else {
      all_there.wait(lock, [&] { return round != my_round || state.aborted.load(); });
      if (round == my_round) throw Error("to_parallel: another replica's forward failed");
    }
    xs[replica] = torch::Tensor();  // autograd keeps what it needs; nothing else outlives the step
    if (error) std::rethrow_exception(error);
    done[replica]->wait();
    keep_for_current_stream(ys[replica]);
    return std::exchange(ys[replica], torch::Tensor());
  }

  void reset(size_t replicas) {
    std::lock_guard<std::mutex> lock(mutex);
    xs.assign(replicas, {});
    ys.assign(replicas, {});
    ready.clear();  // marks are not copyable: emptied, then sized
    ready.resize(replicas);
    done.clear();
    done.resize(replicas);
    layers.assign(replicas, nullptr);
    arrived = 0;
  }

  void wake() {
    std::lock_guard<std::mutex> lock(mutex);
    all_there.notify_all();
  }
};

namespace {

class ReplicaBatchNormSync : public BatchNormSync {
 public:
  ReplicaBatchNormSync(std::shared_ptr<ReplicaGroup::State> state, std::shared_ptr<ReplicaGroup::Meeting> meeting,
                       size_t replica)
      : state_(std::move(state)), meeting_(std::move(meeting)), replica_(replica) {}
  bool has_peers() const override { return state_->replicas.load() > 1; }
  // One global batch, counted once: by replica 0's layer, the one the Learner keeps.
  bool counts_batches() const override { return replica_ == 0; }
  torch::Tensor forward(SyncBatchNormImpl& bn, const torch::Tensor& x) override {
    const auto x_hat = meeting_->meet(*state_, replica_, bn, x);
    // In the input's dtype, as BatchNorm's own kernels answer under autocast: fp32
    // weights would otherwise promote an fp16 activation to fp32.
    // One pass over the activation (bias + x_hat * weight), not a product and then a sum.
    const auto dtype = x_hat.scalar_type();
    return torch::addcmul(batchnorm::per_channel(bn.bias.to(dtype), x_hat), x_hat,
                          batchnorm::per_channel(bn.weight.to(dtype), x_hat));
  }

 private:
  std::shared_ptr<ReplicaGroup::State> state_;
  std::shared_ptr<ReplicaGroup::Meeting> meeting_;
  size_t replica_;
};

std::vector<std::shared_ptr<SyncBatchNormImpl>> sync_layers(const torch::nn::Module& model) {
  std::vector<std::shared_ptr<SyncBatchNormImpl>> layers;
  for (const auto& module : model.modules())
    if (auto layer = std::dynamic_pointer_cast<SyncBatchNormImpl>(module)) layers.push_back(layer);
  return layers;
}

}  // namespace

ReplicaGroup::ReplicaGroup() : state_(std::make_shared<State>()) {}

size_t ReplicaGroup::connect(const std::vector<std::shared_ptr<torch::nn::Module>>& replicas) {
  disconnect();
  std::vector<std::vector<std::shared_ptr<SyncBatchNormImpl>>> layers;
  for (const auto& replica : replicas) layers.push_back(sync_layers(*replica));
  const size_t n_layers = layers.front().size();
  for (size_t k = 0; k < n_layers; ++k) {
    auto meeting = std::make_shared<Meeting>();
    meeting->reset(replicas.size());
    meetings_.push_back(meeting);
    for (size_t r = 0; r < replicas.size(); ++r) {
      layers[r][k]->set_sync(std::make_shared<ReplicaBatchNormSync>(state_, meeting, r));
      layers_.push_back(layers[r][k]);
    }
  }
  return n_layers;
}

void ReplicaGroup::disconnect() {
  for (auto& layer : layers_) std::static_pointer_cast<SyncBatchNormImpl>(layer)->set_sync(nullptr);
  layers_.clear();
  meetings_.clear();
}

void ReplicaGroup::start_step(int replicas) {
  state_->aborted = false;
  state_->replicas = replicas;
  for (auto& meeting : meetings_) meeting->reset(meeting->xs.size());
}

void ReplicaGroup::abort() {
  state_->aborted = true;
  for (auto& meeting : meetings_) meeting->wake();
}

}  // namespace fastcpp::distributed
