#pragma once
// How the process's malloc treats the memory a training step frees. glibc hands large
// blocks back to the system (munmap, heap trimming) as soon as they are freed, so each
// step's activations and gradients come back as fresh pages, which the kernel zeroes one
// page fault at a time: in one epoch of the segmentation example, 3.4 million faults and
// 10% of the run. Keeping freed memory for the next step takes that away; the process
// then holds on to its peak (which a training process reaches every step anyway).

namespace fastcpp {

// From now on, freed memory stays in the process (glibc: no mmap'd blocks, no trimming).
// Done once per process; Learner calls it when it is built. Nothing happens where the
// C library is not glibc, or when FASTCPP_MALLOC=system is set in the environment.
// Returns whether the setting is in force.
bool keep_freed_host_memory();

}  // namespace fastcpp
