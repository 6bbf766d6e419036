#pragma once
// Counting the ATen operators a piece of training dispatches (tests only).
#include <ATen/record_function.h>

#include <map>
#include <string>

namespace fastcpp::testing {

// The ATen operators this thread (and the autograd engine's, which inherit the callback)
// dispatches while it lives, by name: on a GPU each one is a kernel launch or more.
class OperatorCount {
 public:
  OperatorCount() {
    handle_ = at::addThreadLocalCallback(
        at::RecordFunctionCallback(
            [](const at::RecordFunction& fn) -> std::unique_ptr<at::ObserverContext> {
              if (active_) ++(*active_)[fn.name()];
              return nullptr;
            })
            .scopes({at::RecordScope::FUNCTION}));
  }
  ~OperatorCount() { at::removeCallback(handle_); }
  void start() {
    counts_.clear();
    active_ = &counts_;
  }
  std::map<std::string, int> stop() {
    active_ = nullptr;
    return counts_;
  }

 private:
  static inline thread_local std::map<std::string, int>* active_ = nullptr;
  at::CallbackHandle handle_;
  std::map<std::string, int> counts_;
};

}  // namespace fastcpp::testing
