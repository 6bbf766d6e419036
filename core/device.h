#pragma once
// Devices: the default one and a check that a device asked for exists, for every layer
// that places tensors (Learner, DataLoader, to_parallel, pipelines).
#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <optional>
#include <string>
#include <vector>

namespace torch::nn {
class Module;
}

namespace fastcpp {

// CUDA when a GPU is there, else the CPU. In a run started by a launcher (LOCAL_RANK,
// SLURM_LOCALID or OMPI_COMM_WORLD_LOCAL_RANK set), the first call makes the local
// rank's GPU the current device (modulo the visible ones); then the current device.
c10::Device default_device();

// The local rank a launcher gave this process, if any.
std::optional<int> launcher_local_rank();

// The GPU of the process with this local rank: cuda:<local rank modulo the visible GPUs>
// (a launcher that gives each process one GPU through CUDA_VISIBLE_DEVICES leaves it
// cuda:0). Only where CUDA is.
c10::Device local_rank_gpu(int local_rank);

// Throws fastcpp::Error when `device` is not on this machine, naming `who` asked for it,
// the device, and what there is ("cuda:1 ... this machine has 1 CUDA device: cuda:0").
// Returns the device with its index (a bare `cuda` is the current GPU): a tensor names
// its device so, and a comparison with a bare `cuda` would never match.
c10::Device check_device(const c10::Device& device, const std::string& who);

// A small host tensor (random draws, indices) on `device` without stalling the host:
// on CUDA pinned and copied asynchronously, as a blocking copy from pageable memory
// would wait for the GPU's queue.
at::Tensor to_device_async(const at::Tensor& host, const c10::Device& device);

// Whether the current stream of `device` is being recorded into a CUDA graph: work
// queued now runs only when the graph is replayed, and the host may not wait for it.
bool recording_cuda_graph(const c10::Device& device);

// The memory of a CUDA device in bytes; 0 for any other device.
int64_t device_memory_bytes(const c10::Device& device);

// Devices from a command-line list: "cuda:0,cuda:1", "cpu,cpu"; "all" (or empty) gives
// none, which to_parallel reads as every CUDA device. A bad name is a fastcpp::Error.
std::vector<c10::Device> parse_devices(const std::string& list);

// "no CUDA device" / "1 CUDA device (cuda:0)" / "2 CUDA devices (cuda:0..cuda:1)".
std::string cuda_devices_text();

// The devices `module`'s parameters and buffers are on, in order of first appearance:
// more than one for a model split across devices (a Pipeline's stages).
std::vector<c10::Device> devices_of(const torch::nn::Module& module);
// "cuda:0 and cuda:1", "cpu, cuda:0 and cuda:1".
std::string devices_text(const std::vector<c10::Device>& devices);

}  // namespace fastcpp
