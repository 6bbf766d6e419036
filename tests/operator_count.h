#pragma once
// Counting the ATen operators a piece of training dispatches (tests only).
#include <ATen/record_function.h>

#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

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
  OperatorCount(const OperatorCount&) = delete;
  OperatorCount& operator=(const OperatorCount&) = delete;
  ~OperatorCount() {
    active_ = nullptr;  // also when a test threw between start and stop
    at::removeCallback(handle_);
  }
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

// The same by thread: this thread's and those that inherit its callbacks (to_parallel's
// replica workers, the autograd engine's), each on its own.
class OperatorCountByThread {
 public:
  using Counts = std::map<std::thread::id, std::map<std::string, int>>;
  OperatorCountByThread() {
    handle_ = at::addThreadLocalCallback(
        at::RecordFunctionCallback(
            [](const at::RecordFunction& fn) -> std::unique_ptr<at::ObserverContext> {
              std::lock_guard<std::mutex> lock(mutex_);
              if (active_) ++(*active_)[std::this_thread::get_id()][fn.name()];
              return nullptr;
            })
            .scopes({at::RecordScope::FUNCTION}));
  }
  ~OperatorCountByThread() { at::removeCallback(handle_); }
  OperatorCountByThread(const OperatorCountByThread&) = delete;  // one registration, one owner
  OperatorCountByThread& operator=(const OperatorCountByThread&) = delete;
  void start() {
    std::lock_guard<std::mutex> lock(mutex_);
    counts_.clear();
    active_ = &counts_;
  }
  Counts stop() {
    std::lock_guard<std::mutex> lock(mutex_);
    active_ = nullptr;
    return counts_;
  }
  // How many times each thread that dispatched `name` did.
  static std::vector<int> per_thread(const Counts& counts, const std::string& name) {
    std::vector<int> found;
    for (const auto& [thread, names] : counts)
      if (auto it = names.find(name); it != names.end()) found.push_back(it->second);
    return found;
  }

 private:
  static inline std::mutex mutex_;
  static inline Counts* active_ = nullptr;
  at::CallbackHandle handle_;
  Counts counts_;
};

}  // namespace fastcpp::testing
