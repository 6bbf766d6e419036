#include "distributed/sync_batchnorm.h"

#include <torch/torch.h>

#include "distributed/process_group.h"
#include "core/error.h"
#include "learner/sequential.h"

namespace fastcpp::distributed {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Shape [1, C, 1, ...] to broadcast per-channel values over x.
torch::Tensor per_channel(const torch::Tensor& v, const torch::Tensor& x) {
  std::vector<int64_t> shape(static_cast<size_t>(x.dim()), 1);
  shape[1] = v.size(0);
  return v.view(shape);
}

std::vector<int64_t> reduce_dims(const torch::Tensor& x) {
  std::vector<int64_t> dims{0};
  for (int64_t d = 2; d < x.dim(); ++d) dims.push_back(d);
  return dims;
}

struct SyncBatchNormFunction : torch::autograd::Function<SyncBatchNormFunction> {
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor x, torch::Tensor weight, torch::Tensor bias,
                               torch::Tensor running_mean, torch::Tensor running_var, double eps, double momentum,
                               Communicator* comm) {
    const auto dims = reduce_dims(x);
    const int64_t channels = x.size(1);
    const double local_count = static_cast<double>(x.numel() / std::max<int64_t>(channels, 1));
    // One all-reduce: [sum (C), sum of squares (C), count (1)], in double for the variance.
    auto xd = x.to(torch::kDouble);
    auto stats = torch::cat({xd.sum(dims), (xd * xd).sum(dims), torch::full({1}, local_count, xd.options())});
    comm->all_reduce_sum(stats);
    const double count = stats[2 * channels].item<double>();
    auto mean = stats.narrow(0, 0, channels) / count;
    auto var = (stats.narrow(0, channels, channels) / count - mean * mean).clamp_min(0);
    auto invstd = (var + eps).rsqrt();
    {
      torch::NoGradGuard no_grad;
      running_mean.mul_(1 - momentum).add_(mean.to(running_mean.scalar_type()), momentum);
      const double unbias = count > 1 ? count / (count - 1) : 1.0;
      running_var.mul_(1 - momentum).add_((var * unbias).to(running_var.scalar_type()), momentum);
    }
    auto mean_f = mean.to(x.scalar_type()), invstd_f = invstd.to(x.scalar_type());
    auto x_hat = (x - per_channel(mean_f, x)) * per_channel(invstd_f, x);
    ctx->save_for_backward({x_hat, weight, invstd_f});
    ctx->saved_data["count"] = count;
    ctx->saved_data["comm"] = reinterpret_cast<int64_t>(comm);
    return x_hat * per_channel(weight, x) + per_channel(bias, x);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto &x_hat = saved[0], &weight = saved[1], &invstd = saved[2];
    const auto dy = grads[0].contiguous();
    const double count = ctx->saved_data["count"].toDouble();
    auto* comm = reinterpret_cast<Communicator*>(ctx->saved_data["comm"].toInt());
    const auto dims = reduce_dims(dy);
    const int64_t channels = dy.size(1);
    auto sum_dy = dy.sum(dims);
    auto sum_dy_xhat = (dy * x_hat).sum(dims);
    auto grad_weight = sum_dy_xhat.clone(), grad_bias = sum_dy.clone();  // local: DDP averages them
    auto global = torch::cat({sum_dy, sum_dy_xhat});
    comm->all_reduce_sum(global);
    auto mean_dy = global.narrow(0, 0, channels) / count;
    auto mean_dy_xhat = global.narrow(0, channels, channels) / count;
    auto dx = (dy - per_channel(mean_dy, dy) - x_hat * per_channel(mean_dy_xhat, dy)) *
              per_channel(invstd * weight, dy);
    return {dx, grad_weight, grad_bias, torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor(),
            torch::Tensor()};
  }
};

template <class BatchNormImpl>
std::shared_ptr<SyncBatchNormImpl> sync_from(const BatchNormImpl& bn, const std::shared_ptr<Communicator>& comm) {
  const auto& options = bn.options;
  // Share, not copy: the optimizer holds these very tensors.
  auto sync = std::make_shared<SyncBatchNormImpl>(options.num_features(), options.eps(),
                                                   options.momentum().value_or(0.1), bn.weight, bn.bias,
                                                   bn.running_mean, bn.running_var, bn.num_batches_tracked);
  sync->set_communicator(comm);
  return sync;
}

bool is_torch_batchnorm(const torch::nn::Module& m) {
  return dynamic_cast<const torch::nn::BatchNorm1dImpl*>(&m) || dynamic_cast<const torch::nn::BatchNorm2dImpl*>(&m) ||
         dynamic_cast<const torch::nn::BatchNorm3dImpl*>(&m);
}

}  // namespace

SyncBatchNormImpl::SyncBatchNormImpl(int64_t num_features_, double eps_, double momentum_)
    : SyncBatchNormImpl(num_features_, eps_, momentum_, {}, {}, {}, {}, {}) {}

SyncBatchNormImpl::SyncBatchNormImpl(int64_t num_features_, double eps_, double momentum_, torch::Tensor weight_,
                                     torch::Tensor bias_, torch::Tensor running_mean_, torch::Tensor running_var_,
                                     torch::Tensor num_batches_tracked_)
    : num_features(num_features_), eps(eps_), momentum(momentum_) {
  auto given = [](torch::Tensor t, torch::Tensor fallback) { return t.defined() ? t : fallback; };
  weight = register_parameter("weight", given(weight_, torch::ones({num_features})));
  bias = register_parameter("bias", given(bias_, torch::zeros({num_features})));
  running_mean = register_buffer("running_mean", given(running_mean_, torch::zeros({num_features})));
  running_var = register_buffer("running_var", given(running_var_, torch::ones({num_features})));
  num_batches_tracked =
      register_buffer("num_batches_tracked", given(num_batches_tracked_, torch::zeros({}, torch::kLong)));
}

torch::Tensor SyncBatchNormImpl::forward(const torch::Tensor& x) {
  if (x.dim() < 2 || x.size(1) != num_features)
    throw Error("SyncBatchNorm: expected input [N, " + std::to_string(num_features) + ", ...], got " + c10::str(x.sizes()));
  if (!is_training() || !comm_ || comm_->world_size() == 1)
    return torch::batch_norm(x, weight, bias, running_mean, running_var, is_training(), momentum, eps,
                             /*cudnn_enabled=*/true);
  {
    torch::NoGradGuard no_grad;
    num_batches_tracked.add_(1);
  }
  return SyncBatchNormFunction::apply(x, weight, bias, running_mean, running_var, eps, momentum, comm_.get());
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
        if (auto sync = std::dynamic_pointer_cast<SyncBatchNormImpl>(module)) sync->set_communicator(comm);
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

}  // namespace fastcpp::distributed
