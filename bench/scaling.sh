#!/usr/bin/env bash
# Data-parallel scaling of the Fashion-MNIST example: epoch time by batch size (per
# process) and number of processes under fastcpp-launch, on whatever this machine has.
#
#   bench/scaling.sh [--epochs 1] [--procs 1,2] [--bs 64,128]
#
# Prints the table: batch size x processes -> seconds per epoch, speed-up over 1 process.
set -euo pipefail
source "$(dirname "$0")/../scripts/command_line.sh"
cd "$(dirname "$0")/.."
epochs=1; procs=1,2; sizes=64,128
while [ $# -gt 0 ]; do
  case "$1" in
    --*=*) set -- "${1%%=*}" "${1#*=}" "${@:2}" ;;
    --epochs) need_count "$@"; epochs=$2; shift 2 ;;
    --procs) need_value "$@"; procs=$2; shift 2 ;;
    --bs) need_value "$@"; sizes=$2; shift 2 ;;
    *) other_flag "$@" ;;
  esac
done
[ -x build/examples/distributed_fashion_mnist ] || scripts/build.sh distributed_fashion_mnist fastcpp-launch
cores=$(nproc)
printf '%-8s %-10s %-14s %s\n' "bs/proc" "processes" "s per epoch" "speed-up"
for bs in ${sizes//,/ }; do
  base=""
  for n in ${procs//,/ }; do
    threads=$(( cores / n > 0 ? cores / n : 1 ))
    start=$(date +%s.%N)
    build/fastcpp-launch --nproc-per-node "$n" --master-port $((29600 + n)) \
      build/examples/distributed_fashion_mnist --epochs "$epochs" --bs "$bs" --threads "$threads" > /dev/null
    seconds=$(awk -v a="$(date +%s.%N)" -v b="$start" -v e="$epochs" 'BEGIN{print (a-b)/e}')
    [ -z "$base" ] && base=$seconds
    printf '%-8s %-10s %-14.1f %.2fx\n' "$bs" "$n" "$seconds" "$(awk -v a="$base" -v b="$seconds" 'BEGIN{print a/b}')"
  done
done
