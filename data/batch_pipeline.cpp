#include "data/batch_pipeline.h"

#include <string>
#include <system_error>

#include "core/error.h"

namespace fastcpp {

BatchPipeline::BatchPipeline(size_t n_batches, int workers, size_t depth, Producer produce)
    : n_batches_(n_batches), depth_(std::max<size_t>(depth, 1)), produce_(std::move(produce)) {
  workers_.reserve(static_cast<size_t>(std::max(workers, 0)));
  for (int w = 0; w < workers; ++w) {
    try {
      workers_.emplace_back([this] { work(); });
    } catch (const std::system_error& e) {  // EAGAIN: a limit on threads (ulimit -u, a container's pids)
      stop();  // the destructor does not run: the workers started would end the program unjoined
      throw Error("DataLoader: cannot start worker " + std::to_string(w + 1) + " of " + std::to_string(workers) +
                  ": " + e.what() + "; try fewer workers");
    } catch (...) {  // std::bad_alloc for the thread's state
      stop();
      throw;
    }
  }
}

BatchPipeline::~BatchPipeline() { stop(); }

void BatchPipeline::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  room_free_.notify_all();
  for (auto& worker : workers_) worker.join();
}

void BatchPipeline::work() {
  for (;;) {
    size_t index;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      room_free_.wait(lock, [&] { return stopping_ || next_to_build_ >= n_batches_ || next_to_build_ < consumed_ + depth_; });
      if (stopping_ || next_to_build_ >= n_batches_) return;
      index = next_to_build_++;
    }
    Result result;
    try {
      result.batch = produce_(index);
    } catch (...) {
      result.error = std::current_exception();
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      ready_.emplace(index, std::move(result));
    }
    batch_ready_.notify_all();
  }
}

Batch BatchPipeline::next() {
  if (workers_.empty()) return produce_(consumed_++);
  Result result;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    batch_ready_.wait(lock, [&] { return ready_.count(consumed_) > 0; });
    auto it = ready_.find(consumed_);
    result = std::move(it->second);
    ready_.erase(it);
    ++consumed_;
  }
  room_free_.notify_all();
  if (result.error) std::rethrow_exception(result.error);
  return std::move(result.batch);
}

}  // namespace fastcpp
