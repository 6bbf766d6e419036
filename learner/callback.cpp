#include "learner/callback.h"

#include <cxxabi.h>

#include <cstdlib>
#include <typeinfo>

#include "core/error.h"
#include "learner/learner.h"

namespace fastcpp {

std::string Callback::name() const {
  const char* mangled = typeid(*this).name();
  int status = 0;
  char* demangled = abi::__cxa_demangle(mangled, nullptr, nullptr, &status);
  std::string result = status == 0 ? demangled : mangled;
  std::free(demangled);
  const auto colon = result.rfind("::");
  return colon == std::string::npos ? result : result.substr(colon + 2);
}

Learner& Callback::learn() const {
  if (!learn_) throw Error("callback " + name() + " is not attached to a Learner (use learn.add_cb)");
  return *learn_;
}

void Callback::handle(Event event) {
  bool enabled = run;
  if (enabled && is_inner_loop_event(event)) {
    const bool training = learn_ && learn_->training;
    enabled = training ? run_train : run_valid;
  }
  if (event == Event::after_fit) run = true;  // as fastai: a disabled callback wakes up after the fit
  if (!enabled) return;
  dispatch(event);
}

std::optional<bool> Callback::overrides(Event event) const {
  if (!(dispatched_ & bit(event))) return std::nullopt;
  return !(defaults_ran_ & bit(event));
}

void Callback::dispatch(Event event) {
  dispatched_ |= bit(event);
  switch (event) {
    case Event::after_create: return after_create();
    case Event::before_fit: return before_fit();
    case Event::before_epoch: return before_epoch();
    case Event::before_train: return before_train();
    case Event::before_batch: return before_batch();
    case Event::after_pred: return after_pred();
    case Event::after_loss: return after_loss();
    case Event::before_backward: return before_backward();
    case Event::after_cancel_backward: return after_cancel_backward();
    case Event::after_backward: return after_backward();
    case Event::before_step: return before_step();
    case Event::after_cancel_step: return after_cancel_step();
    case Event::after_step: return after_step();
    case Event::after_cancel_batch: return after_cancel_batch();
    case Event::after_batch: return after_batch();
    case Event::after_cancel_train: return after_cancel_train();
    case Event::after_train: return after_train();
    case Event::before_validate: return before_validate();
    case Event::after_cancel_validate: return after_cancel_validate();
    case Event::after_validate: return after_validate();
    case Event::after_cancel_epoch: return after_cancel_epoch();
    case Event::after_epoch: return after_epoch();
    case Event::after_cancel_fit: return after_cancel_fit();
    case Event::after_fit: return after_fit();
  }
}

}  // namespace fastcpp
