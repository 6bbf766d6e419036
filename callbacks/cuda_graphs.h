#pragma once
// CudaGraphs (learn.to_graphs()): the training step recorded once per batch shape as a
// CUDA graph and replayed for every later batch of that shape, so that a small model
// trains at the GPU's speed and not at the speed the host launches kernels.
//
//   before_fit    decides whether recording can hold for this fit; if not, says why once
//                 and trains eagerly. Else turns the optimizer's step on the device
//                 (optim/device_step.h): the schedules' lr and mom reach it as device
//                 values refreshed before each batch, and GradScaler's skip happens there.
//   before_batch  (training, last of the callbacks) a batch whose shape came `warmup`
//                 times before (eager steps, which also make every lazily built buffer)
//                 has its whole step recorded: forward, the loss, the step events of every
//                 callback, backward, unscaling, clipping, the optimizer. It replays at
//                 once for this batch. A batch of a recorded shape is copied into the
//                 graph's inputs and replayed. Either way the eager step is skipped
//                 (CancelBatch), and after_batch sees learn.loss and learn.pred as usual.
//   after_fit     drops the graphs and turns the device step off. Graphs go too, and
//                 shapes warm up again, when a callback replaces the optimizer's or the
//                 scaler's tensors mid-fit (a freeze, a loaded state) or changes which
//                 parameters train (requires_grad set on single parameters).
//
// A replayed step runs no host code: a callback's step events (after_pred..after_step)
// ran once, at the recording. Trains eagerly, saying why, where that would be wrong: not
// a CUDA device; to_parallel or to_distributed; GradientAccumulation (a host count decides
// its steps); MixUp or CutMix (mixing weights drawn on the host each batch); an optimizer
// without a device step (SGD and Adam have one); a callback with its own step events not
// marked `capturable`. A shape seen warmup times or fewer (the last short batch) runs
// eagerly too. The loss's checks of its input (CrossEntropyLoss's labels) are read after
// each replay as after an eager step. A replayed fp16 step does not tell an overflow from
// a diverged loss (MixedPrecision reads that on the host: TerminateOnNaN still stops a fit
// whose loss is nan), and its scale updates are not in GradScaler::history().
#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>

#include "learner/callback.h"

namespace fastcpp {

struct CudaGraphsOptions {
  int warmup = 3;  // eager steps of a shape before its step is recorded
};

class CudaGraphs : public Callback {
 public:
  explicit CudaGraphs(CudaGraphsOptions options = {});
  ~CudaGraphs() override;
  void before_fit() override;
  void before_batch() override;
  void after_fit() override;
  void after_fit_failed() override { after_fit(); }

  // Why this learner's training step cannot be recorded, or "" when it can, from what
  // is known before a batch: the device, the callbacks, the optimizer.
  static std::string fallback_reason(const Learner& learn);
  // The callbacks whose own step events would run only at the recording, with those
  // events: "Probe (after_loss, before_step)"; "" when none. Unknown (nullopt) while a
  // callback has not yet seen every event of a step.
  static std::optional<std::string> host_step_callbacks(const Learner& learn);

  // Why this fit trains eagerly ("" while it records or replays).
  const std::string& eager_reason() const { return eager_reason_; }
  size_t recorded_shapes() const { return graphs_.size(); }
  int64_t replays() const { return replays_; }

 private:
  struct Graph;  // a recorded step and its input and output tensors
  void train_eagerly(std::string reason);
  void record(const std::string& shape);
  void replay(Graph& graph);  // copies the batch in, then runs
  void run(Graph& graph);     // replays with this batch's hyper-parameters; learn.pred and loss

  CudaGraphsOptions options_;
  std::string eager_reason_;
  std::set<std::string> said_;  // each reason once
  std::map<std::string, int> seen_;  // eager steps per batch shape
  std::map<std::string, std::unique_ptr<Graph>> graphs_;
  std::array<uint64_t, 4> recorded_state_{};  // state_of(learn) the graphs were recorded with
  int64_t replays_ = 0;
};

}  // namespace fastcpp
