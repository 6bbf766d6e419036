#include "core/device.h"

#include <torch/cuda.h>

#include "core/error.h"

namespace fastcpp {

c10::Device default_device() { return torch::cuda::is_available() ? c10::Device(c10::kCUDA) : c10::Device(c10::kCPU); }

std::string cuda_devices_text() {
  const auto n = torch::cuda::device_count();
  if (n == 0) return "no CUDA device";
  if (n == 1) return "1 CUDA device (cuda:0)";
  return std::to_string(n) + " CUDA devices (cuda:0..cuda:" + std::to_string(n - 1) + ")";
}

void check_device(const c10::Device& device, const std::string& who) {
  if (device.is_cpu()) return;
  if (!device.is_cuda())
    throw Error(who + ": device " + device.str() + " is not supported; use cpu or cuda[:N]");
  const auto n = static_cast<int64_t>(torch::cuda::device_count());
  if (n == 0 || device.index() >= n)
    throw Error(who + ": device " + device.str() + " is not on this machine, which has " + cuda_devices_text() +
                (n == 0 ? "; train on the CPU (the default when no GPU is there)" : ""));
}

}  // namespace fastcpp
