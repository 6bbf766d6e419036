#pragma once
// Callback: the unit of every feature. A callback overrides the events it cares
// about (named exactly like fastai's) and reads or changes the Learner's state
// through learn(): xb, yb, pred, loss, epoch, iter, n_iter, pct_train, training, opt...
//
// order         callbacks run sorted by it (default 0; see ANCHORS of each callback)
// run_train     false: skip the batch-loop events while training
// run_valid     false: skip the batch-loop events while validating
// run           false: skip every event until after_fit (set back to true then)
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "learner/events.h"

namespace fastcpp {

class Learner;

class Callback {
 public:
  virtual ~Callback() = default;

  // The name used in error messages; the class name unless overridden.
  virtual std::string name() const;

  // Once per Learner: at the end of its constructor, or when added later.
  virtual void after_create() {}
  virtual void before_fit() {}
  virtual void before_epoch() {}
  virtual void before_train() {}
  virtual void before_batch() {}
  virtual void after_pred() { ran_default(Event::after_pred); }
  virtual void after_loss() { ran_default(Event::after_loss); }
  virtual void before_backward() { ran_default(Event::before_backward); }
  virtual void after_cancel_backward() { ran_default(Event::after_cancel_backward); }
  virtual void after_backward() { ran_default(Event::after_backward); }
  virtual void before_step() { ran_default(Event::before_step); }
  virtual void after_cancel_step() { ran_default(Event::after_cancel_step); }
  virtual void after_step() { ran_default(Event::after_step); }
  virtual void after_cancel_batch() {}
  virtual void after_batch() {}
  virtual void after_cancel_train() {}
  virtual void after_train() {}
  virtual void before_validate() {}
  virtual void after_cancel_validate() {}
  virtual void after_validate() {}
  virtual void after_cancel_epoch() {}
  virtual void after_epoch() {}
  virtual void after_cancel_fit() {}
  virtual void after_fit() {}
  // Not fastai's: a fit that fails (an exception other than a cancel) gets no after_fit;
  // this instead, before the exception goes on, to put back what the fit's start changed
  // (autocast, the profiler, lr_find's weights, the progress bar's line).
  virtual void after_fit_failed() {}

  // Calls the method for `event`, honouring run/run_train/run_valid.
  void handle(Event event);

  // The Learner this callback is attached to; throws if it is not attached.
  Learner& learn() const;
  bool attached() const { return learn_ != nullptr; }

  int order = 0;
  bool run_train = true;
  bool run_valid = true;
  bool run = true;
  // Its events inside a training step (after_pred to after_step) only queue work on the
  // device, so that learn.to_graphs() may record them once and replay them
  // (callbacks/cuda_graphs.h). A callback with its own such events that leaves this
  // false makes to_graphs train eagerly, saying why.
  bool capturable = false;

  // Whether this callback has its own method for a step event (after_pred to after_step):
  // known once the event has reached it, as the base's empty methods note that they ran.
  std::optional<bool> overrides(Event event) const;

 private:
  void dispatch(Event event);
  void ran_default(Event event) { defaults_ran_ |= bit(event); }
  static uint32_t bit(Event event) { return 1u << static_cast<unsigned>(event); }
  uint32_t dispatched_ = 0, defaults_ran_ = 0;
  friend class Learner;
  Learner* learn_ = nullptr;
  const Learner* created_for_ = nullptr;  // the Learner whose after_create it had
};

using CallbackPtr = std::shared_ptr<Callback>;

// A callback that spreads the model over devices for the whole fit (to_parallel's
// DataParallel, to_distributed's DistributedTrainer): a Learner takes one at most.
class DevicePlacement : public Callback {
 public:
  // The Learner method that adds it, for messages: "to_parallel".
  virtual std::string method() const = 0;
};

}  // namespace fastcpp
