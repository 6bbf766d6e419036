#pragma once
// SGD's and Adam's update with every hyper-parameter, the step count and the skip
// decision on the params' device, so that the host takes no part in a step: the update a
// CUDA graph records once and replays (callbacks/cuda_graphs.h). The schedules change
// lr and mom on the host before each batch; refresh() copies them into `values` without
// waiting, and the recorded kernels read them from there at replay.
//
// found_inf (GradScaler's verdict, float [1], nonzero for an overflow) skips the step on the device: the
// gradients are zeroed where it is set, and lr and 1 - mom (1 - sqr_mom) are multiplied
// by 1 - found_inf, so that the params, the averages and the step count stay as they were.
// Without a scaler it is a zero tensor. The update equals the host one (optimizers.h) to
// float rounding: the hyper-parameters are float32 here, doubles there.
#include <torch/types.h>

#include "optim/optimizer.h"

namespace fastcpp {

// One parameter group's hyper-parameters and step count, on its params' device.
struct DeviceHypers {
  // Made on `device` from `hypers`, at step `step` (the group's host step count).
  DeviceHypers(const torch::Device& device, const Hypers& hypers, int64_t step);

  // Copies `hypers` to the device without waiting for it (pinned memory on CUDA).
  void refresh(const Hypers& hypers);

  torch::Tensor values;  // float32 [5]: lr, mom, sqr_mom, wd, eps
  torch::Tensor step;    // float32 0-dim: the steps taken (skipped ones not counted)
  torch::Tensor lr() const { return values[0]; }
  torch::Tensor mom() const { return values[1]; }
  torch::Tensor sqr_mom() const { return values[2]; }
  torch::Tensor wd() const { return values[3]; }
  torch::Tensor eps() const { return values[4]; }
};

// Whether the device updates take these tensors: one device and floating dtype, dense
// gradients, state buffers on the params' device.
bool device_steppable(const GroupTensors& group);

// momentum: SGD's, fixed when it was made (never the scheduled mom, which the host changes
// between replays); the buffer exists either way.
void device_sgd_update(GroupTensors& group, DeviceHypers& hypers, const torch::Tensor& found_inf, bool momentum);
void device_adam_update(GroupTensors& group, DeviceHypers& hypers, const torch::Tensor& found_inf);

}  // namespace fastcpp
