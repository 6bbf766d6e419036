#pragma once
// The CUDA streams of to_parallel's replicas. Replicas on different GPUs work on their
// devices' streams; a replica that shares its GPU with an earlier one gets a stream of
// its own from the pool, so the two overlap. Work that crosses from one replica's stream
// to another's (the parameter copies and the input before a replica starts, its output
// after, the inputs and outputs of a synchronized BatchNorm) is ordered with events, and
// its memory is kept from reuse until the other stream is done with it. Off CUDA all of
// this does nothing. Device-generic c10 calls, so no CUDA header is needed here.
#include <c10/core/Event.h>
#include <c10/core/Stream.h>
#include <torch/types.h>

#include <optional>
#include <vector>

namespace fastcpp::distributed {

// A point in the work queued so far on this thread's current stream of `device`.
class StreamMark {
 public:
  explicit StreamMark(const torch::Device& device);
  // This thread's current stream of the same device waits for the marked work.
  void wait() const;
  // This thread's current stream of `other` (another GPU) waits for it.
  void wait_on(const torch::Device& other) const;

 private:
  torch::Device device_;
  std::optional<c10::Event> event_;  // none off CUDA
};

// `tensor` is used on this thread's current stream of its device, though another
// stream made it: its memory is not reused before that use is done.
void keep_for_current_stream(const torch::Tensor& tensor);

// For each device, a stream of its own when an earlier entry has the same CUDA device
// (a replica sharing a GPU); nullopt otherwise (the device's current stream serves).
std::vector<std::optional<c10::Stream>> side_streams(const std::vector<torch::Device>& devices);

}  // namespace fastcpp::distributed
