#pragma once
// BatchPipeline: builds the batches of one epoch on worker threads and hands them
// to the consumer in order, at most `depth` batches ahead of it (a bounded queue:
// memory stays flat however fast the workers are).
//
// A worker's exception reaches the consumer at that batch's turn; destroying the
// pipeline (an early break, an error, the end) stops and joins every worker, as does a
// worker that cannot start (a limit on threads), which is an Error.
// With 0 workers, next() builds each batch on the calling thread.
#include <condition_variable>
#include <exception>
#include <functional>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "data/dataset.h"

namespace fastcpp {

class BatchPipeline {
 public:
  using Producer = std::function<Batch(size_t batch_index)>;

  BatchPipeline(size_t n_batches, int workers, size_t depth, Producer produce);
  ~BatchPipeline();
  BatchPipeline(const BatchPipeline&) = delete;
  BatchPipeline& operator=(const BatchPipeline&) = delete;

  // The next batch in order; rethrows the exception that building it raised.
  Batch next();
  bool exhausted() const { return consumed_ >= n_batches_; }

 private:
  struct Result {
    Batch batch;
    std::exception_ptr error;
  };
  void work();
  void stop();  // stops and joins every worker

  const size_t n_batches_;
  const size_t depth_;
  Producer produce_;
  std::mutex mutex_;
  std::condition_variable batch_ready_, room_free_;
  std::map<size_t, Result> ready_;
  size_t next_to_build_ = 0;
  size_t consumed_ = 0;
  bool stopping_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace fastcpp
