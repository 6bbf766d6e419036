#!/usr/bin/env bash
# The race against fastai: examples/fashion_mnist and the same job in real fastai
# (bench/fashion_mnist_fastai.py: same net, batch, fit_one_cycle, epochs, threads), one
# after the other in one run. The last line is "fastcpp/fastai time ratio R".
#
#   bench/fashion_mnist_vs_fastai.sh [--epochs 5] [--threads 2] [--data DIR] [--build DIR] [--python PY]
#                                    [--memory-format channels-last|contiguous] [--seeds 42,1,2]   (both sides)
source "$(dirname "$0")/../scripts/command_line.sh"
for arg in "$@"; do
  case "$arg" in -h | --help) script_usage; exit 0 ;; esac  # this script's usage, not the one it runs
done
exec "$(dirname "$0")/fashion_mnist_vs_python.sh" --peer fastai "$@"
