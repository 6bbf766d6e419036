#pragma once
// Devices: the default one and a check that a device asked for exists, for every layer
// that places tensors (Learner, DataLoader, to_parallel, pipelines).
#include <c10/core/Device.h>

#include <string>
#include <vector>

namespace fastcpp {

// CUDA (the current device) when a GPU is there, else the CPU.
c10::Device default_device();

// Throws fastcpp::Error when `device` is not on this machine, naming `who` asked for it,
// the device, and what there is ("cuda:1 ... this machine has 1 CUDA device: cuda:0").
void check_device(const c10::Device& device, const std::string& who);

// Devices from a command-line list: "cuda:0,cuda:1", "cpu,cpu"; "all" (or empty) gives
// none, which to_parallel reads as every CUDA device. A bad name is a fastcpp::Error.
std::vector<c10::Device> parse_devices(const std::string& list);

// "no CUDA device" / "1 CUDA device (cuda:0)" / "2 CUDA devices (cuda:0..cuda:1)".
std::string cuda_devices_text();

}  // namespace fastcpp
