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

// `gradient`, or none where autograd wants none (a frozen weight or bias).
torch::Tensor unless_needed(AutogradContext* ctx, size_t input, torch::Tensor gradient) {
  return ctx->needs_input_grad(input) ? std::move(gradient) : torch::Tensor();
}

// One node for all replicas: inputs x_0..x_n-1, each replica's weight and bias (as
// ReplicaParametersFunction hands them over), outputs y_0..y_n-1, each normalized with
// the statistics of the whole batch and scaled and shifted by its replica's weight and
// bias. In backward it returns each replica's input, weight and bias gradient.
struct ReplicaSyncBatchNormFunction : torch::autograd::Function<ReplicaSyncBatchNormFunction> {
  static variable_list forward(AutogradContext* ctx, at::TensorList xs, at::TensorList weights, at::TensorList biases,
                               SyncBatchNormImpl* keeper) {
    const auto home = keeper->running_mean.device();
    auto summed = batchnorm::local_stats(xs[0]).to(home);
    for (size_t i = 1; i < xs.size(); ++i) summed += batchnorm::local_stats(xs[i]).to(home);
    const auto n = batchnorm::normalization(summed, xs[0].size(1), keeper->eps, keeper->momentum,
                                            keeper->running_mean, keeper->running_var);
    variable_list ys, saved;
    for (size_t i = 0; i < xs.size(); ++i) {
      auto x_hat = batchnorm::normalize(xs[i], n);
      // In the input's dtype, as BatchNorm's own kernels answer under autocast: fp32
      // weights would otherwise promote a bf16 activation to fp32.
      const auto dtype = x_hat.scalar_type();
      ys.push_back(torch::addcmul(batchnorm::per_channel(biases[i].to(dtype), x_hat), x_hat,
                                  batchnorm::per_channel(weights[i].to(dtype), x_hat)));
      saved.push_back(x_hat);
    }
    saved.insert(saved.end(), weights.begin(), weights.end());
    saved.push_back(n.invstd);
    ctx->save_for_backward(saved);
    ctx->saved_data["count"] = n.count;
    return ys;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const size_t n = grads.size();
    const auto& invstd = saved[2 * n];
    const int64_t channels = invstd.size(0);
    std::vector<torch::Tensor> dys, locals;
    for (size_t i = 0; i < n; ++i) {
      dys.push_back(grads[i].defined() ? grads[i].contiguous() : torch::zeros_like(saved[i]));
      locals.push_back(batchnorm::local_grad_sums(dys[i], saved[i]));  // [sum of dy, sum of dy * x_hat]
    }
    auto summed = locals[0].to(invstd.device(), torch::kDouble);
    for (size_t i = 1; i < n; ++i) summed += locals[i].to(invstd.device(), torch::kDouble);
    const double count = ctx->saved_data["count"].toDouble();
    variable_list out(3 * n + 1);  // inputs, weights, biases, `keeper`
    for (size_t i = 0; i < n; ++i) {
      const auto& weight = saved[n + i];
      out[i] = batchnorm::input_grad(dys[i], saved[i], summed, count, invstd, weight.to(dys[i].scalar_type()));
      out[n + i] = unless_needed(ctx, n + i, locals[i].narrow(0, channels, channels).to(weight.scalar_type()));
      out[2 * n + i] = unless_needed(ctx, 2 * n + i, locals[i].narrow(0, 0, channels).to(weight.scalar_type()));
    }
    return out;
  }
};

// On CUDA, as the processes' synced layer does (distributed/sync_batchnorm.cpp): ATen's
// kernels for each replica's statistics, their gather over the replicas' counts (which
// also updates the running statistics), the normalization with the replica's weight and
// bias in one pass, and the backward, in the input's dtype and memory format. Nothing is
// read back to the host, so the replicas' threads keep queueing work while the GPU runs:
// the arithmetic above converts to double, reads the count with .item() and makes the
// gradient contiguous, which on a GPU stops every replica at every layer.
struct CudaReplicaSyncBatchNormFunction : torch::autograd::Function<CudaReplicaSyncBatchNormFunction> {
  static variable_list forward(AutogradContext* ctx, at::TensorList xs, at::TensorList weights, at::TensorList biases,
                               SyncBatchNormImpl* keeper) {
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
    variable_list ys, saved(xs.begin(), xs.end());
    saved.insert(saved.end(), weights.begin(), weights.end());
    for (size_t i = 0; i < xs.size(); ++i) {
      const auto device = xs[i].device();
      ys.push_back(at::batch_norm_elemt(xs[i], weights[i], biases[i], mean.to(device), invstd.to(device), keeper->eps));
    }
    saved.push_back(mean);
    saved.push_back(invstd);
    saved.push_back(all_counts.to(torch::kInt));
    ctx->save_for_backward(saved);
    return ys;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const size_t n = grads.size();
    const auto &mean = saved[2 * n], &invstd = saved[2 * n + 1], &counts = saved[2 * n + 2];
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
    variable_list out(3 * n + 1);  // inputs, weights, biases, `keeper`
    // Per replica, on its device: the incoming gradient, the statistics, and the sums
    // [sum of dy (C), sum of dy * (x - mean) (C)], which also give its weight's and bias's gradients.
    std::vector<torch::Tensor> dys, means, invstds;
    torch::Tensor summed;  // the sums over every replica
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
          at::batch_norm_backward_reduce(dys[i], x, means[i], invstds[i], saved[n + i], /*input_g=*/true,
                                         ctx->needs_input_grad(n + i), ctx->needs_input_grad(2 * n + i));
      out[n + i] = grad_weight;  // undefined where not asked for
      out[2 * n + i] = grad_bias;
      auto local = torch::cat({sum_dy, sum_dy_xmu}).to(home);
      summed = summed.defined() ? summed + local : local;
    }
    for (size_t i = 0; i < n; ++i) {
      const auto& x = saved[i];
      const auto sums = summed.to(x.device());
      out[i] = at::batch_norm_backward_elemt(dys[i], x, means[i], invstds[i],
                                             batchnorm::in_dtype_of(saved[n + i], mean),
                                             sums.narrow(0, 0, channels), sums.narrow(0, channels, channels),
                                             counts.to(x.device()));
    }
    for (const auto& device : others) StreamMark(device).wait_on(home);
    return out;
  }
};

variable_list replicas_batch_norm(at::TensorList xs, at::TensorList weights, at::TensorList biases,
                                  SyncBatchNormImpl* keeper) {
  if (xs[0].is_cuda()) return CudaReplicaSyncBatchNormFunction::apply(xs, weights, biases, keeper);
  return ReplicaSyncBatchNormFunction::apply(xs, weights, biases, keeper);
}

// Hands a replica's weight and bias on to the shared node unchanged. Made on the
// replica's thread, it runs in backward on the replica's stream: the shared node's
// gradients for them cross to that stream here (autograd orders the crossing), and reach
// the parameters' AccumulateGrad nodes on the stream those expect.
struct ReplicaParametersFunction : torch::autograd::Function<ReplicaParametersFunction> {
  static variable_list forward(AutogradContext* ctx, torch::Tensor weight, torch::Tensor bias) {
    ctx->set_materialize_grads(false);
    return {weight, bias};
  }
  static variable_list backward(AutogradContext*, variable_list grads) { return grads; }
};

}  // namespace

// Where the replicas' layer k meets: the inputs of this step, then the outputs. On CUDA
// the last to arrive computes on its stream after every input is ready on its
// replica's stream (`ready`), and each replica's stream waits for its output (`done`).
struct ReplicaGroup::Meeting {
  std::mutex mutex;
  std::condition_variable all_there;
  std::vector<torch::Tensor> xs, weights, biases, ys;
  std::vector<std::optional<StreamMark>> ready, done;
  std::vector<SyncBatchNormImpl*> layers;
  int arrived = 0;
  uint64_t round = 0;
  std::exception_ptr error;

  torch::Tensor meet(const ReplicaGroup::State& state, size_t replica, SyncBatchNormImpl& layer, const torch::Tensor& x,
                     const torch::Tensor& weight, const torch::Tensor& bias) {
    std::unique_lock<std::mutex> lock(mutex);
    const int expected = state.replicas.load();
    const uint64_t my_round = round;
    xs[replica] = x;
    weights[replica] = weight;
    biases[replica] = bias;
    layers[replica] = &layer;
    ready[replica].emplace(x.device());
    if (++arrived == expected) {
      error = nullptr;
      try {
        for (int r = 0; r < expected; ++r) {
          ready[static_cast<size_t>(r)]->wait();
          keep_for_current_stream(xs[static_cast<size_t>(r)]);
        }
        const std::vector<torch::Tensor> inputs(xs.begin(), xs.begin() + expected),
            replica_weights(weights.begin(), weights.begin() + expected),
            replica_biases(biases.begin(), biases.begin() + expected);
        // TensorLists, so that autograd sees each tensor as an input.
        auto outputs = replicas_batch_norm(inputs, replica_weights, replica_biases, layers[0]);
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
    // Autograd keeps what it needs; nothing else outlives the step.
    xs[replica] = weights[replica] = biases[replica] = torch::Tensor();
    if (error) std::rethrow_exception(error);
    done[replica]->wait();
    keep_for_current_stream(ys[replica]);
    return std::exchange(ys[replica], torch::Tensor());
  }

  void reset(size_t replicas) {
    std::lock_guard<std::mutex> lock(mutex);
    xs.assign(replicas, {});
    weights.assign(replicas, {});
    biases.assign(replicas, {});
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
    const auto parameters = ReplicaParametersFunction::apply(bn.weight, bn.bias);
    return meeting_->meet(*state_, replica_, bn, x, parameters[0], parameters[1]);
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
