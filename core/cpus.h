#pragma once
// How many cores this process may run on: its CPU affinity (taskset, a Slurm task's
// cpus, a container's cpuset), as Python's os.sched_getaffinity, which fastai's default
// worker count reads; the machine's count where the affinity is unknown.
namespace fastcpp {

int usable_cores();

// This process's share of the usable cores when `local_processes` run on this machine:
// all of them when a launcher pinned each process to cores of its own (srun's
// --cpus-per-task, mpirun's binding), else the machine's cores split between the processes.
int cores_per_process(int local_processes);

}  // namespace fastcpp
