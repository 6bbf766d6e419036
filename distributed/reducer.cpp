#include "distributed/reducer.h"

#include <torch/csrc/autograd/functions/accumulate_grad.h>
#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <torch/torch.h>

#include <algorithm>
#include <utility>

#include "distributed/process_group.h"
#include "optim/param_groups.h"
#include "core/device.h"
#include "core/error.h"

namespace fastcpp::distributed {

namespace {

// A param's gradient inside `flat` from `offset`, laid out as the param: the layout
// autograd gives its gradients, which accumulation then keeps.
torch::Tensor gradient_view(const torch::Tensor& flat, int64_t offset, const torch::Tensor& param) {
  auto slot = flat.narrow(0, offset, param.numel());
  return param.is_non_overlapping_and_dense() ? slot.as_strided(param.sizes(), param.strides())
                                              : slot.view(param.sizes());
}

// Where a slot of `param`'s dtype may start: at 16 bytes, so that vectorized kernels (the
// optimizer's, the averaging) read every gradient in wide loads.
int64_t slot_start(int64_t offset, const torch::Tensor& param) {
  const int64_t align = std::max<int64_t>(1, 16 / static_cast<int64_t>(param.element_size()));
  return (offset + align - 1) / align * align;
}

bool same_tensor(const torch::Tensor& a, const torch::Tensor& b) {
  return a.unsafeGetTensorImpl() == b.unsafeGetTensorImpl();
}

}  // namespace

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
    : params_(unique_parameters(std::move(params))),
      comm_(std::move(comm)),
      options_(options),
      alive_(std::make_shared<bool>(true)) {
  bucket_of_.resize(params_.size());
  views_.resize(params_.size());
  ready_.assign(params_.size(), false);
  carried_.assign(params_.size(), false);
  filled_.assign(params_.size(), 0);
  std::vector<size_t> reverse;
  for (size_t k = params_.size(); k-- > 0;) reverse.push_back(k);
  build_buckets(reverse);

  // A hook after each parameter's gradient accumulation.
  for (size_t k = 0; k < params_.size(); ++k) {
    auto accumulator = torch::autograd::impl::grad_accumulator(params_[k]);
    if (!accumulator) throw Error("Reducer: parameter " + std::to_string(k) + " does not require grad");
    std::weak_ptr<bool> alive = alive_;
    hook_keys_.push_back(accumulator->add_post_hook(std::make_unique<torch::autograd::utils::LambdaPostHook>(
        [this, k, alive](const torch::autograd::variable_list& outputs, const torch::autograd::variable_list&) {
          if (alive.lock()) on_grad_ready(k);
          return outputs;
        })));
    accumulators_.push_back(std::move(accumulator));
  }
}

// Fills buckets in `order`; a new one when the current one is full or the dtype or device
// changes. The gradients keep pointing at the old buckets until prepare() or the hooks
// move them over (the optimizer may still read them).
void Reducer::build_buckets(const std::vector<size_t>& order) {
  buckets_.clear();
  size_t limit = options_.first_bucket_bytes, bytes = 0;
  std::vector<int64_t> numels;  // per bucket
  for (size_t k : order) {
    const auto& param = params_[k];
    const auto* current = buckets_.empty() ? nullptr : buckets_.back().get();
    if (!current || bytes >= limit || params_[current->params.front()].scalar_type() != param.scalar_type() ||
        params_[current->params.front()].device() != param.device()) {
      if (current) limit = options_.bucket_bytes;
      buckets_.push_back(std::make_unique<Bucket>());
      numels.push_back(0);
      bytes = 0;
    }
    buckets_.back()->params.push_back(k);
    bucket_of_[k] = buckets_.size() - 1;
    numels.back() = slot_start(numels.back(), param) + param.numel();
    bytes += static_cast<size_t>(param.numel()) * param.element_size();
  }
  for (size_t b = 0; b < buckets_.size(); ++b) {
    auto& bucket = *buckets_[b];
    const auto& head = params_[bucket.params.front()];
    bucket.flags_at = numels[b];
    bucket.flat = torch::zeros({numels[b] + static_cast<int64_t>(bucket.params.size())}, head.options());
    bucket.pending = bucket.params.size();
    int64_t offset = 0;
    for (size_t k : bucket.params) {
      offset = slot_start(offset, params_[k]);
      views_[k] = gradient_view(bucket.flat, offset, params_[k]);
      filled_[k] = 0;
      offset += params_[k].numel();
    }
  }
  order_ = order;
}

std::vector<std::vector<size_t>> Reducer::bucket_params() const {
  std::vector<std::vector<size_t>> params;
  for (const auto& bucket : buckets_) params.push_back(bucket->params);
  return params;
}

Reducer::~Reducer() {
  alive_.reset();
  // Off the accumulators, which outlive this Reducer with their parameters (a Reducer
  // rebuilt on each change of the trainable set would otherwise leave its hooks behind).
  for (size_t k = 0; k < accumulators_.size(); ++k) accumulators_[k]->del_post_hook(hook_keys_[k]);
}

void Reducer::prepare() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (size_t k = 0; k < params_.size(); ++k) {
    // Moved or cast since the buckets were made: its gradient could not accumulate in its slot.
    const auto &param = params_[k], &slot = views_[k];
    if (param.device() != slot.device() || param.scalar_type() != slot.scalar_type())
      throw Error("to_distributed: parameter " + std::to_string(k) + " is now " + c10::toString(param.scalar_type()) +
                  " on " + param.device().str() + ", but its gradient bucket holds " +
                  c10::toString(slot.scalar_type()) + " on " + slot.device().str() +
                  ": DDP's buckets are made when the fit starts; cast or move the model before fit, not during it");
  }
  for (auto& bucket : buckets_) {
    bool all_dropped = true;
    for (size_t k : bucket->params) all_dropped = all_dropped && !params_[k].grad().defined();
    if (all_dropped) bucket->flat.zero_();  // the usual case after zero_grad: one kernel a bucket
    for (size_t k : bucket->params) {
      carried_[k] = carries_gradient(k);
      if (all_dropped) {
        params_[k].mutable_grad() = views_[k];
        filled_[k] = 0;
      } else {
        take_in(k);  // accumulating in its slot already, or copied in
      }
    }
  }
  prepared_ = true;
}

// The param's gradient in its slot: there already, unless other code replaced it or
// backward ran without prepare(); then it is copied in and .grad points at the slot.
void Reducer::take_in(size_t k) {
  auto& grad = params_[k].mutable_grad();
  if (same_tensor(grad, views_[k])) return;
  if (grad.defined()) views_[k].copy_(grad);
  else views_[k].zero_();
  filled_[k] = grad.defined();
  grad = views_[k];
}

// Whether the param brings a gradient into this backward: one other code set, or its slot
// filled by earlier backward passes (under no_sync); not the zeros prepare() left in the
// slot of a param no backward reached since, which one process would not have at all.
bool Reducer::carries_gradient(size_t k) const {
  const auto& grad = params_[k].grad();
  if (!grad.defined()) return false;
  return !same_tensor(grad, views_[k]) || filled_[k];
}

void Reducer::on_grad_ready(size_t k) {
  if (!sync_) {
    filled_[k] = 1;
    return;
  }
  std::lock_guard<std::mutex> lock(mutex_);
  if (ready_[k]) return;
  ready_[k] = true;
  arrivals_.push_back(k);
  take_in(k);
  filled_[k] = 1;
  --buckets_[bucket_of_[k]]->pending;
  launch_ready();
}

void Reducer::launch(Bucket& bucket) {
  std::vector<float> used;
  for (size_t k : bucket.params) used.push_back(ready_[k] || carried_[k] ? 1.0f : 0.0f);
  auto flags = bucket.flat.narrow(0, bucket.flags_at, static_cast<int64_t>(used.size()));
  if (std::find(used.begin(), used.end(), 0.0f) == used.end()) flags.fill_(1);  // the usual case: one kernel
  else flags.copy_(to_device_async(torch::tensor(used), flags.device()));
  launching_.push_back(arrivals_.size());
  // Averaged as it is summed, as PyTorch's DDP does: the sum of half-precision gradients
  // can overflow where their average does not.
  const int world = comm_->world_size();
  if (world > 1) bucket.flat.narrow(0, 0, bucket.flags_at).div_(world);
  bucket.work = comm_->all_reduce_async(bucket.flat);
}

void Reducer::launch_ready() {
  while (next_to_launch_ < buckets_.size() && buckets_[next_to_launch_]->pending == 0)
    launch(*buckets_[next_to_launch_++]);
}

void Reducer::finalize() {
  if (!sync_) return;
  std::lock_guard<std::mutex> lock(mutex_);
  // Parameters without a gradient this step: the one they carried, or zeros.
  for (size_t k = 0; k < params_.size(); ++k) {
    if (ready_[k]) continue;
    if (!prepared_) carried_[k] = carries_gradient(k);
    take_in(k);
    --buckets_[bucket_of_[k]]->pending;
  }
  launch_ready();
  for (auto& bucket : buckets_) {
    comm_->wait(bucket->work, "gradient all-reduce");
    torch::Tensor used_anywhere;  // read back only for a param unused here (as DDP's unused map)
    for (size_t i = 0; i < bucket->params.size(); ++i) {
      const size_t k = bucket->params[i];
      if (ready_[k] || carried_[k]) continue;
      if (!used_anywhere.defined())
        used_anywhere = bucket->flat.narrow(0, bucket->flags_at, static_cast<int64_t>(bucket->params.size()))
                            .to(torch::kCPU, torch::kFloat)
                            .gt(0);
      // No rank used it: no gradient, as in one process (a zero one would still get
      // weight decay and momentum).
      if (!used_anywhere[static_cast<int64_t>(i)].item<bool>()) params_[k].mutable_grad() = torch::Tensor();
    }
    for (size_t k : bucket->params) filled_[k] = params_[k].grad().defined();  // the averages, in the slots
    bucket->pending = bucket->params.size();
    bucket->work.reset();
  }
  launch_points_ = std::exchange(launching_, {});
  if (reductions_ == 0) follow_first_backward();
  ready_.assign(params_.size(), false);
  arrivals_.clear();
  next_to_launch_ = 0;
  prepared_ = false;
  ++reductions_;
}

// The buckets rebuilt in the order the first backward produced the gradients (those that
// did not come last, in reverse parameter order), as rank 0 saw it: every rank must fill
// the same buckets in the same order.
void Reducer::follow_first_backward() {
  if (params_.empty()) return;
  std::vector<int64_t> order(arrivals_.begin(), arrivals_.end());
  std::vector<bool> arrived(params_.size(), false);
  for (size_t k : arrivals_) arrived[k] = true;
  for (size_t k = params_.size(); k-- > 0;)
    if (!arrived[k]) order.push_back(static_cast<int64_t>(k));
  auto shared = to_device_async(torch::tensor(order, torch::kLong), params_.front().device());
  comm_->broadcast(shared, 0);
  shared = shared.cpu();
  const std::vector<size_t> rank0_order(shared.data_ptr<int64_t>(), shared.data_ptr<int64_t>() + shared.numel());
  if (rank0_order != order_) build_buckets(rank0_order);
}

// One all-reduce per leaving param: they are few, and leave rarely.
void Reducer::hand_over(const std::vector<size_t>& leaving) {
  torch::NoGradGuard no_grad;
  // A slot with prepare()'s zeros alone is no gradient: the next Reducer would take it for one.
  for (size_t k = 0; k < params_.size(); ++k)
    if (params_[k].grad().defined() && !carries_gradient(k))
      params_[k].mutable_grad().reset();
  for (size_t k : leaving) {
    const auto& param = params_[k];
    auto& grad = param.mutable_grad();
    // The gradient flattened, then a flag: 1 where this rank carries one.
    auto flat = torch::zeros({param.numel() + 1}, param.options());
    if (carries_gradient(k)) {
      flat.narrow(0, 0, param.numel()).copy_(grad.reshape(-1)).div_(comm_->world_size());
      flat.narrow(0, param.numel(), 1).fill_(1);
    }
    comm_->all_reduce_sum(flat);
    if (flat[param.numel()].item<double>() == 0) {  // no rank had one
      grad = torch::Tensor();
      continue;
    }
    grad = torch::empty_like(param);  // laid out as the param, as autograd would
    grad.copy_(flat.narrow(0, 0, param.numel()).view(param.sizes()));
  }
}

}  // namespace fastcpp::distributed
