#include "callbacks/profiler.h"

#include <torch/csrc/autograd/profiler_kineto.h>
#include <torch/cuda.h>

#include <algorithm>
#include <cstdlib>
#include <cstdio>
#include <map>
#include <set>

#include "core/error.h"
#include "learner/learner.h"

namespace fastcpp {

namespace {

namespace prof = torch::autograd::profiler;
using torch::profiler::impl::ActivityType;

prof::ProfilerConfig kineto_config() { return prof::ProfilerConfig(torch::profiler::impl::ProfilerState::KINETO); }

std::set<ActivityType> activities(bool gpu) {
  if (gpu) return {ActivityType::CPU, ActivityType::CUDA};
  return {ActivityType::CPU};
}

// Every GPU's queued work done: the window holds what its steps launched, all of it.
void synchronize_gpus() {
  for (int64_t i = 0; i < static_cast<int64_t>(torch::cuda::device_count()); ++i) torch::cuda::synchronize(i);
}

}  // namespace

std::string ProfileSummary::text() const {
  char line[512];
  const double per_step = steps > 0 ? static_cast<double>(activities) / steps : 0.0;
  if (on_gpu)
    std::snprintf(line, sizeof line,
                  "profile of %d steps: %.0f GPU activities a step, %.2f ms of GPU time in %.2f ms a step", steps,
                  per_step, gpu_ms_per_step, wall_ms_per_step);
  else
    std::snprintf(line, sizeof line,
                  "profile of %d steps: %.0f operators in %.2f ms a step "
                  "(an operator's time includes the ones it calls)",
                  steps, per_step, wall_ms_per_step);
  std::string text = line;
  for (const auto& entry : top) {
    std::snprintf(line, sizeof line, "\n  %8.3f ms/step %6lld x  %s", entry.ms_per_step,
                  static_cast<long long>(entry.count), entry.name.c_str());
    text += line;
  }
  return text;
}

ProfileWindow::ProfileWindow(bool gpu) : gpu_(gpu) {}

ProfileWindow::~ProfileWindow() {
  if (running_) prof::disableProfiler();
}

void ProfileWindow::start() {
  if (running_) throw Error("ProfileWindow: start() while its window is open");
  // Kineto looks for GPUs when it starts and, on a machine without one, logs that as an
  // error ("gpuGetDeviceCount failed"): quiet there, unless the user set its level.
  if (!torch::cuda::is_available()) setenv("KINETO_LOG_LEVEL", "5", /*overwrite=*/0);
  prof::prepareProfiler(kineto_config(), activities(gpu_));
  prof::enableProfiler(kineto_config(), activities(gpu_));
  running_ = true;
  started_ = std::chrono::steady_clock::now();
}

ProfileSummary ProfileWindow::stop(const std::string& trace, int steps, size_t top) {
  if (!running_) throw Error("ProfileWindow: stop() without start()");
  running_ = false;
  const double wall_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started_).count();
  auto result = prof::disableProfiler();
  ProfileSummary summary;
  summary.steps = steps;
  summary.on_gpu = gpu_;
  summary.wall_ms_per_step = wall_ms / std::max(steps, 1);
  const auto wanted = gpu_ ? c10::DeviceType::CUDA : c10::DeviceType::CPU;
  std::map<std::string, ProfileSummary::Entry> by_name;
  uint64_t total_ns = 0;
  for (const auto& event : result->events()) {
    if (event.deviceType() != wanted) continue;
    auto& entry = by_name[event.name().substr(0, 100)];
    entry.ms_per_step += static_cast<double>(event.durationNs());
    ++entry.count;
    total_ns += event.durationNs();
    ++summary.activities;
  }
  if (!trace.empty()) result->save(trace);
  const double per_step = 1e6 * std::max(steps, 1);  // ns in a ms, times the steps
  if (gpu_) summary.gpu_ms_per_step = static_cast<double>(total_ns) / per_step;
  for (auto& [name, entry] : by_name) {
    entry.name = name;
    entry.ms_per_step /= per_step;
    summary.top.push_back(entry);
  }
  std::sort(summary.top.begin(), summary.top.end(),
            [](const auto& a, const auto& b) { return a.ms_per_step > b.ms_per_step; });
  if (summary.top.size() > top) summary.top.resize(top);
  return summary;
}

ProfileSteps::ProfileSteps(Options options) : options_(std::move(options)) {
  order = 1001;  // last at each event: the window holds whole steps, CudaGraphs' replays too
  if (options_.skip < 0 || options_.steps < 1)
    throw Error("ProfileSteps: skip must be >= 0 and steps >= 1 (got skip " + std::to_string(options_.skip) +
                ", steps " + std::to_string(options_.steps) + ")");
}

void ProfileSteps::before_fit() {
  seen_ = 0;
  summary_ = {};
  window_ = std::make_unique<ProfileWindow>(learn().device.is_cuda());
  if (options_.skip == 0) open();
}

// The window opens at the end of a training step and closes at the end of another: it
// holds whole steps, each with the loading of its batch.
void ProfileSteps::after_batch() {
  if (!learn().training) return;
  ++seen_;
  if (seen_ == options_.skip && !window_->running()) open();
  if (seen_ == options_.skip + options_.steps && window_->running()) close(options_.steps);
}

void ProfileSteps::after_fit() {
  if (window_ && window_->running()) close(seen_ - options_.skip);  // the fit ended inside the window
}

void ProfileSteps::open() {
  if (learn().device.is_cuda()) synchronize_gpus();  // none of the earlier steps' kernels
  window_->start();
}

void ProfileSteps::close(int steps) {
  if (learn().device.is_cuda()) synchronize_gpus();
  summary_ = window_->stop(options_.trace, steps, options_.top);
  learn().logger(summary_.text() + (options_.trace.empty() ? "" : "\n  (trace: " + options_.trace + ")"));
}

}  // namespace fastcpp
