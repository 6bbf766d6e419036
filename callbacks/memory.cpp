#include "callbacks/memory.h"

#include <torch/torch.h>

#include <cmath>
#include <fstream>
#include <string>

#include "learner/learner.h"
#include "learner/recorder.h"

#if FASTCPP_HAS_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#endif

namespace fastcpp {
namespace {

double status_mb(const char* field) {
  std::ifstream status("/proc/self/status");
  const std::string prefix = field;
  for (std::string line; std::getline(status, line);)
    if (line.rfind(prefix, 0) == 0) return std::stod(line.substr(prefix.size())) / 1024.0;
  return std::nan("");
}

bool reset_resident_peak() {
  std::ofstream clear_refs("/proc/self/clear_refs");
  return static_cast<bool>(clear_refs << "5" << std::flush);
}

constexpr double kMB = 1024.0 * 1024.0;

#if FASTCPP_HAS_CUDA
// Current and peak allocated bytes, in MB, summed over every GPU (the model's replicas
// and pipeline stages may be on several; an unused GPU adds 0). The allocator's
// counters are host-side: reading them neither syncs nor wakes an unused device.
std::pair<double, double> gpu_allocated_mb() {
  double current = 0, peak = 0;
  for (c10::DeviceIndex device = 0; device < static_cast<c10::DeviceIndex>(torch::cuda::device_count()); ++device) {
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device);
    const auto& allocated = stats.allocated_bytes[0];  // the aggregate over pool types
    current += static_cast<double>(allocated.current) / kMB;
    peak += static_cast<double>(allocated.peak) / kMB;
  }
  return {current, peak};
}

void reset_gpu_peaks() {
  for (c10::DeviceIndex device = 0; device < static_cast<c10::DeviceIndex>(torch::cuda::device_count()); ++device)
    c10::cuda::CUDACachingAllocator::resetPeakStats(device);
}
#endif

}  // namespace

double resident_mb() { return status_mb("VmRSS:"); }
double resident_peak_mb() { return status_mb("VmHWM:"); }

void PeakMemMetric::before_fit() {
  auto& recorder = *learn().recorder;
  recorder.add_column(*this, "cpu used", [this] { return cpu_used_; });
  recorder.add_column(*this, "cpu peak", [this] { return cpu_peak_; });
  recorder.add_column(*this, "gpu used", [this] { return gpu_used_; });
  recorder.add_column(*this, "gpu peak", [this] { return gpu_peak_; });
}

void PeakMemMetric::before_epoch() {
  cpu_peak_exact_ = reset_resident_peak();
  cpu_start_ = cpu_sampled_peak_ = resident_mb();
  batches_ = 0;
#if FASTCPP_HAS_CUDA
  if (learn().device.is_cuda()) {
    reset_gpu_peaks();
    gpu_start_ = gpu_allocated_mb().first;
  }
#endif
}

void PeakMemMetric::after_batch() {
  if (!cpu_peak_exact_ && ++batches_ % 16 == 0) cpu_sampled_peak_ = std::max(cpu_sampled_peak_, resident_mb());
}

void PeakMemMetric::after_epoch() {
  const double now = resident_mb();
  const double peak = cpu_peak_exact_ ? resident_peak_mb() : std::max(cpu_sampled_peak_, now);
  cpu_used_ = now - cpu_start_;
  cpu_peak_ = std::max(peak - cpu_start_, cpu_used_);
  gpu_used_ = gpu_peak_ = std::nan("");  // n/a unless on CUDA
#if FASTCPP_HAS_CUDA
  if (learn().device.is_cuda()) {
    const auto [current, device_peak] = gpu_allocated_mb();
    gpu_used_ = current - gpu_start_;
    gpu_peak_ = device_peak - gpu_start_;
  }
#endif
}

}  // namespace fastcpp
