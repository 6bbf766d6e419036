#pragma once
// PyTorch's profiler (Kineto: host ops and CUDA kernels) over a window of steps, from
// C++: the trace for chrome://tracing or Perfetto, and a summary a log can carry (the
// kernels that took the most GPU time, and launches per step).
#include <torch/csrc/autograd/profiler_kineto.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

namespace bench {

class ProfileWindow {
 public:
  void start() {
    namespace prof = torch::autograd::profiler;
    const prof::ProfilerConfig config(torch::profiler::impl::ProfilerState::KINETO);
    const std::set<torch::profiler::impl::ActivityType> activities{torch::profiler::impl::ActivityType::CPU,
                                                                   torch::profiler::impl::ActivityType::CUDA};
    prof::prepareProfiler(config, activities);
    prof::enableProfiler(config, activities);
  }

  // Ends the window: writes the trace to `path`, prints the summary (the `top` kernels)
  // and returns the GPU time per step in ms.
  double stop(const std::string& path, int steps, size_t top = 15) {
    auto result = torch::autograd::profiler::disableProfiler();
    struct Total {
      uint64_t ns = 0;
      int64_t count = 0;
    };
    std::map<std::string, Total> kernels;
    uint64_t gpu_ns = 0;
    int64_t launches = 0;
    for (const auto& event : result->events()) {
      if (event.deviceType() != c10::DeviceType::CUDA) continue;
      auto& total = kernels[event.name().substr(0, 90)];
      total.ns += event.durationNs();
      ++total.count;
      gpu_ns += event.durationNs();
      ++launches;
    }
    result->save(path);
    std::vector<std::pair<std::string, Total>> sorted(kernels.begin(), kernels.end());
    std::sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) { return a.second.ns > b.second.ns; });
    std::printf("profile of %d steps (trace: %s): %lld GPU activities (%.0f per step), %.2f ms of GPU time per step\n",
                steps, path.c_str(), static_cast<long long>(launches), static_cast<double>(launches) / steps,
                static_cast<double>(gpu_ns) / 1e6 / steps);
    for (size_t i = 0; i < std::min(top, sorted.size()); ++i)
      std::printf("  %8.3f ms/step %6lld x  %s\n", static_cast<double>(sorted[i].second.ns) / 1e6 / steps,
                  static_cast<long long>(sorted[i].second.count), sorted[i].first.c_str());
    std::fflush(stdout);
    return static_cast<double>(gpu_ns) / 1e6 / steps;
  }
};

}  // namespace bench
