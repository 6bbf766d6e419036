#include "parallel/data_parallel.h"

#include <ATen/ThreadLocalState.h>
#include <ATen/autocast_mode.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/StreamGuard.h>
#include <torch/torch.h>

#include <algorithm>
#include <map>
#if FASTCPP_HAS_CUDA
#include <torch/csrc/cuda/comm.h>
#endif

#include "core/device.h"
#include "core/error.h"
#include "parallel/replica_grads.h"
#include "parallel/replica_streams.h"
#include "distributed/sync_batchnorm.h"
#include "learner/learner.h"

namespace fastcpp::distributed {
namespace {

std::vector<torch::Device> every_cuda_device() {
  std::vector<torch::Device> devices;
  for (c10::DeviceIndex i = 0; i < torch::cuda::device_count(); ++i) devices.emplace_back(torch::kCUDA, i);
  return devices;
}

// A replica's parameters and buffers, one list per dtype (the foreach kernels' fast
// path wants one dtype per list), in the same order for every copy of the model.
std::vector<std::vector<torch::Tensor>> tensors_by_dtype(const torch::nn::Module& module) {
  std::map<c10::ScalarType, std::vector<torch::Tensor>> by_dtype;
  for (const auto& tensor : module.parameters()) by_dtype[tensor.scalar_type()].push_back(tensor);
  for (const auto& tensor : module.buffers()) by_dtype[tensor.scalar_type()].push_back(tensor);
  std::vector<std::vector<torch::Tensor>> lists;
  for (auto& [dtype, list] : by_dtype) lists.push_back(std::move(list));
  return lists;
}

// to = from, list by list: one multi-tensor copy kernel per dtype.
void copy_lists(const std::vector<std::vector<torch::Tensor>>& to, const std::vector<std::vector<torch::Tensor>>& from) {
  for (size_t k = 0; k < to.size(); ++k) at::_foreach_copy_(to[k], from[k], /*non_blocking=*/true);
}

// Every module of a replica in the train or eval mode of its twin in the model (BnFreeze
// keeps frozen BatchNorm layers in eval mode while the rest trains), as PyTorch's
// replicate copies each module's `training`. The two trees match one to one (swapped
// BatchNorm layers are leaves), so their pre-order lists pair the modules up. train()
// reaches a module's children too, so the modes are read first (replica 0 shares the
// model's other layers: setting its root sets theirs) and set parents first, each child
// then correcting what its parent set.
void follow_modes(const std::vector<std::shared_ptr<torch::nn::Module>>& from,
                  const std::vector<std::shared_ptr<torch::nn::Module>>& to) {
  bool same = true;
  for (size_t i = 0; i < from.size() && same; ++i) same = from[i]->is_training() == to[i]->is_training();
  if (same) return;
  std::vector<bool> training;
  for (const auto& module : from) training.push_back(module->is_training());
  for (size_t i = 0; i < to.size(); ++i) to[i]->train(training[i]);
}

}  // namespace

DataParallel::DataParallel(std::vector<torch::Device> devices, bool sync_bn)
    : asked_(std::move(devices)), sync_bn_(sync_bn) {
  order = 12;
}

void DataParallel::before_fit() {
  auto& l = learn();
  restore();  // a fit whose after_fit_failed itself failed may have left its replicas
  devices_ = asked_.empty() ? every_cuda_device() : asked_;
  for (auto& device : devices_) device = check_device(device, "to_parallel");
  if (devices_.size() < 2) {
    l.logger(devices_.empty() ? "to_parallel: no CUDA device, training on " + l.device.str() + " as usual"
                              : "to_parallel: one device (" + devices_[0].str() + "), training as usual");
    if (devices_.size() == 1 && devices_[0] != l.device) l.to(devices_[0]);
    return;
  }
  if (devices_[0] != l.device) l.to(devices_[0]);
  make_replicas();
}

void DataParallel::make_replicas() {
  auto& l = learn();
  plain_ = l.model;
  Model first = l.model;
  if (sync_bn_) {
    check_batchnorms_convertible(l.model.module(), "to_parallel", "replica");
    if (auto root = std::dynamic_pointer_cast<torch::nn::SequentialImpl>(l.model.ptr()))
      first = Model(convert_sync_batchnorm(torch::nn::Sequential(root), nullptr));  // shares the model's tensors
  }
  replicas_ = {first};
  for (size_t r = 1; r < devices_.size(); ++r) {
    try {
      replicas_.push_back(first.replicate(devices_[r]));
    } catch (const Error& e) {
      restore();
      throw Error(std::string("to_parallel: ") + e.what());
    }
  }
  params_.clear();
  state_.clear();
  plain_modules_ = plain_->module().modules();  // listed once a fit, not at every forward
  replica_modules_.clear();
  std::vector<std::shared_ptr<torch::nn::Module>> modules;
  for (auto& replica : replicas_) {
    params_.push_back(replica.module().parameters());
    state_.push_back(tensors_by_dtype(replica.module()));
    modules.push_back(replica.ptr());
    replica_modules_.push_back(replica.module().modules());
  }
  for (const auto& list : replica_modules_)
    if (list.size() != plain_modules_.size()) {
      const auto sizes = std::to_string(list.size()) + " modules, the model " + std::to_string(plain_modules_.size());
      restore();
      throw Error("to_parallel: a replica has " + sizes);
    }
  follow_trainable();
  if (sync_bn_) group_.connect(modules);
  streams_ = side_streams(devices_);
  if (!workers_ || workers_->size() != replicas_.size() - 1) workers_ = std::make_unique<ReplicaWorkers>(replicas_.size() - 1);
  l.model = Model(plain_->ptr(), [this](const torch::Tensor& x) { return forward(x); });
}

// The replicas train what replica 0 trains, also after a parameter was frozen or unfrozen
// between batches (gradual unfreezing): an unfrozen one would otherwise get the gradient of
// replica 0's share of the batch alone.
void DataParallel::follow_trainable() {
  for (size_t r = 1; r < params_.size(); ++r)
    for (size_t i = 0; i < params_[0].size(); ++i)
      if (params_[r][i].requires_grad() != params_[0][i].requires_grad())
        params_[r][i].set_requires_grad(params_[0][i].requires_grad());
}

void DataParallel::copy_to_replicas() {
  torch::NoGradGuard no_grad;
  // Replicas on replica 0's device: a few multi-tensor copies. Other GPUs: one coalesced
  // broadcast (a few flat transfers) to each, then the same. Every replica, also those a
  // short batch leaves idle: the broadcast's NCCL communicators are made per list of
  // GPUs, and a shorter list would make (and keep) a new one mid-epoch.
  std::vector<int> elsewhere;
  for (int r = 1; r < static_cast<int>(replicas_.size()); ++r) {
    if (devices_[static_cast<size_t>(r)] == devices_[0]) copy_lists(state_[static_cast<size_t>(r)], state_[0]);
    else elsewhere.push_back(r);
  }
  if (elsewhere.empty()) return;
  std::vector<int64_t> targets{devices_[0].index()};  // the GPUs, replica 0's first
  for (int r : elsewhere)
    if (std::find(targets.begin(), targets.end(), devices_[static_cast<size_t>(r)].index()) == targets.end())
      targets.push_back(devices_[static_cast<size_t>(r)].index());
  std::vector<torch::Tensor> source;
  for (const auto& list : state_[0]) source.insert(source.end(), list.begin(), list.end());
#if FASTCPP_HAS_CUDA
  const auto copies = torch::cuda::broadcast_coalesced(source, targets, /*buffer_size=*/10 * 1024 * 1024);
#else
  const std::vector<std::vector<torch::Tensor>> copies(targets.size(), source);  // without CUDA all are the CPU
#endif
  for (int r : elsewhere) {
    const auto at = std::find(targets.begin(), targets.end(), devices_[static_cast<size_t>(r)].index()) - targets.begin();
    // The broadcast's flat list cut back into the per-dtype lists.
    std::vector<std::vector<torch::Tensor>> received;
    auto next = copies[static_cast<size_t>(at)].begin();
    for (const auto& list : state_[0]) {
      received.emplace_back(next, next + static_cast<std::ptrdiff_t>(list.size()));
      next += static_cast<std::ptrdiff_t>(list.size());
    }
    copy_lists(state_[static_cast<size_t>(r)], received);
  }
}

torch::Tensor DataParallel::forward(const torch::Tensor& x) {
  const int64_t n = x.size(0);
  const int replicas = static_cast<int>(std::clamp<int64_t>(n, 1, static_cast<int64_t>(replicas_.size())));
  last_replicas_ = replicas;
  // The Learner switches train/eval on its plain model, which the replicas' SyncBatchNorm
  // layers (and replicas 1.. entirely) are not part of.
  for (size_t r = 0; r < replicas_.size(); ++r)
    if (&replicas_[r].module() != &plain_->module()) follow_modes(plain_modules_, replica_modules_[r]);
  follow_trainable();
  copy_to_replicas();
  group_.start_step(replicas);
  // Replica r takes n / replicas items, one more for the first n % replicas. The slices
  // go to their devices from this thread, before any replica starts (as PyTorch's
  // DataParallel scatters first): a worker's own copy would queue on the source GPU's
  // stream behind replica 0's forward.
  std::vector<torch::Tensor> inputs(static_cast<size_t>(replicas));
  int64_t start = 0;
  for (int r = 0; r < replicas; ++r) {
    const int64_t size = n / replicas + (r < n % replicas ? 1 : 0);
    inputs[static_cast<size_t>(r)] = x.narrow(0, start, size).to(devices_[static_cast<size_t>(r)], /*non_blocking=*/true);
    start += size;
  }
  std::vector<torch::Tensor> outputs(static_cast<size_t>(replicas));
  // Replica r > 0 starts after the caller's work on its device (the parameter copies,
  // its input) and marks where its output is ready, on its stream.
  std::vector<std::optional<StreamMark>> ready(static_cast<size_t>(replicas)), done(static_cast<size_t>(replicas));
  for (int r = 1; r < replicas; ++r) ready[static_cast<size_t>(r)].emplace(devices_[static_cast<size_t>(r)]);
  const at::ThreadLocalState caller_state;  // grad mode, autocast: thread-local, so handed to each worker
  workers_->run(replicas, [&](int r) {
    const auto k = static_cast<size_t>(r);
    try {
      at::ThreadLocalStateGuard state(caller_state);
      const auto& device = devices_[k];
      c10::DeviceGuard on_device(device);
      std::optional<c10::StreamGuard> on_stream;
      if (streams_[k]) on_stream.emplace(*streams_[k]);
      if (ready[k]) ready[k]->wait();
      if (r > 0) keep_for_current_stream(inputs[k]);  // made on the caller's stream, read on this replica's
      outputs[k] = replicas_[k](inputs[k]);
      if (r > 0) {
        done[k].emplace(device);
        // autocast's casts of the weights are valid for this forward only; the caller's
        // thread drops its own when it leaves autocast, a worker must drop them here.
        at::autocast::clear_cache();
      }
    } catch (...) {
      group_.abort();
      throw;
    }
  });
  for (int r = 1; r < replicas; ++r) {
    done[static_cast<size_t>(r)]->wait();
    keep_for_current_stream(outputs[static_cast<size_t>(r)]);
  }
  if (replicas == 1) return outputs[0];
  for (auto& output : outputs) output = output.to(devices_[0], /*non_blocking=*/true);
  return torch::cat(outputs);
}

void DataParallel::after_backward() {
  if (replicas_.size() > 1) reduce_into_first(params_, last_replicas_, nccl_reduces(devices_));
}

void DataParallel::after_fit() { restore(); }

void DataParallel::restore() {
  group_.disconnect();
  if (plain_) learn().model = *plain_;
  plain_.reset();
  replicas_.clear();
  params_.clear();
  state_.clear();
  plain_modules_.clear();
  replica_modules_.clear();
  streams_.clear();
}

}  // namespace fastcpp::distributed

namespace fastcpp {

void Learner::to_parallel(std::vector<torch::Device> devices, bool sync_bn) {
  if (auto other = get_cb<DevicePlacement>(); other && !std::dynamic_pointer_cast<distributed::DataParallel>(other))
    throw Error("to_parallel: this Learner is already " + other->method() + "; pick one (to_parallel: one process "
                "driving several devices; to_distributed: one process per device)");
  for (const auto& device : devices)
    if (device.type() != devices.front().type())
      throw Error("to_parallel: " + devices.front().str() + " and " + device.str() + " are different kinds of "
                  "device; the replicas run on one kind (CUDA GPUs, or the CPU)");
  if (auto existing = get_cb<distributed::DataParallel>()) remove_cb(existing);
  add_cb(std::make_shared<distributed::DataParallel>(std::move(devices), sync_bn));
}

}  // namespace fastcpp
