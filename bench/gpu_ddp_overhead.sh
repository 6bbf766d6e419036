#!/usr/bin/env bash
# DistributedDataParallel's cost at world size 1 on NCCL: bench_train_step (ResNet-50,
# fp16, channels-last) plain and under to_distributed in a one-process NCCL group.
# PyTorch's own figure for this overhead is about 3%.
#
#   bench/gpu_ddp_overhead.sh [--build build]
set -euo pipefail
source "$(dirname "$0")/../scripts/command_line.sh"
build=build
while [ $# -gt 0 ]; do
  case "$1" in
    --*=*) set -- "${1%%=*}" "${1#*=}" "${@:2}" ;;
    --build) need_value "$@"; build=$2; shift 2 ;;
    *) other_flag "$@" ;;
  esac
done
bench=$build/bench/bench_train_step
args=(--arch resnet50 --precision fp16 --memory-format channels-last --steps 40)
plain=$("$bench" "${args[@]}")
echo "plain:       $plain"
grep -q "img/s" <<<"$plain" || exit 0  # skipped: no GPU
ddp=$(RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=29517 \
      "$bench" "${args[@]}" --distributed)
echo "distributed: $ddp"
awk -v a="$(awk '{print $5}' <<<"$plain")" -v b="$(awk '{print $5}' <<<"$ddp")" \
  'BEGIN {printf "DDP overhead at world size 1 (NCCL): %.2f%% (goal <= 3%%)\n", (a / b - 1) * 100}'
