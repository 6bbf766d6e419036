#include "distributed/distributed_trainer.h"

#include <torch/torch.h>

#include <algorithm>

#include "callbacks/training.h"
#include "data/sampler.h"
#include "distributed/sync_batchnorm.h"
#include "distributed/validation_gather.h"
#include "core/device.h"
#include "core/error.h"
#include "learner/learner.h"
#include "optim/param_groups.h"

namespace fastcpp::distributed {

DistributedTrainer::DistributedTrainer(DistributedOptions options) : options_(std::move(options)) { order = 11; }

void DistributedTrainer::before_fit() {
  auto& l = learn();
  env_ = read_env();
  if (!env_.is_distributed()) {
    if (!single_process_noted_) l.logger("to_distributed: no launcher variables (RANK, WORLD_SIZE): one process, training as usual");
    single_process_noted_ = true;
    return;
  }
  if (const auto on = devices_of(l.model.module()); on.size() > 1)
    throw Error("to_distributed: the model is on " + devices_text(on) + " (split across devices); its gradients are "
                "reduced on one device a process: put each process's model on one, or train the pipeline in one process");
  move_to_rank_device();
  auto group_options = options_.process_group;
  group_options.device = l.device;
  comm_ = process_communicator(env_, group_options);  // the process's one group, NCCL added if needed
  if (reducer_) throw Error("to_distributed: a fit inside a fit (its loaders are shared out already)");
  // Before anything changes: a refusal leaves the Learner as it was (after_fit has nothing to undo).
  whole_samplers_ = {l.dls.train.sampler_ptr(), l.dls.valid.sampler_ptr()};
  check_same_data(l.epochs_before);
  if (options_.sync_bn) synchronize_batchnorm();
  params_ = unique_parameters(l.model.module().parameters());  // tied weights once
  broadcast_state();
  trainable_.clear();
  earlier_reductions_ = reductions_ = 0;
  make_reducer();

  // Each rank takes its share of the loaders' samplers (a WeightedSampler stays one, a set one too).
  for (auto* loader : {&l.dls.train, &l.dls.valid})
    loader->set_sampler(std::make_shared<DistributedSampler>(loader->sampler_ptr(), env_.rank, env_.world_size));
  l.rank = env_.rank;
  l.barrier = [comm = comm_, device = l.device](bool ok) {
    comm->barrier();  // the long wait (a checkpoint being written), under the barrier's own timeout
    // Then everybody is there: the outcomes summed at once (a CUDA group's through NCCL).
    auto failed = torch::full({1}, ok ? 0 : 1, torch::kInt64);
    if (comm->backend() == "nccl") failed = failed.to(device);
    comm->all_reduce_sum(failed);
    return failed.item<int64_t>() == 0;
  };
  l.from_rank_0 = [comm = comm_, device = l.device](int64_t value) {
    auto shared = torch::full({1}, value, torch::kInt64);
    if (comm->backend() == "nccl") shared = shared.to(device);
    comm->broadcast(shared, 0);
    return shared.item<int64_t>();
  };
  was_logging_ = l.logging;
  if (env_.rank != 0) l.logging = false;
}

void DistributedTrainer::check_same_data(int64_t epoch) const {
  // Each rank shares out its own epoch: one that differs (another seed, other files) would
  // serve items twice and others never, or hang a rank with more batches in a collective.
  const auto fingerprint = [epoch](const Sampler& sampler) {
    uint64_t hash = 14695981039346656037ull;  // FNV-1a over the indices
    for (const int64_t index : sampler.indices(epoch)) hash = (hash ^ static_cast<uint64_t>(index)) * 1099511628211ull;
    return static_cast<int64_t>(hash);
  };
  const auto mine = torch::tensor({static_cast<int64_t>(whole_samplers_[0]->size()), fingerprint(*whole_samplers_[0]),
                                   static_cast<int64_t>(whole_samplers_[1]->size()), fingerprint(*whole_samplers_[1])});
  // [world, 4], the same on every rank: all of them throw or none. A CUDA group's through NCCL (a build may lack Gloo).
  const auto all = comm_->all_gather(comm_->backend() == "nccl" ? mine.to(learn().device) : mine).cpu();
  for (int r = 1; r < env_.world_size; ++r)
    for (int loader = 0; loader < 2; ++loader) {
      const auto at = [&](int rank, int k) { return all[rank][2 * loader + k].item<int64_t>(); };
      if (at(r, 0) == at(0, 0) && at(r, 1) == at(0, 1)) continue;
      const std::string name = loader ? "validation" : "training";
      throw Error("to_distributed: rank " + std::to_string(r) + "'s " + name + " loader serves " +
                  (at(r, 0) == at(0, 0) ? "its " + std::to_string(at(r, 0)) + " items in another order than rank 0's"
                                        : std::to_string(at(r, 0)) + " items where rank 0's serves " +
                                              std::to_string(at(0, 0))) +
                  ": every rank needs the same data and the same seed (the ranks share out one epoch)");
    }
}

void DistributedTrainer::make_reducer() {
  std::vector<torch::Tensor> trainable;
  std::vector<size_t> leaving;  // by index into the current Reducer's parameters
  for (size_t k = 0, reduced = 0; k < params_.size(); ++k) {
    const bool was = k < trainable_.size() && trainable_[k], is = params_[k].requires_grad();
    if (was && !is) leaving.push_back(reduced);
    if (is) trainable.push_back(params_[k]);
    reduced += was;
  }
  if (reducer_) reducer_->hand_over(leaving);
  reducer_.reset();  // its hooks off before the new one's go on
  reducer_ = std::make_unique<Reducer>(trainable, comm_, options_.reducer);
  trainable_.clear();
  for (const auto& param : params_) trainable_.push_back(param.requires_grad());
}

bool DistributedTrainer::trainable_changed() const {
  for (size_t k = 0; k < params_.size(); ++k)
    if (params_[k].requires_grad() != trainable_[k]) return true;
  return false;
}

void DistributedTrainer::move_to_rank_device() {
  auto& l = learn();
  if (!l.device.is_cuda()) return;
  const auto device = check_device(
      options_.device.value_or(local_rank_gpu(env_.local_rank)),
      "to_distributed (rank " + std::to_string(env_.rank) + ", LOCAL_RANK " + std::to_string(env_.local_rank) + ")");
  if (device != l.device) l.to(device);
}

// Every rank starts from rank 0's weights, frozen ones too, and running statistics.
void DistributedTrainer::broadcast_state() {
  torch::NoGradGuard no_grad;
  for (const auto& param : params_) {
    auto data = param.detach();
    comm_->broadcast(data, 0);
  }
  broadcast_buffers();
}

void DistributedTrainer::broadcast_buffers() {
  for (auto& buffer : learn().model.module().buffers()) {
    auto data = buffer.detach();
    comm_->broadcast(data, 0);
  }
}

void DistributedTrainer::before_validate() {
  // Without sync_bn each rank's BatchNorm statistics follow its own batches. Every rank
  // validates its share of the set, and rank 0 saves the model: all of them use rank 0's
  // statistics, as PyTorch's DDP (broadcast_buffers) does.
  if (reducer_ && !options_.sync_bn) broadcast_buffers();
}

void DistributedTrainer::synchronize_batchnorm() {
  auto& l = learn();
  check_batchnorms_convertible(l.model.module(), "to_distributed", "rank");
  auto root = std::dynamic_pointer_cast<torch::nn::SequentialImpl>(l.model.ptr());
  if (root) {
    l.model = Model(convert_sync_batchnorm(torch::nn::Sequential(root), comm_));
    return;
  }
  for (const auto& module : l.model.module().modules())
    if (auto sync = std::dynamic_pointer_cast<SyncBatchNormImpl>(module)) sync->set_communicator(comm_);
}

void DistributedTrainer::after_loss() {
  if (!reducer_) return;
  auto& l = learn();
  if (!l.training) return gather_validation_batch();
  if (!l.loss.defined()) return;  // a batch without targets (every rank's: they share the data)
  auto loss = l.loss.detach().to(torch::kFloat).reshape({1}).clone();
  comm_->all_reduce_sum(loss);
  l.loss = (loss / env_.world_size).reshape({});
}

void DistributedTrainer::gather_validation_batch() {
  auto& l = learn();
  // The loader being validated: the valid one, its in-order copy (get_preds) or a caller's.
  // One that is not shared out holds every item on every rank: nothing to gather.
  const auto* shard = l.dl ? dynamic_cast<const DistributedSampler*>(&l.dl->sampler()) : nullptr;
  if (!shard) return;
  if (shard->world_size() != env_.world_size)
    throw Error("to_distributed: the loader validated is shared out over " + std::to_string(shard->world_size()) +
                " processes, the run has " + std::to_string(env_.world_size));
  const int64_t n = static_cast<int64_t>(shard->base()->size());  // the epoch before padding
  const int64_t first = static_cast<int64_t>(l.iter) * l.dl->bs() * env_.world_size;
  // A test set's batches have no targets (on every rank: they share the data): predictions alone.
  const bool with_targets = l.yb.defined();
  const auto preds = gather_same_shape(*comm_, l.pred.detach());
  const auto targets = with_targets ? gather_padded(*comm_, l.yb) : torch::Tensor();
  // Gathered [world, batch, ...]: rank r's item j is padded position first + j*world + r, so
  // [batch, world] is the loader's order; positions >= n are padding.
  const int64_t keep = std::clamp<int64_t>(n - first, 0, preds.size(0) * preds.size(1));
  const auto in_order = [keep](const torch::Tensor& t) { return t.transpose(0, 1).flatten(0, 1).narrow(0, 0, keep); };
  l.pred = in_order(preds);
  if (!with_targets) return;
  l.yb = in_order(targets);
  l.loss = l.loss_func(l.pred, l.yb).detach();
}

void DistributedTrainer::before_backward() {
  if (!reducer_ || !learn().training) return;
  if (trainable_changed()) {
    earlier_reductions_ += reducer_->reductions();
    make_reducer();
    const auto training = std::count(trainable_.begin(), trainable_.end(), true);
    if (env_.rank == 0)
      learn().logger("to_distributed: " + std::to_string(training) + " of " + std::to_string(params_.size()) +
                     " parameters train now; the gradient buckets are rebuilt for them");
  }
  const auto accumulation = learn().get_cb<GradientAccumulation>();
  reducer_->set_sync(!accumulation || accumulation->will_step(learn().yb.size(0)));
  reducer_->prepare();
}

void DistributedTrainer::after_backward() {
  if (!reducer_ || !learn().training || !reducer_->sync()) return;
  reducer_->finalize();
  reductions_ = earlier_reductions_ + reducer_->reductions();
}

void DistributedTrainer::after_fit() {
  if (!reducer_) return;
  auto& l = learn();
  reducer_.reset();
  params_.clear();
  l.dls.train.set_sampler(whole_samplers_[0]);  // back to the loaders' samplers
  l.dls.valid.set_sampler(whole_samplers_[1]);
  l.rank = 0;
  l.barrier = nullptr;
  l.from_rank_0 = nullptr;
  l.logging = was_logging_;
}

}  // namespace fastcpp::distributed

namespace fastcpp {

void Learner::to_distributed() { to_distributed(distributed::DistributedOptions{}); }

void Learner::to_distributed(const distributed::DistributedOptions& options) {
  if (auto other = get_cb<DevicePlacement>(); other && !std::dynamic_pointer_cast<distributed::DistributedTrainer>(other))
    throw Error("to_distributed: this Learner is already " + other->method() + "; pick one (to_parallel: one process "
                "driving several devices; to_distributed: one process per device)");
  if (!get_cb<distributed::DistributedTrainer>()) add_cb(std::make_shared<distributed::DistributedTrainer>(options));
}

}  // namespace fastcpp
