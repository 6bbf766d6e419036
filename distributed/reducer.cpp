#include "distributed/reducer.h"

#include <torch/csrc/autograd/functions/accumulate_grad.h>
#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <torch/torch.h>

#include <algorithm>

#include "distributed/process_group.h"
#include "core/device.h"
#include "core/error.h"

namespace fastcpp::distributed {

// flat: the params' gradients, then one flag per param (1 where this rank has a gradient
// for it), reduced together: after the sum a flag of 0 marks a param no rank used.
struct Reducer::Bucket {
  std::vector<size_t> params;
  torch::Tensor flat;
  int64_t flags_at = 0;
  size_t pending = 0;
  c10::intrusive_ptr<c10d::Work> work;
};

Reducer::Reducer(std::vector<torch::Tensor> params, std::shared_ptr<Communicator> comm, ReducerOptions options)
    : params_(std::move(params)), comm_(std::move(comm)), alive_(std::make_shared<bool>(true)) {
  bucket_of_.resize(params_.size());
  offset_of_.resize(params_.size());
  ready_.assign(params_.size(), false);
  // Reverse order; a new bucket when the current one is full or the dtype/device changes.
  for (size_t k = params_.size(); k-- > 0;) {
    const auto& param = params_[k];
    auto* current = buckets_.empty() ? nullptr : buckets_.back().get();
    const size_t bytes = current ? static_cast<size_t>(current->flat.numel()) * current->flat.element_size() : 0;
    if (!current || bytes >= options.bucket_bytes || current->flat.scalar_type() != param.scalar_type() ||
        current->flat.device() != param.device()) {
      buckets_.push_back(std::make_unique<Bucket>());
      current = buckets_.back().get();
      current->flat = torch::empty({0}, param.options());
    }
    bucket_of_[k] = buckets_.size() - 1;
    offset_of_[k] = static_cast<size_t>(current->flat.numel());
    current->params.push_back(k);
    current->flat = torch::empty({current->flat.numel() + param.numel()}, param.options());
  }
  for (auto& bucket : buckets_) {
    bucket->flags_at = bucket->flat.numel();
    bucket->flat = torch::empty({bucket->flags_at + static_cast<int64_t>(bucket->params.size())}, bucket->flat.options());
    bucket->pending = bucket->params.size();
  }

  // Every rank starts from rank 0's weights.
  for (auto& param : params_) {
    torch::NoGradGuard no_grad;
    auto data = param.detach();
    comm_->broadcast(data, 0);
  }
  // A hook after each parameter's gradient accumulation.
  for (size_t k = 0; k < params_.size(); ++k) {
    auto accumulator = torch::autograd::impl::grad_accumulator(params_[k]);
    if (!accumulator) throw Error("Reducer: parameter " + std::to_string(k) + " does not require grad");
    std::weak_ptr<bool> alive = alive_;
    accumulator->add_post_hook(std::make_unique<torch::autograd::utils::LambdaPostHook>(
        [this, k, alive](const torch::autograd::variable_list& outputs, const torch::autograd::variable_list&) {
          if (alive.lock()) on_grad_ready(k);
          return outputs;
        }));
    accumulators_.push_back(std::move(accumulator));
  }
}

Reducer::~Reducer() { alive_.reset(); }

void Reducer::on_grad_ready(size_t k) {
  if (!sync_) return;
  std::lock_guard<std::mutex> lock(mutex_);
  if (ready_[k]) return;
  ready_[k] = true;
  auto& bucket = *buckets_[bucket_of_[k]];
  const auto& grad = params_[k].grad();
  auto slot = bucket.flat.narrow(0, static_cast<int64_t>(offset_of_[k]), params_[k].numel());
  if (grad.defined()) slot.copy_(grad.reshape(-1));
  else slot.zero_();
  --bucket.pending;
  launch_ready();
}

void Reducer::launch(Bucket& bucket) {
  std::vector<float> used;
  for (size_t k : bucket.params) used.push_back(ready_[k] || params_[k].grad().defined() ? 1.0f : 0.0f);
  auto flags = bucket.flat.narrow(0, bucket.flags_at, static_cast<int64_t>(used.size()));
  if (std::find(used.begin(), used.end(), 0.0f) == used.end()) flags.fill_(1);  // the usual case: one kernel
  else flags.copy_(to_device_async(torch::tensor(used), flags.device()));
  bucket.work = comm_->all_reduce_async(bucket.flat);
}

void Reducer::launch_ready() {
  while (next_to_launch_ < buckets_.size() && buckets_[next_to_launch_]->pending == 0)
    launch(*buckets_[next_to_launch_++]);
}

void Reducer::finalize() {
  if (!sync_) return;
  std::lock_guard<std::mutex> lock(mutex_);
  // Parameters without a gradient this step: their current .grad, or zeros.
  for (size_t k = 0; k < params_.size(); ++k) {
    if (ready_[k]) continue;
    auto& bucket = *buckets_[bucket_of_[k]];
    auto slot = bucket.flat.narrow(0, static_cast<int64_t>(offset_of_[k]), params_[k].numel());
    const auto& grad = params_[k].grad();
    if (grad.defined()) slot.copy_(grad.reshape(-1));
    else slot.zero_();
    --bucket.pending;
  }
  launch_ready();
  const double world = comm_->world_size();
  for (auto& bucket : buckets_) {
    comm_->wait(bucket->work, "gradient all-reduce");
    bucket->flat.div_(world);
    torch::Tensor used_anywhere;  // read back only for a param unused here (as DDP's unused map)
    for (size_t i = 0; i < bucket->params.size(); ++i) {
      const size_t k = bucket->params[i];
      auto& grad = params_[k].mutable_grad();
      if (!grad.defined() && !ready_[k]) {
        if (!used_anywhere.defined())
          used_anywhere = bucket->flat.narrow(0, bucket->flags_at, static_cast<int64_t>(bucket->params.size()))
                              .to(torch::kCPU, torch::kFloat)
                              .gt(0);
        // No rank used it: no gradient, as in one process (a zero one would still get
        // weight decay and momentum).
        if (!used_anywhere[static_cast<int64_t>(i)].item<bool>()) continue;
      }
      auto average = bucket->flat.narrow(0, static_cast<int64_t>(offset_of_[k]), params_[k].numel()).view_as(params_[k]);
      if (grad.defined()) grad.copy_(average);
      else grad = average.clone();
    }
    bucket->pending = bucket->params.size();
    bucket->work.reset();
  }
  ready_.assign(params_.size(), false);
  next_to_launch_ = 0;
  ++reductions_;
}

}  // namespace fastcpp::distributed
