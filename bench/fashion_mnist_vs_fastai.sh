#!/usr/bin/env bash
# The race against fastai: examples/fashion_mnist and the same job in real fastai
# (bench/fashion_mnist_fastai.py: same net, batch, fit_one_cycle, epochs, threads), one
# after the other in one run. The last line is "fastcpp/fastai time ratio R".
#
#   bench/fashion_mnist_vs_fastai.sh [--epochs 5] [--threads 2] [--data DIR] [--build DIR] [--python PY]
#                                    [--memory-format channels-last|contiguous] [--seeds 42,1,2]   (both sides)
exec "$(dirname "$0")/fashion_mnist_vs_python.sh" --peer fastai "$@"
