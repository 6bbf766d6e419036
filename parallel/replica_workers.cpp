#include "parallel/replica_workers.h"

#include <string>

#include "core/error.h"

namespace fastcpp::distributed {

ReplicaWorkers::ReplicaWorkers(size_t workers) {
  threads_.reserve(workers);
  for (size_t i = 0; i < workers; ++i) threads_.emplace_back([this, i] { work(i); });
}

ReplicaWorkers::~ReplicaWorkers() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  start_.notify_all();
  for (auto& thread : threads_) thread.join();
}

void ReplicaWorkers::run(int replicas, const std::function<void(int)>& task) {
  if (replicas < 1 || static_cast<size_t>(replicas) > threads_.size() + 1)
    throw Error("ReplicaWorkers: " + std::to_string(replicas) + " replicas asked for, there are threads for 1.." +
                std::to_string(threads_.size() + 1));
  {
    std::lock_guard<std::mutex> lock(mutex_);
    task_ = &task;
    replicas_ = replicas;
    pending_ = replicas - 1;
    errors_.assign(static_cast<size_t>(replicas), nullptr);
    ++generation_;
  }
  start_.notify_all();
  try {
    task(0);
  } catch (...) {
    errors_[0] = std::current_exception();
  }
  std::unique_lock<std::mutex> lock(mutex_);
  finished_.wait(lock, [&] { return pending_ == 0; });
  task_ = nullptr;
  std::exception_ptr stopped;
  for (const auto& error : errors_) {
    if (!error) continue;
    try {
      std::rethrow_exception(error);
    } catch (const ReplicaStopped&) {
      if (!stopped) stopped = error;
    }
  }
  if (stopped) std::rethrow_exception(stopped);  // no cause found: none of the others failed
}

void ReplicaWorkers::work(size_t index) {
  const int replica = static_cast<int>(index) + 1;
  uint64_t seen = 0;
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    start_.wait(lock, [&] { return stopping_ || generation_ != seen; });
    if (stopping_) return;
    seen = generation_;
    if (replica >= replicas_) continue;  // a short batch: this replica sits this one out
    const auto* task = task_;
    lock.unlock();
    std::exception_ptr error;
    try {
      (*task)(replica);
    } catch (...) {
      error = std::current_exception();
    }
    lock.lock();
    errors_[static_cast<size_t>(replica)] = error;
    if (--pending_ == 0) finished_.notify_all();
  }
}

std::vector<std::thread::id> ReplicaWorkers::thread_ids() const {
  std::vector<std::thread::id> ids{std::this_thread::get_id()};
  for (const auto& thread : threads_) ids.push_back(thread.get_id());
  return ids;
}

}  // namespace fastcpp::distributed
