#include "parallel/replica_batchnorm.h"

#include <torch/torch.h>

#include <algorithm>
#include <condition_variable>
#include <exception>
#include <mutex>

#include "core/error.h"
#include "distributed/batchnorm_math.h"
#include "distributed/channels_last_batchnorm.h"
#include "distributed/sync_batchnorm.h"
#include "parallel/replica_workers.h"
#include "parallel/replica_streams.h"

namespace fastcpp::distributed {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// `gradient`, or none where autograd wants none (a frozen weight or bias).
torch::Tensor unless_needed(AutogradContext* ctx, size_t input, torch::Tensor gradient) {
  return ctx->needs_input_grad(input) ? std::move(gradient) : torch::Tensor();
}

// How a layer's replicas compute, as the processes' synced layer would
// (distributed/sync_batchnorm.cpp): the library's channels-last kernels where they apply
// (channels_last_batchnorm.h; their CPU twin where chosen), else ATen's kernels on CUDA, the
// sums in double on the CPU. Every replica of a layer takes the same one.
enum class Arithmetic { channels_last, aten, double_sums };

Arithmetic arithmetic_for(const SyncBatchNormImpl& layer, const torch::Tensor& x) {
  if (channels_last::kernels_apply(layer, x)) return Arithmetic::channels_last;
  return x.is_cuda() ? Arithmetic::aten : Arithmetic::double_sums;
}

// One replica's share of a synchronized layer's forward. Its thread computes the
// statistics of its input and makes its output tensors before the replicas meet, and fills
// them after they met: the meeting itself only gathers the statistics, so the replicas'
// threads queue most of the layer's work side by side.
struct ReplicaShare {
  torch::Tensor x, weight, bias;
  Arithmetic arithmetic = Arithmetic::double_sums;
  // double_sums: [sum, sum of squares, count] in double; aten: ATen's mean and 1/std of
  // this input (in `statistics` and `invstd`) and its count per channel; channels_last:
  // [mean, 1/std, count] in fp32, what the kernels gather.
  torch::Tensor statistics, invstd, count;
  // Empty until filled after the meeting: the output y and, with channels_last, the whole
  // batch's mean, 1/std and count as the normalization computes them for the backward.
  channels_last::Normalized out;
  std::optional<StreamMark> ready;  // the statistics are computed (CUDA)
};

// What the last replica to arrive made of the statistics, and what the backward keeps.
struct Combined {
  batchnorm::Normalization cpu;  // double_sums
  // On each replica's device, ready where `done` marks them. aten: the whole batch's mean,
  // 1/std and the replicas' counts; channels_last: every replica's statistics, stacked.
  std::vector<torch::Tensor> mean, invstd, counts, gathered;
  std::vector<std::optional<StreamMark>> done;
};

// On the replica's thread, before the meeting: the statistics of its input and its output
// tensors, in the input's dtype and memory format, with nothing read back to the host.
void compute_statistics(ReplicaShare& share, const SyncBatchNormImpl& layer) {
  torch::NoGradGuard no_grad;
  const auto& x = share.x;
  share.arithmetic = arithmetic_for(layer, x);
  switch (share.arithmetic) {
    case Arithmetic::channels_last:
      share.statistics = channels_last::local_statistics(x, layer.eps);
      share.out = channels_last::empty_normalized(x);
      break;
    case Arithmetic::aten:
      std::tie(share.statistics, share.invstd) = at::batch_norm_stats(x, layer.eps);
      share.count = torch::full({1}, static_cast<double>(x.numel() / x.size(1)), share.statistics.options());
      share.out.y = at::empty_like(x, x.suggest_memory_format());
      break;
    case Arithmetic::double_sums:
      share.statistics = batchnorm::local_stats(x);
      share.out.y = at::empty_like(x, x.suggest_memory_format());
      break;
  }
  share.ready.emplace(x.device());
}

// `tensors`, each made on its share's stream, read on this thread's: each stream's work done first.
void wait_for(c10::ArrayRef<ReplicaShare> shares, std::initializer_list<torch::Tensor ReplicaShare::*> tensors) {
  for (const auto& share : shares) {
    share.ready->wait();
    for (const auto member : tensors) keep_for_current_stream(share.*member);
  }
}

// By the last replica to arrive: every replica's statistics stacked on each replica's device
// (channels_last, whose normalization combines them), or combined (the others, which also
// update the running statistics).
Combined combine(c10::ArrayRef<ReplicaShare> shares, SyncBatchNormImpl& keeper) {
  torch::NoGradGuard no_grad;
  Combined combined;
  const auto home = keeper.running_mean.device();
  const int64_t channels = shares[0].x.size(1);
  for (const auto& share : shares)
    if (share.arithmetic != shares[0].arithmetic)
      throw Error("to_parallel: the replicas of a synced BatchNorm of " + std::to_string(channels) +
                  " channels got inputs of different kinds (dtype, memory format or device)");
  if (shares[0].arithmetic == Arithmetic::channels_last) {
    wait_for(shares, {&ReplicaShare::statistics});
    for (const auto& share : shares) {
      const auto device = share.x.device();
      torch::Tensor gathered;
      for (size_t i = 0; i < combined.gathered.size() && !gathered.defined(); ++i)
        if (combined.gathered[i].device() == device) gathered = combined.gathered[i];  // one stack a device
      if (!gathered.defined()) {
        std::vector<torch::Tensor> statistics;
        for (const auto& peer : shares) statistics.push_back(peer.statistics.to(device));
        gathered = torch::stack(statistics);
      }
      combined.gathered.push_back(gathered);
      combined.done.emplace_back(std::in_place, device);
    }
    return combined;
  }
  if (shares[0].arithmetic == Arithmetic::double_sums) {
    auto summed = shares[0].statistics.to(home);
    for (size_t i = 1; i < shares.size(); ++i) summed += shares[i].statistics.to(home);
    combined.cpu = batchnorm::normalization(summed, channels, keeper.eps, keeper.momentum, keeper.running_mean,
                                            keeper.running_var);
    return combined;
  }
  wait_for(shares, {&ReplicaShare::statistics, &ReplicaShare::invstd, &ReplicaShare::count});
  std::vector<torch::Tensor> means, invstds, counts;
  for (const auto& share : shares) {
    means.push_back(share.statistics.to(home));
    invstds.push_back(share.invstd.to(home));
    counts.push_back(share.count.to(home));
  }
  // In the running statistics' dtype, which is how the kernel reads them.
  const auto all_counts = torch::cat(counts).to(keeper.running_mean.scalar_type());
  const auto [mean, invstd] = at::batch_norm_gather_stats_with_counts(
      shares[0].x, torch::stack(means), torch::stack(invstds), keeper.running_mean, keeper.running_var,
      keeper.momentum, keeper.eps, all_counts);
  const auto int_counts = all_counts.to(torch::kInt);
  for (const auto& share : shares) {
    const auto device = share.x.device();
    combined.mean.push_back(mean.to(device));
    combined.invstd.push_back(invstd.to(device));
    combined.counts.push_back(int_counts.to(device));
    combined.done.emplace_back(std::in_place, device);
  }
  return combined;
}

// On the replica's thread, after the meeting: its output, normalized with the whole
// batch's statistics and scaled and shifted by its weight and bias. With channels_last the
// normalization combines the statistics itself, and replica 0's updates the running ones.
void normalize_share(ReplicaShare& share, const Combined& combined, size_t replica, SyncBatchNormImpl& layer) {
  torch::NoGradGuard no_grad;
  const auto& x = share.x;
  switch (share.arithmetic) {
    case Arithmetic::channels_last: {
      combined.done[replica]->wait();
      const auto& gathered = combined.gathered[replica];
      keep_for_current_stream(gathered);
      const bool keeper = replica == 0;
      channels_last::normalize_into(share.out, x, gathered, share.weight, share.bias,
                                    keeper ? layer.running_mean : torch::Tensor(),
                                    keeper ? layer.running_var : torch::Tensor(), layer.momentum, layer.eps);
      return;
    }
    case Arithmetic::aten:
      combined.done[replica]->wait();
      keep_for_current_stream(combined.mean[replica]);
      keep_for_current_stream(combined.invstd[replica]);
      at::batch_norm_elemt_out(share.out.y, x, share.weight, share.bias, combined.mean[replica],
                               combined.invstd[replica], layer.eps);
      return;
    case Arithmetic::double_sums: {
      const auto x_hat = batchnorm::normalize(x, combined.cpu);
      // In the input's dtype, as BatchNorm's own kernels answer under autocast: fp32
      // weights would otherwise promote a bf16 activation to fp32.
      const auto dtype = x_hat.scalar_type();
      torch::addcmul_out(share.out.y, batchnorm::per_channel(share.bias.to(dtype), x_hat), x_hat,
                         batchnorm::per_channel(share.weight.to(dtype), x_hat));
      return;
    }
  }
}

// One node for all replicas: inputs x_0..x_n-1, each replica's weight and bias (as
// ReplicaParametersFunction hands them over), outputs y_0..y_n-1. Its forward only hands
// over the outputs the replicas fill (normalize_share); in backward it returns each
// replica's input, weight and bias gradient: the input gradients need the sums of every
// replica, so backward runs here once for all of them.
struct ReplicaSyncBatchNormFunction : torch::autograd::Function<ReplicaSyncBatchNormFunction> {
  static variable_list forward(AutogradContext* ctx, at::TensorList xs, at::TensorList weights, at::TensorList,
                               const Combined* combined, const std::vector<torch::Tensor>* outputs) {
    variable_list saved(xs.begin(), xs.end());
    saved.insert(saved.end(), weights.begin(), weights.end());
    saved.push_back(combined->cpu.mean);
    saved.push_back(combined->cpu.invstd);
    ctx->save_for_backward(saved);
    ctx->saved_data["count"] = combined->cpu.count;
    return *outputs;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const size_t n = grads.size();
    batchnorm::Normalization normalization;
    normalization.mean = saved[2 * n];
    normalization.invstd = saved[2 * n + 1];
    normalization.count = ctx->saved_data["count"].toDouble();
    const int64_t channels = normalization.invstd.size(0);
    std::vector<torch::Tensor> dys, x_hats, locals;
    for (size_t i = 0; i < n; ++i) {
      x_hats.push_back(batchnorm::normalize(saved[i], normalization));  // not kept from forward: recomputed
      dys.push_back(grads[i].defined() ? grads[i].contiguous() : torch::zeros_like(x_hats[i]));
      locals.push_back(batchnorm::local_grad_sums(dys[i], x_hats[i]));  // [sum of dy, sum of dy * x_hat]
    }
    const auto& invstd = normalization.invstd;
    auto summed = locals[0].to(invstd.device(), torch::kDouble);
    for (size_t i = 1; i < n; ++i) summed += locals[i].to(invstd.device(), torch::kDouble);
    variable_list out(3 * n + 2);  // inputs, weights, biases, `combined`, `outputs`
    for (size_t i = 0; i < n; ++i) {
      const auto& weight = saved[n + i];
      out[i] = batchnorm::input_grad(dys[i], x_hats[i], summed, normalization.count, invstd,
                                     weight.to(dys[i].scalar_type()));
      out[n + i] = unless_needed(ctx, n + i, locals[i].narrow(0, channels, channels).to(weight.scalar_type()));
      out[2 * n + i] = unless_needed(ctx, 2 * n + i, locals[i].narrow(0, 0, channels).to(weight.scalar_type()));
    }
    return out;
  }
};

// The same node for ATen's kernels and the library's channels-last ones (on CUDA, or the
// twin on the CPU), in the input's dtype and memory format. It keeps per replica the whole
// batch's mean, 1/std and count on that replica's device; channels_last's are filled after
// the node is made (normalize_share), which does not count as a change for autograd.
struct DeviceReplicaSyncBatchNormFunction : torch::autograd::Function<DeviceReplicaSyncBatchNormFunction> {
  static variable_list forward(AutogradContext* ctx, at::TensorList xs, at::TensorList weights, at::TensorList,
                               at::TensorList means, at::TensorList invstds, at::TensorList counts,
                               bool channels_last_kernels, const std::vector<torch::Tensor>* outputs) {
    variable_list saved;
    for (const auto list : {xs, weights, means, invstds, counts}) saved.insert(saved.end(), list.begin(), list.end());
    ctx->save_for_backward(saved);
    ctx->saved_data["channels_last"] = channels_last_kernels;
    return *outputs;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const size_t n = grads.size();
    const bool kernels = ctx->saved_data["channels_last"].toBool();
    // Replica i's input, weight, and the whole batch's mean, 1/std and count(s) on its device.
    const auto x = [&](size_t i) -> const torch::Tensor& { return saved[i]; };
    const auto weight = [&](size_t i) -> const torch::Tensor& { return saved[n + i]; };
    const auto mean = [&](size_t i) -> const torch::Tensor& { return saved[2 * n + i]; };
    const auto invstd = [&](size_t i) -> const torch::Tensor& { return saved[3 * n + i]; };
    const auto count = [&](size_t i) -> const torch::Tensor& { return saved[4 * n + i]; };
    const auto home = x(0).device();
    const int64_t channels = mean(0).size(0);
    // Autograd knows this node by one stream, the home device's current one: it made that
    // stream wait for every incoming gradient and takes every output as ready there. The
    // work on another GPU's current stream starts after it and ends before it.
    std::vector<torch::Device> others;
    for (size_t i = 0; i < n; ++i)
      if (const auto device = x(i).device();
          device != home && std::find(others.begin(), others.end(), device) == others.end())
        others.push_back(device);
    const StreamMark gradients_ready(home);
    for (const auto& device : others) gradients_ready.wait_on(device);
    variable_list out(6 * n + 2);  // inputs, weights, biases, means, invstds, counts; the flag, `outputs`
    // Per replica, on its device: the incoming gradient and the sums
    // [sum of dy (C), sum of dy * (x - mean) (C)], which also give its weight's and bias's gradients.
    std::vector<torch::Tensor> dys;
    torch::Tensor summed;  // the sums over every replica
    for (size_t i = 0; i < n; ++i) {
      // Made on the replica's stream, read on this one (autograd's, or the default
      // stream of a replica's other GPU): not reused before these reads are done.
      for (const auto& t : {x(i), grads[i], mean(i), invstd(i), count(i)}) keep_for_current_stream(t);
      const auto given = grads[i].defined() ? grads[i] : torch::zeros_like(x(i));
      torch::Tensor local;
      if (kernels) {
        dys.push_back(channels_last::gradient_like_input(given, x(i)));
        auto sums = channels_last::grad_sums(dys[i], x(i), mean(i), invstd(i));
        out[n + i] = unless_needed(ctx, n + i, sums.grad_weight);
        out[2 * n + i] = unless_needed(ctx, 2 * n + i, sums.grad_bias);
        local = sums.sums.to(home);
      } else {
        dys.push_back(given.contiguous(x(i).suggest_memory_format()));
        auto [sum_dy, sum_dy_xmu, grad_weight, grad_bias] =
            at::batch_norm_backward_reduce(dys[i], x(i), mean(i), invstd(i), weight(i), /*input_g=*/true,
                                           ctx->needs_input_grad(n + i), ctx->needs_input_grad(2 * n + i));
        out[n + i] = grad_weight;  // undefined where not asked for
        out[2 * n + i] = grad_bias;
        local = torch::cat({sum_dy, sum_dy_xmu}).to(home);
      }
      summed = summed.defined() ? summed + local : local;
    }
    for (size_t i = 0; i < n; ++i) {
      const auto sums = summed.to(x(i).device());
      out[i] = kernels ? channels_last::input_grad(dys[i], x(i), mean(i), invstd(i), weight(i), sums, count(i))
                       : at::batch_norm_backward_elemt(dys[i], x(i), mean(i), invstd(i),
                                                       batchnorm::in_dtype_of(weight(i), mean(i)),
                                                       sums.narrow(0, 0, channels),
                                                       sums.narrow(0, channels, channels), count(i));
    }
    for (const auto& device : others) StreamMark(device).wait_on(home);
    return out;
  }
};

// The outputs (the shares' y, filled after the meeting) with the shared node as their history.
variable_list replicas_batch_norm(c10::ArrayRef<ReplicaShare> shares, const Combined& combined) {
  std::vector<torch::Tensor> xs, weights, biases, outputs, means, invstds, counts;
  const auto arithmetic = shares[0].arithmetic;
  for (size_t i = 0; i < shares.size(); ++i) {
    const auto& share = shares[i];
    xs.push_back(share.x);
    weights.push_back(share.weight);
    biases.push_back(share.bias);
    outputs.push_back(share.out.y);
    if (arithmetic == Arithmetic::double_sums) continue;
    const bool kernels = arithmetic == Arithmetic::channels_last;
    means.push_back(kernels ? share.out.mean : combined.mean[i]);
    invstds.push_back(kernels ? share.out.invstd : combined.invstd[i]);
    counts.push_back(kernels ? share.out.count : combined.counts[i]);
  }
  // As TensorLists, so that autograd sees each tensor as an input (a vector would be one opaque argument).
  const at::TensorList inputs(xs), replica_weights(weights), replica_biases(biases);
  if (arithmetic == Arithmetic::double_sums)
    return ReplicaSyncBatchNormFunction::apply(inputs, replica_weights, replica_biases, &combined, &outputs);
  return DeviceReplicaSyncBatchNormFunction::apply(inputs, replica_weights, replica_biases, at::TensorList(means),
                                                   at::TensorList(invstds), at::TensorList(counts),
                                                   arithmetic == Arithmetic::channels_last, &outputs);
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

// Where the replicas' layer k meets. Each replica brings its share (statistics computed,
// output made); the last to arrive gathers (or combines) the statistics and makes the shared
// node; each then fills its own output. On CUDA the gathering waits on every replica's stream
// for its statistics (`ready`), and each replica's stream for the gathered ones (`done`).
struct ReplicaGroup::Meeting {
  std::mutex mutex;
  std::condition_variable all_there;
  std::vector<ReplicaShare> shares;
  std::vector<torch::Tensor> ys;  // the shares' outputs with their autograd history
  std::shared_ptr<const Combined> combined;
  std::vector<SyncBatchNormImpl*> layers;
  int arrived = 0;
  uint64_t round = 0;
  std::exception_ptr error;

  torch::Tensor meet(const ReplicaGroup::State& state, size_t replica, SyncBatchNormImpl& layer, const torch::Tensor& x,
                     const torch::Tensor& weight, const torch::Tensor& bias) {
    ReplicaShare share{x, weight, bias};
    compute_statistics(share, layer);  // before the meeting: side by side with the other replicas
    std::unique_lock<std::mutex> lock(mutex);
    const int expected = state.replicas.load();
    const uint64_t my_round = round;
    shares[replica] = std::move(share);
    layers[replica] = &layer;
    if (++arrived == expected) {
      error = nullptr;
      try {
        const c10::ArrayRef<ReplicaShare> present(shares.data(), static_cast<size_t>(expected));
        combined = std::make_shared<const Combined>(combine(present, *layers[0]));
        auto outputs = replicas_batch_norm(present, *combined);
        std::copy(outputs.begin(), outputs.end(), ys.begin());
      } catch (...) {
        error = std::current_exception();
      }
      arrived = 0;
      ++round;
      all_there.notify_all();
    } else {
      all_there.wait(lock, [&] { return round != my_round || state.aborted.load(); });
      if (round == my_round) throw ReplicaStopped("to_parallel: another replica's forward failed");
    }
    // Autograd keeps what it needs; nothing else outlives the step.
    share = std::exchange(shares[replica], ReplicaShare());
    const auto statistics = combined;
    auto y = std::exchange(ys[replica], torch::Tensor());
    if (error) std::rethrow_exception(error);
    lock.unlock();
    normalize_share(share, *statistics, replica, layer);
    return y;
  }

  void reset(size_t replicas) {
    std::lock_guard<std::mutex> lock(mutex);
    shares.clear();  // shares hold marks, which are not copyable: emptied, then sized
    shares.resize(replicas);
    ys.assign(replicas, {});
    combined.reset();
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
  for (auto& meeting : meetings_) meeting->reset(meeting->ys.size());
}

void ReplicaGroup::abort() {
  state_->aborted = true;
  for (auto& meeting : meetings_) meeting->wake();
}

}  // namespace fastcpp::distributed
