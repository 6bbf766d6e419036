#!/usr/bin/env bash
# to_parallel on this machine's GPUs: bench_train_step (ResNet-18 fp32, then ResNet-50
# fp16 channels-last) on one replica, on two replicas sharing cuda:0 (the overhead of the replica machinery),
# and on every GPU when there are several (the scaling). The two replicas on cuda:0 run twice,
# with BatchNorm synchronized (the default) and each replica's its own, and one replica runs
# the half batch a replica gets: what the synchronization costs, what the replication costs
# without it, and what the smaller batch alone costs the GPU are then told apart. The
# channels-last cell also runs synced by ATen's kernels (FASTCPP_SYNC_BN_KERNELS=aten), to
# compare with the library's.
#
#   bench/gpu_parallel.sh [--build build] [--traces DIR]
#
# With --traces: then the two-replica runs again under PyTorch's profiler, 3 steps each
# (traces and the kernels that took the most GPU time; one replica's too, to compare),
# after both goal figures, so that a time limit cuts the profiles first.
set -euo pipefail
source "$(dirname "$0")/../scripts/command_line.sh"
build=build traces=
while [ $# -gt 0 ]; do
  case "$1" in
    --*=*) set -- "${1%%=*}" "${1#*=}" "${@:2}" ;;
    --build) need_value "$@"; build=$2; shift 2 ;;
    --traces) need_value "$@"; traces=$2; shift 2 ;;
    *) other_flag "$@" ;;
  esac
done
bench=$build/bench/bench_train_step
rate() { awk '{print $5}' <<<"$1"; }
gpus=$(nvidia-smi -L 2>/dev/null | wc -l || true)
# The two cells with a goal: ResNet-18 fp32 and ResNet-50 fp16 channels-last (>= 0.85x).
cells=("resnet18 fp32 contiguous" "resnet50 fp16 channels-last")
for cell in "${cells[@]}"; do
  read -r arch precision layout <<<"$cell"
  args=(--arch "$arch" --precision "$precision" --memory-format "$layout" --steps 30)
  one=$("$bench" "${args[@]}")
  echo "1 replica:           $one"
  grep -q "img/s" <<<"$one" || exit 0  # skipped: no GPU
  shared=$("$bench" "${args[@]}" --parallel cuda:0,cuda:0)
  echo "2 replicas, 1 GPU:   $shared"
  awk -v a="$(rate "$one")" -v b="$(rate "$shared")" -v c="$arch $precision $layout" \
    'BEGIN {printf "to_parallel {cuda:0, cuda:0} %s: %.3fx the images/s of 1 replica (goal >= 0.85x)\n", c, b / a}'
  unsynced=$("$bench" "${args[@]}" --parallel cuda:0,cuda:0 --sync-bn off)
  echo "2 replicas, 1 GPU, BatchNorm unsynced: $unsynced"
  bs=$(awk '{print $2}' <<<"$one")
  half=$("$bench" "${args[@]}" --bs $((bs / 2)))
  echo "1 replica, half the batch: $half"
  awk -v a="$(rate "$one")" -v s="$(rate "$shared")" -v u="$(rate "$unsynced")" -v h="$(rate "$half")" \
    'BEGIN {printf "  of the 2 replicas: unsynced %.3fx 1 replica, synced %.3fx unsynced; 1 replica on half the batch %.3fx the whole\n", u / a, s / u, h / a}'
  if [ "$layout" = channels-last ]; then  # the synced layers ran the library's kernels: against ATen's
    aten=$(FASTCPP_SYNC_BN_KERNELS=aten "$bench" "${args[@]}" --parallel cuda:0,cuda:0)
    echo "2 replicas, 1 GPU, ATen's BatchNorm kernels: $aten"
    awk -v s="$(rate "$shared")" -v t="$(rate "$aten")" \
      'BEGIN {printf "  synced by the library'"'"'s channels-last kernels: %.3fx the images/s of ATen'"'"'s\n", s / t}'
  fi
  if [ "$gpus" -gt 1 ]; then
    every=$("$bench" "${args[@]}" --parallel all)
    echo "$gpus replicas, $gpus GPUs: $every"
    awk -v a="$(rate "$one")" -v b="$(rate "$every")" -v n="$gpus" \
      'BEGIN {printf "to_parallel on %d GPUs: %.2fx the images/s of 1 GPU (%.0f%% of linear)\n", n, b / a, b / a / n * 100}'
  fi
done
[ -n "$traces" ] || exit 0
for cell in "${cells[@]}"; do
  read -r arch precision layout <<<"$cell"
  profiled=(--arch "$arch" --precision "$precision" --memory-format "$layout" --warmup 10 --steps 3)
  "$bench" "${profiled[@]}" --profile "$traces/${arch}_${precision}_one.json"
  "$bench" "${profiled[@]}" --parallel cuda:0,cuda:0 --profile "$traces/${arch}_${precision}_shared.json"
done
