#pragma once
// PeakMemMetric (order 49, before the Recorder): four columns per epoch, in MB, as
// fastai's: `cpu used` and `gpu used` (what the epoch added), `cpu peak` and
// `gpu peak` (the highest point above the epoch's start).
//   GPU: the CUDA caching allocator's exact allocated-bytes counters, peak reset at
//        each epoch, summed over every GPU (to_parallel's replicas, a pipeline's
//        stages); n/a when the learner is not on CUDA.
//   CPU: resident memory; the kernel's own high-water mark reset each epoch through
//        /proc/self/clear_refs (free and exact), or if that is refused, sampled every
//        16 batches.
#include "learner/callback.h"

namespace fastcpp {

class PeakMemMetric : public Callback {
 public:
  PeakMemMetric() { order = 49; }
  void before_fit() override;
  void before_epoch() override;
  void after_batch() override;
  void after_epoch() override;

 private:
  double cpu_start_ = 0, cpu_sampled_peak_ = 0, gpu_start_ = 0;
  bool cpu_peak_exact_ = false;
  double cpu_used_ = 0, cpu_peak_ = 0, gpu_used_ = 0, gpu_peak_ = 0;
  int batches_ = 0;
};

// Resident memory of this process in MB (VmRSS), and its high-water mark (VmHWM): the
// process's since a PeakMemMetric last reset it (each epoch), not since the start.
double resident_mb();
double resident_peak_mb();

}  // namespace fastcpp
