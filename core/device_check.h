#pragma once
// A check of values computed on a device, made without stopping the host. On a CUDA
// device the values are copied to pinned memory behind an event and read once the
// device has passed the event: a training loop keeps its queue of kernels full, and a
// failed check still ends in a clear Error a few batches later, at the latest when its
// owner calls finish(). Values on the CPU are read at once.
#include <ATen/core/Tensor.h>

#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace fastcpp {

class DeviceCheck {
 public:
  using Message = std::function<std::string(const std::vector<int64_t>& values)>;

  // values: a small 1-d integer tensor; values[0] != 0 fails the check, and the Error
  // says message(values). Throws at once for values on the CPU; else first polls.
  void post(const at::Tensor& values, Message message);
  // Throws for the oldest failed check the device has finished; never waits.
  void poll();
  // Waits for every check posted, then throws for the oldest that failed.
  void finish();

  // A check posted while its stream is recorded into a CUDA graph cannot wait on an
  // event: it is kept instead, its values being the graph's own tensor, rewritten at each
  // replay. Whoever replays the graph takes them once and posts them after each replay.
  struct Recorded {
    at::Tensor values;
    Message message;
  };
  std::vector<Recorded> take_recorded();

 private:
  struct Pending;
  void drain(bool wait);

  std::mutex mutex_;
  std::deque<std::shared_ptr<Pending>> pending_;
  std::vector<Recorded> recorded_;
};

}  // namespace fastcpp
