#pragma once
// Learner: the training loop of fastai, driven by callbacks.
//
//   Learner learn(dls, model, CrossEntropyLoss(), {metrics::accuracy()});
//   learn.fit_one_cycle(5, 1e-2);
//
// The loop's state is public, as in fastai, so that callbacks can read and change
// it: xb, yb, pred, loss, loss_grad, epoch, n_epoch, iter, n_iter, train_iter,
// pct_train, training, opt, dl. See events.h for the order of events.
#include <torch/nn/module.h>
#include <torch/types.h>

#include <array>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "data/dataloader.h"
#include "callbacks/schedule.h"
#include "core/error.h"
#include "learner/callback.h"
#include "learner/checkpoint.h"
#include "learner/export.h"
#include "optim/grad_scaler.h"
#include "learner/loss.h"
#include "optim/lrs.h"
#include "learner/metrics.h"
#include "learner/model.h"
#include "optim/optimizer.h"
#include "optim/optimizers.h"

namespace fastcpp {

class Recorder;
namespace distributed {
struct DistributedOptions;
}

// Splits a model's parameters into groups (for discriminative lrs and freezing).
using Splitter = std::function<std::vector<std::vector<torch::Tensor>>(torch::nn::Module&)>;

struct LearnerOptions {
  OptFunc opt_func = adam();
  Lrs lr = 1e-3;                   // default lr of fit when none is given
  std::optional<double> wd;        // overrides the optimizer's default weight decay
  bool wd_bn_bias = false;         // weight decay on norm layers and biases too
  bool train_bn = true;            // norm layers stay trainable when frozen
  std::vector<CallbackPtr> cbs;    // added to the defaults
  std::optional<torch::Device> device;  // default: CUDA when available, else CPU
  Splitter splitter;               // default: one group with every parameter
  bool frozen = false;             // start with every group but the last frozen (as after freeze())
  bool progress = true;            // add a ProgressCallback
  ModelSpec model_spec;            // the model's architecture and options, for export_learner (vision_learner's)
};

struct FitOptions {
  std::optional<double> wd;
  std::vector<CallbackPtr> cbs;  // added for this fit only
  bool reset_opt = false;
  int start_epoch = 0;           // skip the epochs before it (resuming)
};

struct OneCycleOptions {
  double div = 25.0;
  double div_final = 1e5;
  double pct_start = 0.25;
  std::array<double, 3> moms{0.95, 0.85, 0.95};
  std::optional<double> wd;
  std::vector<CallbackPtr> cbs;
  bool reset_opt = false;
  int start_epoch = 0;
};

struct FlatCosOptions {
  double div_final = 1e5;
  double pct_start = 0.75;
  std::optional<double> wd;
  std::vector<CallbackPtr> cbs;
  bool reset_opt = false;
  int start_epoch = 0;
};

struct SgdrOptions {
  int cycle_mult = 2;  // each cycle this many times longer than the one before
  std::optional<double> wd;
  std::vector<CallbackPtr> cbs;
  bool reset_opt = false;
  int start_epoch = 0;
};

struct FineTuneOptions {
  double base_lr = 2e-3;
  int freeze_epochs = 1;
  double lr_mult = 100;
  double pct_start = 0.3;
  double div = 5.0;
  // Both fits' (fastai passes them on to fit_one_cycle):
  double div_final = 1e5;
  std::array<double, 3> moms{0.95, 0.85, 0.95};
  std::optional<double> wd;
  std::vector<CallbackPtr> cbs;
  bool reset_opt = false;  // a new optimizer (no moments) for each fit
  int start_epoch = 0;     // each fit skips its epochs before it, as fastai's
};

struct LrFindOptions {
  double start_lr = 1e-7;
  double end_lr = 10;
  int num_it = 100;
  bool stop_div = true;
  std::string plot = "lr_find.png";  // empty: no plot
};

struct LrFindResult {
  double valley = 0;   // the suggestion (fastai's default)
  double minimum = 0;  // lr at the loss minimum, divided by 10
  double steep = 0;    // lr where the loss falls fastest
  double slide = 0;    // the interval slide rule: where the loss's slope stops changing
  std::vector<double> lrs, losses;
};

struct TtaOptions {
  DataLoader* dl = nullptr;  // default: the valid loader
  int n = 4;                 // augmented passes
  double beta = 0.25;        // weight of the plain predictions: lerp(augmented mean, plain, beta)
  bool use_max = false;      // instead: the elementwise max over the plain and every augmented pass
};

struct Preds {
  torch::Tensor preds;    // activated (e.g. softmax) outputs
  torch::Tensor targets;
  torch::Tensor losses;   // each item's loss, with get_preds(dl, /*with_loss=*/true)
};

class Learner {
 public:
  Learner(DataLoaders dls, Model model, Loss loss_func, std::vector<MetricPtr> metrics = {},
          LearnerOptions options = {});
  Learner(const Learner&) = delete;
  Learner& operator=(const Learner&) = delete;

  // ---- training
  // A fit that fails (an exception other than a cancellation) leaves the loss function as
  // it found it, and none of options.cbs added.
  void fit(int n_epoch, Lrs lr = {}, FitOptions options = {});
  void fit_one_cycle(int n_epoch, Lrs lr_max = {}, OneCycleOptions options = {});
  void fit_flat_cos(int n_epoch, Lrs lr = {}, FlatCosOptions options = {});
  // fastai's SGDR: n_cycles cosine annealings from lr_max to 0, the first cycle_len
  // epochs long, each next one cycle_mult times longer (warm restarts).
  void fit_sgdr(int n_cycles, int cycle_len, Lrs lr_max = {}, SgdrOptions options = {});
  void fine_tune(int epochs, FineTuneOptions options = {});
  LrFindResult lr_find(LrFindOptions options = {});

  // ---- inference
  // [valid_loss, metrics...] over a loader (default: the valid one).
  std::vector<double> validate(DataLoader* dl = nullptr);
  // Activated predictions of every item, in the dataset's order (a shuffling loader too),
  // on the CPU as fastai's (a whole set's would fill a GPU).
  Preds get_preds(DataLoader* dl = nullptr, bool with_loss = false);
  // Test-time augmentation, as fastai's tta: the predictions of n passes over the
  // loader's items with their training transforms (Dataset::augmented) and the training
  // loader's batch augmentation, averaged, blended with the plain predictions (learner/tta.cpp).
  Preds tta(TtaOptions options = {});
  // Activated output for one item as the dataset gives it (batch transforms applied).
  torch::Tensor predict(const torch::Tensor& item);

  // Layers (a row per child of a Sequential, else one for the model), output shapes for
  // one validation batch, parameter counts, what is trainable (learner/summary.cpp).
  std::string summary();

  // ---- state
  // Model, optimizer state and epoch, written atomically (temporary file + rename);
  // `extras`: numbers a callback keeps with them (checkpoint::extras_of reads them back).
  void save(const std::string& path, bool with_opt = true, const checkpoint::Extras& extras = {}) const;
  // Not strict (fastai's strict=False): the model's entries the file lacks keep their
  // values (a new head), the file's other entries are ignored; shapes must still match.
  void load(const std::string& path, bool with_opt = true, bool strict = true);
  // What inference needs, in one file without the data (learner/export.h): fastai's
  // learn.export (export is a C++ keyword). Read back with vision::load_learner.
  void export_learner(const std::string& path = "export.pt") const;

  void create_opt();
  void freeze_to(int n);  // freeze the first n parameter groups (n < 0: all but the last -n)
  void freeze() { freeze_to(-1); }
  void unfreeze() { freeze_to(0); }
  size_t n_param_groups() const;

  // ---- precision and layout (callbacks/fp16.h)
  // CUDA only. A loss scaler there already (loaded from a checkpoint, or kept from earlier
  // fits) goes on; `scaler` configures a new one otherwise.
  void to_fp16(GradScalerOptions scaler = {});
  void to_bf16();                               // CUDA or CPU
  void to_fp32();
  void to_channels_last();
  // The training step recorded as a CUDA graph per batch shape and replayed: small models
  // train at the GPU's speed (callbacks/cuda_graphs.h, which says when it trains eagerly).
  void to_graphs();
  // Moves the model, the loaders and the optimizer's state to `device`.
  void to(torch::Device device);
  // One process per device, launched by fastcpp-launch, torchrun, Slurm or mpirun
  // (distributed/distributed_trainer.h); a single process trains as usual.
  void to_distributed();
  void to_distributed(const distributed::DistributedOptions& options);
  // One process, a replica of the model on each device (default: every CUDA device),
  // BatchNorm synchronized over them unless sync_bn is false (parallel/data_parallel.h).
  void to_parallel(std::vector<torch::Device> devices = {}, bool sync_bn = true);

  // ---- callbacks
  // Adds `cb` in its order. Every callback gets after_create once for this Learner: those
  // given to the constructor at its end, one added later (fit's cbs too) when added. A
  // callback already added is refused, and one whose after_create throws is not kept.
  void add_cb(CallbackPtr cb);
  template <class Cb, class = std::enable_if_t<std::is_base_of_v<Callback, std::decay_t<Cb>>>>
  std::shared_ptr<std::decay_t<Cb>> add_cb(Cb&& cb) {
    auto ptr = std::make_shared<std::decay_t<Cb>>(std::forward<Cb>(cb));
    add_cb(ptr);
    return ptr;
  }
  void remove_cb(const CallbackPtr& cb);
  const std::vector<CallbackPtr>& cbs() const { return *cbs_; }
  // The first callback of type T, or nullptr.
  template <class T>
  std::shared_ptr<T> get_cb() const {
    for (const auto& cb : *cbs_)
      if (auto typed = std::dynamic_pointer_cast<T>(cb)) return typed;
    return nullptr;
  }

  // Runs `event` on every callback, in order. An exception escaping a callback is
  // re-thrown as fastcpp::Error naming the callback and the event (cancel
  // exceptions pass through untouched).
  void event(Event event);

  // "training batch 3 of epoch 1": where the loop is, for error messages.
  std::string position() const;

  // ---- the loop's state
  DataLoaders dls;
  Model model;
  Loss loss_func;
  std::vector<MetricPtr> metrics;
  std::unique_ptr<Optimizer> opt;
  torch::Device device;
  std::shared_ptr<Recorder> recorder;
  std::shared_ptr<GradScaler> scaler;  // set by to_fp16; saved with checkpoints

  DataLoader* dl = nullptr;
  torch::Tensor xb, yb, pred, loss, loss_grad;
  int n_epoch = 1;
  int epoch = 0;
  // The epochs of the fits before this one (saved with checkpoints). The loaders draw their
  // order and augmentation for epochs_before + epoch: each fit (fine_tune's two, fit(1) in a
  // loop) draws new ones, as fastai's, and a program making the same calls the same ones.
  int64_t epochs_before = 0;
  size_t iter = 0;
  size_t n_iter = 0;
  int64_t train_iter = 0;
  double pct_train = 0;
  bool training = false;
  bool logging = true;  // epoch rows and progress output
  // Set while training distributed: this process's rank (only rank 0 writes
  // checkpoints) and a barrier across the processes after each save, which also shares
  // each rank's outcome: given whether this rank's part went well, it returns whether
  // every rank's did.
  int rank = 0;
  std::function<bool(bool ok)> barrier;
  // Set while training distributed too: rank 0's value of a number every rank gives (a
  // seed drawn on each, so that all of them use, and a checkpoint keeps, the same).
  std::function<int64_t(int64_t)> from_rank_0;
  // Where messages go (epoch table, callbacks' notices); default: stdout.
  std::function<void(const std::string&)> logger;

 private:
  friend class CudaGraphs;  // records do_one_batch
  template <class Cancel, class Body>
  void with_events(Body&& body, Event before, Event after_cancel, Event after);
  void do_fit();
  void do_epoch_train();
  void do_epoch_validate(DataLoader& loader);
  void all_batches();
  void one_batch(size_t i, const Batch& batch);
  void do_one_batch();
  void do_grad_opt();
  // requires_grad off in the frozen groups (on for their norm layers with train_bn); with
  // thaw_the_rest (freeze_to, as fastai's) on everywhere else, without it (a new optimizer)
  // left as it is: a parameter the program froze itself stays frozen.
  void apply_freeze(bool thaw_the_rest);
  // The lr of each parameter group for `lr` (the default when not given).
  std::vector<double> group_lrs(const Lrs& lr);
  // fit with a ParamScheduler of `scheds` added.
  void fit_scheduled(int n_epoch, ParamScheduler::Scheds scheds, FitOptions options);
  // Adds callbacks for one fit (or get_preds) and removes them after, even on error.
  class AddedCallbacks;
  // Rank 0 runs `write`; then every rank waits at the barrier, also when the write failed:
  // then rank 0 throws its error and every other rank an Error saying so, so that no rank
  // waits for one that is gone or trains on without its checkpoint.
  void write_on_rank_0(const std::function<void()>& write) const;
  // The Error for a callback's cancel that nothing running catches.
  Error uncaught(const CancelException& e) const;
  // Runs `event` on `cb`, errors re-thrown as event() says.
  void call(Callback& cb, Event event);
  // cb's after_create, unless it had it from this Learner already.
  void announce_creation(Callback& cb);

  LearnerOptions options_;
  // In order, copied on write: an event runs the list as it was when the event began,
  // whatever its callbacks add or remove, without copying it (several events a batch).
  std::shared_ptr<const std::vector<CallbackPtr>> cbs_ = std::make_shared<std::vector<CallbackPtr>>();
  bool created_ = false;  // the constructor has run: add_cb announces the creation itself
  int frozen_groups_ = 0;
  bool fitting_ = false;  // inside fit: validate leaves a callback's cancel to it
};

}  // namespace fastcpp
