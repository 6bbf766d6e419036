"""Compares the results dist_worker wrote (OUT.<rank>) for two runs of the same job.

    python same_results.py REFERENCE_BASE RESULT_BASE WORLD_SIZE

Each file holds [parameters, [valid_loss, accuracy], resumed_from, all_reduces]. Prints
the largest difference in parameters and metrics over all ranks and the epoch each run
resumed from; exits 1 when a difference is over 1e-6.
"""
import math
import sys

import torch


def load(path):
    with open(path, "rb") as f:
        return torch.load(f, weights_only=False)


def difference(a, b):
    "abs(a - b) at its largest; NaN anywhere counts as infinitely far."
    d = (torch.as_tensor(a, dtype=torch.float64) - torch.as_tensor(b, dtype=torch.float64)).abs().max().item()
    return math.inf if math.isnan(d) else d


def main():
    reference, result, world = sys.argv[1], sys.argv[2], int(sys.argv[3])
    largest, resumed = 0.0, []
    for rank in range(world):
        want, got = load(f"{reference}.{rank}"), load(f"{result}.{rank}")
        if len(want[0]) != len(got[0]):
            sys.exit(f"rank {rank}: {len(got[0])} parameters, the reference has {len(want[0])}")
        for a, b in zip(want[0], got[0]):
            largest = max(largest, difference(a, b))
        largest = max(largest, difference(want[1], got[1]))
        resumed.append(got[2])
    print(f"largest difference from the reference over {world} ranks: {largest:.3g} (resumed from epoch {max(resumed)})")
    sys.exit(0 if largest <= 1e-6 else 1)


if __name__ == "__main__":
    main()
