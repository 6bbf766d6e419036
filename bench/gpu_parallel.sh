#!/usr/bin/env bash
# to_parallel on this machine's GPUs: bench_train_step (ResNet-50, fp16, channels-last)
# on one replica, on two replicas sharing cuda:0 (the overhead of the replica machinery),
# and on every GPU when there are several (the scaling).
#
#   bench/gpu_parallel.sh [BUILD_DIR]
set -euo pipefail
bench=${1:-build}/bench/bench_train_step
args=(--arch resnet50 --precision fp16 --layout channels_last --steps 30)
rate() { awk '{print $5}' <<<"$1"; }
one=$("$bench" "${args[@]}")
echo "1 replica:           $one"
grep -q "img/s" <<<"$one" || exit 0  # skipped: no GPU
shared=$("$bench" "${args[@]}" --parallel cuda:0,cuda:0)
echo "2 replicas, 1 GPU:   $shared"
awk -v a="$(rate "$one")" -v b="$(rate "$shared")" \
  'BEGIN {printf "to_parallel {cuda:0, cuda:0}: %.2fx the images/s of 1 replica (overhead %.1f%%)\n", b / a, (a / b - 1) * 100}'
gpus=$(nvidia-smi -L | wc -l)
if [ "$gpus" -gt 1 ]; then
  every=$("$bench" "${args[@]}" --parallel all)
  echo "$gpus replicas, $gpus GPUs: $every"
  awk -v a="$(rate "$one")" -v b="$(rate "$every")" -v n="$gpus" \
    'BEGIN {printf "to_parallel on %d GPUs: %.2fx the images/s of 1 GPU (%.0f%% of linear)\n", n, b / a, b / a / n * 100}'
fi
