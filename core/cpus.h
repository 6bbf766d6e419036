#pragma once
// How many cores this process may run on: its CPU affinity (taskset, a Slurm task's
// cpus, a container's cpuset), as Python's os.sched_getaffinity, which fastai's default
// worker count reads; the machine's count where the affinity is unknown.
namespace fastcpp {

int usable_cores();

}  // namespace fastcpp
