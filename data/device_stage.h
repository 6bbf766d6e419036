#pragma once
// DeviceStage: what a batch's x still needs on the loader's device, where a dataset
// leaves part of its work to the device (images decoded and cropped on the GPU). The
// worker that builds the batch draws every random number and does what the host must;
// the consumer runs the stage on its device before the batch transforms (on the worker
// itself when the device is the CPU), so the batch is the same whichever runs it.
#include <torch/types.h>

namespace fastcpp {

class DeviceStage {
 public:
  virtual ~DeviceStage() = default;
  // The batch's x, made on `device`. Throws fastcpp::Error naming the item at fault.
  virtual torch::Tensor run(torch::Device device) const = 0;
};

}  // namespace fastcpp
