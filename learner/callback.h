#pragma once
// Callback: the unit of every feature. A callback overrides the events it cares
// about (named exactly like fastai's) and reads or changes the Learner's state
// through learn(): xb, yb, pred, loss, epoch, iter, n_iter, pct_train, training, opt...
//
// order         callbacks run sorted by it (default 0; see ANCHORS of each callback)
// run_train     false: skip the batch-loop events while training
// run_valid     false: skip the batch-loop events while validating
// run           false: skip every event until after_fit (set back to true then)
#include <memory>
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
  virtual void after_pred() {}
  virtual void after_loss() {}
  virtual void before_backward() {}
  virtual void after_cancel_backward() {}
  virtual void after_backward() {}
  virtual void before_step() {}
  virtual void after_cancel_step() {}
  virtual void after_step() {}
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

  // Calls the method for `event`, honouring run/run_train/run_valid.
  void handle(Event event);

  // The Learner this callback is attached to; throws if it is not attached.
  Learner& learn() const;
  bool attached() const { return learn_ != nullptr; }

  int order = 0;
  bool run_train = true;
  bool run_valid = true;
  bool run = true;

 private:
  void dispatch(Event event);
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
