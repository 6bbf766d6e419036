#include "core/device.h"

#include <torch/cuda.h>
#include <torch/nn/module.h>

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <mutex>

#if FASTCPP_HAS_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGraphsC10Utils.h>
#endif

#include "core/error.h"

namespace fastcpp {

std::optional<int> launcher_local_rank() {
  // The launchers' local ranks, in read_env's order of launchers: Open MPI's before Slurm's,
  // whose SLURM_LOCALID is 0 in every process mpirun starts in an allocation. (Without one,
  // read_env's RANK mod LOCAL_WORLD_SIZE is not guessed here: the trainer moves the model.)
  for (const char* name : {"LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID"}) {
    const char* value = std::getenv(name);
    if (!value || !*value) continue;
    char* end = nullptr;
    const long rank = std::strtol(value, &end, 10);
    if (*end == '\0' && rank >= 0 && rank <= std::numeric_limits<int>::max()) return static_cast<int>(rank);
  }
  return std::nullopt;
}

c10::Device local_rank_gpu(int local_rank) {
  const auto visible = static_cast<int>(torch::cuda::device_count());
  if (visible == 0) throw Error("local rank " + std::to_string(local_rank) + ": no CUDA device is visible");
  return c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(local_rank % visible));
}

c10::Device default_device() {
#if FASTCPP_HAS_CUDA
  if (!torch::cuda::is_available()) return c10::kCPU;
  // One GPU per process of a launched run from the start, so that no rank opens a
  // context on another's device.
  static std::once_flag placed;
  std::call_once(placed, [] {
    if (const auto local_rank = launcher_local_rank()) c10::cuda::set_device(local_rank_gpu(*local_rank).index());
  });
  return c10::Device(c10::kCUDA, c10::cuda::current_device());
#else
  return c10::kCPU;
#endif
}

at::Tensor to_device_async(const at::Tensor& host, const c10::Device& device) {
  if (!device.is_cuda() || host.device() == device) return host.to(device);
  return host.pin_memory().to(device, /*non_blocking=*/true);
}

bool recording_cuda_graph(const c10::Device& device) {
#if FASTCPP_HAS_CUDA
  if (device.is_cuda()) return c10::cuda::currentStreamCaptureStatusMayInitCtx() != c10::cuda::CaptureStatus::None;
#endif
  return false;
}

int64_t device_memory_bytes(const c10::Device& device) {
#if FASTCPP_HAS_CUDA
  if (device.is_cuda() && torch::cuda::is_available())
    return static_cast<int64_t>(at::cuda::getDeviceProperties(device.has_index() ? device.index() : c10::cuda::current_device())->totalGlobalMem);
#endif
  return 0;
}

std::vector<c10::Device> parse_devices(const std::string& list) {
  std::vector<c10::Device> devices;
  for (size_t start = 0; list != "all" && start < list.size();) {
    const size_t comma = std::min(list.find(',', start), list.size());
    const auto name = list.substr(start, comma - start);
    try {
      devices.emplace_back(name);
    } catch (const c10::Error&) {
      throw Error("device list '" + list + "': '" + name + "' is not a device (cpu, cuda, cuda:N)");
    }
    start = comma + 1;
  }
  return devices;
}

std::string cuda_devices_text() {
  const auto n = torch::cuda::device_count();
  if (n == 0) return "no CUDA device";
  if (n == 1) return "1 CUDA device (cuda:0)";
  return std::to_string(n) + " CUDA devices (cuda:0..cuda:" + std::to_string(n - 1) + ")";
}

std::vector<c10::Device> devices_of(const torch::nn::Module& module) {
  std::vector<c10::Device> devices;
  auto note = [&](const at::Tensor& tensor) {
    if (tensor.defined() && std::find(devices.begin(), devices.end(), tensor.device()) == devices.end())
      devices.push_back(tensor.device());
  };
  for (const auto& param : module.parameters()) note(param);
  for (const auto& buffer : module.buffers()) note(buffer);
  return devices;
}

std::string devices_text(const std::vector<c10::Device>& devices) {
  std::string text;
  for (size_t i = 0; i < devices.size(); ++i)
    text += (i == 0 ? "" : i + 1 == devices.size() ? " and " : ", ") + devices[i].str();
  return text;
}

c10::Device check_device(const c10::Device& device, const std::string& who) {
  if (device.is_cpu()) return device;
  if (!device.is_cuda())
    throw Error(who + ": device " + device.str() + " is not supported; use cpu or cuda[:N]");
  const auto n = static_cast<int64_t>(torch::cuda::device_count());
  if (n == 0 || device.index() >= n)
    throw Error(who + ": device " + device.str() + " is not on this machine, which has " + cuda_devices_text() +
                (n == 0 ? "; train on the CPU (the default when no GPU is there)" : ""));
#if FASTCPP_HAS_CUDA
  if (!device.has_index()) return c10::Device(c10::kCUDA, c10::cuda::current_device());
#endif
  return device;
}

}  // namespace fastcpp
