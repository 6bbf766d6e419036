#pragma once
// The threads that run to_parallel's replicas: one per replica beyond the first, started
// once and fed batch after batch until the workers are destroyed. Replica 0 runs on the
// caller's thread (and so on its CUDA stream). Thread-local state that libtorch keeps per
// thread (cuDNN's benchmark cache, cuBLAS handles and workspaces) therefore survives from
// one forward to the next; threads started per batch would rebuild it every step.
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "core/error.h"

namespace fastcpp::distributed {

// What a replica throws when it stops because another one failed (a synced layer's meeting
// called off): run() reports that other replica's error, the cause, instead.
class ReplicaStopped : public Error {
 public:
  using Error::Error;
};

class ReplicaWorkers {
 public:
  // Starts `workers` threads (replicas 1..workers).
  explicit ReplicaWorkers(size_t workers);
  ~ReplicaWorkers();  // joins them
  ReplicaWorkers(const ReplicaWorkers&) = delete;
  ReplicaWorkers& operator=(const ReplicaWorkers&) = delete;

  size_t size() const { return threads_.size(); }
  // task(r) for r in 0..replicas-1: r = 0 on the calling thread, r > 0 on worker r-1, all
  // at once; returns when every one has returned. The first exception (by replica) that is
  // not a ReplicaStopped is rethrown. replicas must be between 1 and size() + 1.
  void run(int replicas, const std::function<void(int)>& task);
  // The OS thread of each replica's task, replica 0's being the caller's (for tests).
  std::vector<std::thread::id> thread_ids() const;

 private:
  void work(size_t index);

  std::vector<std::thread> threads_;
  std::mutex mutex_;
  std::condition_variable start_, finished_;
  const std::function<void(int)>* task_ = nullptr;
  int replicas_ = 0;
  uint64_t generation_ = 0;
  int pending_ = 0;
  bool stopping_ = false;
  std::vector<std::exception_ptr> errors_;
};

}  // namespace fastcpp::distributed
