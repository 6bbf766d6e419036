#include "learner/events.h"

namespace fastcpp {

const char* event_name(Event event) {
  switch (event) {
    case Event::after_create: return "after_create";
    case Event::before_fit: return "before_fit";
    case Event::before_epoch: return "before_epoch";
    case Event::before_train: return "before_train";
    case Event::before_batch: return "before_batch";
    case Event::after_pred: return "after_pred";
    case Event::after_loss: return "after_loss";
    case Event::before_backward: return "before_backward";
    case Event::after_cancel_backward: return "after_cancel_backward";
    case Event::after_backward: return "after_backward";
    case Event::before_step: return "before_step";
    case Event::after_cancel_step: return "after_cancel_step";
    case Event::after_step: return "after_step";
    case Event::after_cancel_batch: return "after_cancel_batch";
    case Event::after_batch: return "after_batch";
    case Event::after_cancel_train: return "after_cancel_train";
    case Event::after_train: return "after_train";
    case Event::before_validate: return "before_validate";
    case Event::after_cancel_validate: return "after_cancel_validate";
    case Event::after_validate: return "after_validate";
    case Event::after_cancel_epoch: return "after_cancel_epoch";
    case Event::after_epoch: return "after_epoch";
    case Event::after_cancel_fit: return "after_cancel_fit";
    case Event::after_fit: return "after_fit";
  }
  return "unknown_event";
}

bool is_inner_loop_event(Event event) {
  switch (event) {
    case Event::before_batch:
    case Event::after_pred:
    case Event::after_loss:
    case Event::before_backward:
    case Event::after_cancel_backward:
    case Event::after_backward:
    case Event::before_step:
    case Event::after_step:
    case Event::after_cancel_batch:
    case Event::after_batch:
      return true;
    default:
      return false;
  }
}

}  // namespace fastcpp
