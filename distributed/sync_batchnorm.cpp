#include "distributed/sync_batchnorm.h"

#include <torch/torch.h>

#include "distributed/batchnorm_math.h"
#include "distributed/batchnorm_relu.h"
#include "distributed/channels_last_batchnorm.h"
#include "distributed/process_group.h"
#include "core/error.h"
#include "core/sequential.h"

namespace fastcpp::distributed {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Across processes: each rank holds its own autograd node; the sums meet in all-reduces.
// On the CPU: the sums in double (Gloo reduces them), the input made contiguous.
struct ProcessSyncBatchNormFunction : torch::autograd::Function<ProcessSyncBatchNormFunction> {
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor x, torch::Tensor weight, torch::Tensor bias,
                               SyncBatchNormImpl* bn, Communicator* comm) {
    auto stats = batchnorm::local_stats(x);
    if (comm) comm->all_reduce_sum(stats);
    const auto n = batchnorm::normalization(stats, x.size(1), bn->eps, bn->momentum, bn->running_mean, bn->running_var);
    auto x_hat = batchnorm::normalize(x, n);
    ctx->save_for_backward({x_hat, weight, n.invstd});
    ctx->saved_data["count"] = n.count;
    ctx->saved_data["comm"] = reinterpret_cast<int64_t>(comm);
    return x_hat * batchnorm::per_channel(weight, x) + batchnorm::per_channel(bias, x);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto &x_hat = saved[0], &weight = saved[1], &invstd = saved[2];
    const auto dy = grads[0].contiguous();
    auto* comm = reinterpret_cast<Communicator*>(ctx->saved_data["comm"].toInt());
    auto local = batchnorm::local_grad_sums(dy, x_hat);
    const int64_t channels = dy.size(1);
    auto grad_bias = local.narrow(0, 0, channels).clone(), grad_weight = local.narrow(0, channels, channels).clone();
    if (comm) comm->all_reduce_sum(local);  // weight and bias gradients stay local: DDP averages them
    auto dx = batchnorm::input_grad(dy, x_hat, local, ctx->saved_data["count"].toDouble(), invstd, weight);
    return {dx, grad_weight, grad_bias, torch::Tensor(), torch::Tensor()};
  }
};

// On CUDA, as PyTorch's SyncBatchNorm: ATen's kernels for the statistics, their
// gather over the ranks' counts, the normalization and the backward, in the input's
// dtype and memory format, with nothing read back to the host.
struct CudaSyncBatchNormFunction : torch::autograd::Function<CudaSyncBatchNormFunction> {
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor x, torch::Tensor weight, torch::Tensor bias,
                               SyncBatchNormImpl* bn, Communicator* comm) {
    const int64_t channels = x.size(1);
    auto [mean, invstd] = at::batch_norm_stats(x, bn->eps);
    const auto count = torch::full({1}, static_cast<double>(x.numel() / channels), mean.options());
    // Every rank's [mean, invstd, count], gathered: [world, 2C + 1].
    const auto stats = torch::cat({mean, invstd, count});
    const auto gathered = comm ? comm->all_gather(stats) : stats.unsqueeze(0);
    // In the running statistics' dtype, which is how the kernel reads them.
    const auto counts = gathered.select(1, 2 * channels).to(bn->running_mean.scalar_type());
    std::tie(mean, invstd) = at::batch_norm_gather_stats_with_counts(
        x, gathered.narrow(1, 0, channels), gathered.narrow(1, channels, channels), bn->running_mean,
        bn->running_var, bn->momentum, bn->eps, counts);
    ctx->save_for_backward({x, weight, mean, invstd, counts.to(torch::kInt)});
    ctx->saved_data["comm"] = reinterpret_cast<int64_t>(comm);
    return at::batch_norm_elemt(x, weight, bias, mean, invstd, bn->eps);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto &x = saved[0], &weight = saved[1], &mean = saved[2], &invstd = saved[3], &counts = saved[4];
    const auto dy = grads[0].contiguous(x.suggest_memory_format());
    auto [sum_dy, sum_dy_xmu, grad_weight, grad_bias] =
        at::batch_norm_backward_reduce(dy, x, mean, invstd, weight, /*input_g=*/true, /*weight_g=*/true, /*bias_g=*/true);
    auto sums = torch::cat({sum_dy, sum_dy_xmu});
    auto* comm = reinterpret_cast<Communicator*>(ctx->saved_data["comm"].toInt());
    if (comm) comm->all_reduce_sum(sums);  // weight and bias gradients stay local: DDP averages them
    const int64_t channels = sum_dy.size(0);
    auto dx = at::batch_norm_backward_elemt(dy, x, mean, invstd, batchnorm::in_dtype_of(weight, mean),
                                            sums.narrow(0, 0, channels), sums.narrow(0, channels, channels), counts);
    return {dx, grad_weight, grad_bias, torch::Tensor(), torch::Tensor()};
  }
};

// On CUDA with the channels innermost (channels_last_batchnorm.h): the same exchanges as
// PyTorch's, around kernels of our own that read 16 bytes a thread and take three
// launches each way instead of ATen's six or seven forward and four backward.
struct ChannelsLastSyncBatchNormFunction : torch::autograd::Function<ChannelsLastSyncBatchNormFunction> {
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor x, torch::Tensor weight, torch::Tensor bias,
                               SyncBatchNormImpl* bn, Communicator* comm) {
    const auto stats = channels_last::local_statistics(x, bn->eps);
    const auto gathered = comm ? comm->all_gather(stats) : stats.unsqueeze(0);
    auto n = channels_last::normalize(x, gathered, weight, bias, bn->running_mean, bn->running_var, bn->momentum,
                                      bn->eps);
    ctx->save_for_backward({x, weight, n.mean, n.invstd, n.count});
    ctx->saved_data["comm"] = reinterpret_cast<int64_t>(comm);
    return n.y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto &x = saved[0], &weight = saved[1], &mean = saved[2], &invstd = saved[3], &count = saved[4];
    const auto dy = channels_last::gradient_like_input(grads[0], x);
    auto sums = channels_last::grad_sums(dy, x, mean, invstd);
    auto* comm = reinterpret_cast<Communicator*>(ctx->saved_data["comm"].toInt());
    if (comm) comm->all_reduce_sum(sums.sums);  // weight and bias gradients stay local: DDP averages them
    auto dx = channels_last::input_grad(dy, x, mean, invstd, weight, sums.sums, count);
    return {dx, sums.grad_weight, sums.grad_bias, torch::Tensor(), torch::Tensor()};
  }
};

class ProcessBatchNormSync : public BatchNormSync {
 public:
  explicit ProcessBatchNormSync(std::shared_ptr<Communicator> comm) : comm_(std::move(comm)) {}
  bool has_peers() const override { return comm_->world_size() > 1; }
  torch::Tensor forward(SyncBatchNormImpl& bn, const torch::Tensor& x) override {
    return synchronized_batch_norm(bn, x, comm_.get());
  }

 private:
  std::shared_ptr<Communicator> comm_;
};

}  // namespace

torch::Tensor synchronized_batch_norm(SyncBatchNormImpl& bn, const torch::Tensor& x, Communicator* comm) {
  if (channels_last::kernels_apply(bn, x))
    return ChannelsLastSyncBatchNormFunction::apply(x, bn.weight, bn.bias, &bn, comm);
  if (x.is_cuda()) return CudaSyncBatchNormFunction::apply(x, bn.weight, bn.bias, &bn, comm);
  return ProcessSyncBatchNormFunction::apply(x, bn.weight, bn.bias, &bn, comm);
}

namespace {

template <class BatchNormImpl>
std::shared_ptr<SyncBatchNormImpl> sync_from(const BatchNormImpl& bn, const std::shared_ptr<Communicator>& comm) {
  const auto& options = bn.options;
  // Share, not copy: the optimizer holds these very tensors.
  auto sync = std::make_shared<SyncBatchNormImpl>(options.num_features(), options.eps(),
                                                   options.momentum().value_or(0.1), bn.weight, bn.bias,
                                                   bn.running_mean, bn.running_var, bn.num_batches_tracked);
  if (comm) sync->set_communicator(comm);
  return sync;
}

// The options of a torch::nn::BatchNorm1d/2d/3d; nullptr for any other module.
const torch::nn::BatchNormOptions* torch_batchnorm_options(const torch::nn::Module& m) {
  if (const auto* bn = dynamic_cast<const torch::nn::BatchNorm1dImpl*>(&m)) return &bn->options;
  if (const auto* bn = dynamic_cast<const torch::nn::BatchNorm2dImpl*>(&m)) return &bn->options;
  if (const auto* bn = dynamic_cast<const torch::nn::BatchNorm3dImpl*>(&m)) return &bn->options;
  return nullptr;
}

bool is_torch_batchnorm(const torch::nn::Module& m) { return torch_batchnorm_options(m) != nullptr; }

// A setting of a torch::nn::BatchNorm that SyncBatchNorm (affine, with running statistics
// and a momentum) would silently change; "" when there is none (or m is no BatchNorm).
std::string unsupported_setting(const torch::nn::Module& m) {
  const auto* options = torch_batchnorm_options(m);
  if (!options) return "";
  if (!options->affine()) return "affine=false";
  if (!options->track_running_stats()) return "track_running_stats=false";
  if (!options->momentum()) return "momentum=none (a cumulative average)";
  return "";
}

}  // namespace

SyncBatchNormImpl::SyncBatchNormImpl(int64_t num_features_, double eps_, double momentum_)
    : SyncBatchNormImpl(num_features_, eps_, momentum_, {}, {}, {}, {}, {}) {}

void SyncBatchNormImpl::reset() {
  weight = register_parameter("weight", torch::ones({num_features}));
  bias = register_parameter("bias", torch::zeros({num_features}));
  running_mean = register_buffer("running_mean", torch::zeros({num_features}));
  running_var = register_buffer("running_var", torch::ones({num_features}));
  num_batches_tracked = register_buffer("num_batches_tracked", torch::zeros({}, torch::kLong));
}

void SyncBatchNormImpl::set_communicator(const std::shared_ptr<Communicator>& comm) {
  sync_ = std::make_shared<ProcessBatchNormSync>(comm);
}

SyncBatchNormImpl::SyncBatchNormImpl(int64_t num_features_, double eps_, double momentum_, torch::Tensor weight_,
                                     torch::Tensor bias_, torch::Tensor running_mean_, torch::Tensor running_var_,
                                     torch::Tensor num_batches_tracked_)
    : num_features(num_features_), eps(eps_), momentum(momentum_) {
  auto given = [](torch::Tensor t, torch::Tensor fallback) { return t.defined() ? t : fallback; };
  // A given parameter keeps whether it trains: a frozen BatchNorm (train_bn off) stays frozen.
  auto trains = [](const torch::Tensor& t) { return !t.defined() || t.requires_grad(); };
  weight = register_parameter("weight", given(weight_, torch::ones({num_features})), trains(weight_));
  bias = register_parameter("bias", given(bias_, torch::zeros({num_features})), trains(bias_));
  running_mean = register_buffer("running_mean", given(running_mean_, torch::zeros({num_features})));
  running_var = register_buffer("running_var", given(running_var_, torch::ones({num_features})));
  num_batches_tracked =
      register_buffer("num_batches_tracked", given(num_batches_tracked_, torch::zeros({}, torch::kLong)));
}

void SyncBatchNormImpl::begin_batch(const torch::Tensor& x) {
  if (x.dim() < 2 || x.size(1) != num_features)
    throw Error("SyncBatchNorm: expected input [N, " + std::to_string(num_features) + ", ...], got " + c10::str(x.sizes()));
  // BatchNorm's check: from one value a channel its running variance would become NaN.
  // With peers, their values count too (batchnorm::normalization checks the sum).
  if (is_training() && (!sync_ || !sync_->has_peers()) && x.numel() == x.size(1))
    throw Error("SyncBatchNorm: expected more than 1 value per channel when training, got input size " +
                c10::str(x.sizes()) + "; train on batches of 2 or more (drop_last drops a last batch of 1)");
  if (is_training() && (!sync_ || sync_->counts_batches())) {  // as torch::nn::BatchNorm counts
    torch::NoGradGuard no_grad;
    num_batches_tracked.add_(1);
  }
}

torch::Tensor SyncBatchNormImpl::forward_relu(const torch::Tensor& x, const torch::Tensor& residual) {
  // In training the fused kernel has a backward (but no peers to meet); in evaluation none.
  const bool fuses = is_training() ? !sync_ || !sync_->has_peers() : !torch::GradMode::is_enabled();
  if (!fuses || !fused_batchnorm_relu_applies(*this, x, residual)) {
    const auto y = forward(x);
    return torch::relu(residual.defined() ? y + residual : y);
  }
  begin_batch(x);
  return fused_batchnorm_relu(*this, x, residual);
}

torch::Tensor SyncBatchNormImpl::forward(const torch::Tensor& x) {
  begin_batch(x);
  if (!is_training() || !sync_ || !sync_->has_peers())
    return torch::batch_norm(x, weight, bias, running_mean, running_var, is_training(), momentum, eps,
                             /*cudnn_enabled=*/true);
  return sync_->forward(*this, x);
}

torch::nn::Sequential convert_sync_batchnorm(const torch::nn::Sequential& model, const std::shared_ptr<Communicator>& comm) {
  torch::nn::Sequential converted;
  for (auto& layer : named_layers(*model)) {
    const auto& child = layer.module;
    std::string name = layer.name;
    if (auto bn1 = std::dynamic_pointer_cast<torch::nn::BatchNorm1dImpl>(child)) converted->push_back(std::move(name), SyncBatchNorm(sync_from(*bn1, comm)));
    else if (auto bn2 = std::dynamic_pointer_cast<torch::nn::BatchNorm2dImpl>(child)) converted->push_back(std::move(name), SyncBatchNorm(sync_from(*bn2, comm)));
    else if (auto bn3 = std::dynamic_pointer_cast<torch::nn::BatchNorm3dImpl>(child)) converted->push_back(std::move(name), SyncBatchNorm(sync_from(*bn3, comm)));
    else {
      for (const auto& module : child->modules())
        if (auto sync = std::dynamic_pointer_cast<SyncBatchNormImpl>(module); sync && comm) sync->set_communicator(comm);
      converted->push_back(std::move(name), layer.any);
    }
  }
  return converted;
}

std::vector<std::string> unconvertible_batchnorms(const torch::nn::Module& model) {
  std::vector<std::string> names;
  std::function<void(const torch::nn::Module&, const std::string&, bool)> visit =
      [&](const torch::nn::Module& module, const std::string& prefix, bool reachable) {
        for (const auto& item : module.named_children()) {
          const auto name = prefix.empty() ? item.key() : prefix + "." + item.key();
          const auto& child = *item.value();
          if (is_torch_batchnorm(child) && !reachable) names.push_back(name);
          visit(child, name, reachable && dynamic_cast<const torch::nn::SequentialImpl*>(&child) != nullptr);
        }
      };
  visit(model, "", dynamic_cast<const torch::nn::SequentialImpl*>(&model) != nullptr);
  return names;
}

void check_batchnorms_convertible(const torch::nn::Module& model, const std::string& who, const std::string& peer) {
  const std::string or_else = ", or pass sync_bn = false to keep per-" + peer + " statistics";
  std::string names;
  for (const auto& name : unconvertible_batchnorms(model)) names += (names.empty() ? "" : ", ") + name;
  if (!names.empty())
    throw Error(who + "(sync_bn): cannot make these BatchNorm layers synchronized, they are members of modules C++ "
                "cannot rebuild: " + names + ". Build them as distributed::SyncBatchNorm" + or_else);
  for (const auto& item : model.named_modules())
    if (const auto setting = unsupported_setting(*item.value()); !setting.empty())
      names += (names.empty() ? "" : ", ") + item.key() + " (" + setting + ")";
  if (!names.empty())
    throw Error(who + "(sync_bn): SyncBatchNorm would not keep these BatchNorm layers' settings: " + names +
                ". Build them with affine weights, running statistics and a momentum" + or_else);
}

}  // namespace fastcpp::distributed
