#pragma once
// The training-loop events, in fastai's order, and the cancel exceptions that
// callbacks throw to skip part of the loop.
//
// Every level of the loop runs as
//     before_X; try { body } catch (CancelXException) { after_cancel_X; } after_X;
// so after_X always runs, and a cancel exception not caught at its own level
// travels up to the enclosing one.
#include <array>
#include <exception>
#include <string>

namespace fastcpp {

enum class Event {
  after_create,
  before_fit,
  before_epoch,
  before_train,
  before_batch,
  after_pred,
  after_loss,
  before_backward,
  after_cancel_backward,
  after_backward,
  before_step,
  after_cancel_step,
  after_step,
  after_cancel_batch,
  after_batch,
  after_cancel_train,
  after_train,
  before_validate,
  after_cancel_validate,
  after_validate,
  after_cancel_epoch,
  after_epoch,
  after_cancel_fit,
  after_fit,
};

const char* event_name(Event event);

// Events of the batch loop: a callback with run_train (run_valid) false skips
// these while training (validating). Others always run.
bool is_inner_loop_event(Event event);

// Base of all cancel exceptions; never wrapped or reported as an error.
struct CancelException : std::exception {};

struct CancelFitException : CancelException {
  const char* what() const noexcept override { return "CancelFitException"; }
};
struct CancelEpochException : CancelException {
  const char* what() const noexcept override { return "CancelEpochException"; }
};
struct CancelTrainException : CancelException {
  const char* what() const noexcept override { return "CancelTrainException"; }
};
struct CancelValidException : CancelException {
  const char* what() const noexcept override { return "CancelValidException"; }
};
struct CancelBatchException : CancelException {
  const char* what() const noexcept override { return "CancelBatchException"; }
};
struct CancelBackwardException : CancelException {
  const char* what() const noexcept override { return "CancelBackwardException"; }
};
struct CancelStepException : CancelException {
  const char* what() const noexcept override { return "CancelStepException"; }
};

}  // namespace fastcpp
