#pragma once
// PyTorch's profiler (Kineto) over a window of training steps, from C++: a trace for
// chrome://tracing or Perfetto, and a summary a log can carry. On a GPU it sums the
// kernels (CUDA graphs' replays included) by name: how many a step launches and how much
// GPU time they take, which tells a host-bound step (GPU time well under the step's)
// from a kernel-bound one. On a CPU it sums the operators (inclusive times: an operator
// counts the ones it calls). Order 1001: last at every event.
//
//   learn.add_cb(ProfileSteps({.skip = 20, .steps = 10, .trace = "steps.json"}));
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "learner/callback.h"

namespace fastcpp {

struct ProfileSummary {
  struct Entry {
    std::string name;
    double ms_per_step = 0;
    int64_t count = 0;
  };
  int steps = 0;
  bool on_gpu = false;
  int64_t activities = 0;      // kernels and copies (GPU) or operators (CPU) in the window
  double gpu_ms_per_step = 0;  // the GPU activities' time, summed, per step
  double wall_ms_per_step = 0; // the window's own time per step
  std::vector<Entry> top;      // by time, the largest first
  std::string text() const;    // a line, then one per entry of `top`
};

// One profiled window: start(), then stop() once the work to see has run.
class ProfileWindow {
 public:
  explicit ProfileWindow(bool gpu);
  ~ProfileWindow();
  void start();
  // Writes the trace to `trace` (unless empty) and sums what ran, per step.
  ProfileSummary stop(const std::string& trace, int steps, size_t top = 15);
  bool running() const { return running_; }

 private:
  bool gpu_, running_ = false;
  std::chrono::steady_clock::time_point started_;
};

class ProfileSteps : public Callback {
 public:
  struct Options {
    int skip = 10;   // training steps before the window (kernels loaded, plans chosen, graphs recorded)
    int steps = 10;  // training steps in it (and what runs between them: an epoch's validation)
    std::string trace = "profile.json";
    size_t top = 15;
  };
  explicit ProfileSteps(Options options);
  void before_fit() override;
  void after_batch() override;
  void after_fit() override;
  void after_fit_failed() override { after_fit(); }
  // The window's summary, once it has closed; steps == 0 before.
  const ProfileSummary& summary() const { return summary_; }

 private:
  void open();
  void close(int steps);
  Options options_;
  std::unique_ptr<ProfileWindow> window_;
  int seen_ = 0;
  ProfileSummary summary_;
};

}  // namespace fastcpp
