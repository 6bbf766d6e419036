#!/usr/bin/env bash
# The segmentation race against fastai: examples/segmentation and the same job in real
# fastai (bench/segmentation_fastai.py), one after the other, on the same work:
#   - the same PNG folders (the example writes them first, not timed) and the same
#     validation files, an explicit list (every fifth image) both sides read;
#   - the same U-Net on torchvision's ResNet-18 (random weights; the example's --width 64
#     and ImageNet stem), fit_one_cycle at --lr, batch size 16 for training and
#     validation, loading on the main thread (--workers 0, num_workers=0), threads;
#   - the same metrics in the fit (Dice and IoU per class, void pixels left out) and no
#     pass after it (no export, no interpretation, no get_preds).
# Each side times its own training loop (fit_one_cycle); the whole processes are timed
# too and printed beside.
#
#   bench/segmentation_vs_fastai.sh [--epochs 1] [--lr 3e-3] [--items 1200] [--seed 42] [--threads 2] [--data DIR] [--build DIR] [--python PY]
#
# --seed draws the set, and seeds the weights and the shuffle on both sides.
#
# An epoch of 960 images takes about 2.5 minutes on 2 cores. The last lines: "mean IoU
# fastcpp A fastai B" (percent), "whole processes: fastcpp/fastai time ratio W" and
# "fastcpp/fastai time ratio R" (the training loops).
set -euo pipefail
source "$(dirname "$0")/../scripts/command_line.sh"
cd "$(dirname "$0")/.."
root=$PWD
epochs=1
lr=3e-3
items=1200
seed=42
threads=$(nproc)
data=${FASTCPP_FASHION_MNIST:-/usr/share/datasets/fashion-mnist}
build=build
python=${FASTCPP_PYTHON:-$PWD/.venv/bin/python}
while [ $# -gt 0 ]; do
  case "$1" in
    --*=*) set -- "${1%%=*}" "${1#*=}" "${@:2}" ;;
    --epochs) need_count "$@"; epochs=$2; shift 2 ;;
    --items) need_count "$@"; items=$2; shift 2 ;;
    --seed) need_count "$@"; seed=$2; shift 2 ;;
    --lr) need_number "$@"; lr=$2; shift 2 ;;
    --threads) need_count "$@"; threads=$2; shift 2 ;;
    --data) need_value "$@"; data=$(realpath "$2"); shift 2 ;;
    --build) need_value "$@"; build=$(realpath "$2"); shift 2 ;;
    --python) need_value "$@"; python=$2; shift 2 ;;
    *) other_flag "$@" ;;
  esac
done
[ -x "$build/examples/segmentation" ] || scripts/build.sh segmentation
build=$(realpath "$build")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

now() { date +%s.%N; }
seconds_since() { awk -v a="$(now)" -v b="$1" 'BEGIN{print a-b}'; }
# The folders, once, outside the timings, and the validation files: every fifth image.
example=("$build/examples/segmentation" --data "$data" --items "$items" --seed "$seed" --width 64 --threads "$threads" --bs 16
         --workers 0 --top-losses 0 --export '')
(cd "$work" && "${example[@]}" --epochs 0 > /dev/null)
ls "$work/segmentation_data/images" | sort | awk 'NR % 5 == 0' > "$work/valid.txt"
start=$(now)
(cd "$work" && "${example[@]}" --epochs "$epochs" --lr "$lr" --valid-list valid.txt) | tee "$work/cpp.txt"
cpp_seconds=$(seconds_since "$start")
start=$(now)
(cd "$work" && "$python" "$root/bench/segmentation_fastai.py" --epochs "$epochs" --lr "$lr" --seed "$seed" --threads "$threads" --bs 16 \
   --valid-list valid.txt) | tee "$work/py.txt"
py_seconds=$(seconds_since "$start")
cpp_iou=$(grep -o 'mean IoU [0-9.]*' "$work/cpp.txt" | tail -1 | awk '{print $3}')
cpp_loop=$(grep -o 'training loop [0-9.]*' "$work/cpp.txt" | awk '{print $3}')
py_iou=$(grep -o 'mean_iou=[0-9.]*' "$work/py.txt" | cut -d= -f2)
py_loop=$(grep -o 'loop_seconds=[0-9.]*' "$work/py.txt" | cut -d= -f2)
echo
printf 'training loops: fastcpp %6.1fs, fastai %6.1fs (%d epochs, %d threads)\n' "$cpp_loop" "$py_loop" "$epochs" "$threads"
printf 'whole processes: fastcpp %6.1fs, fastai %6.1fs\n' "$cpp_seconds" "$py_seconds"
awk -v a="$cpp_iou" -v b="$py_iou" 'BEGIN {printf "mean IoU fastcpp %.2f fastai %.2f\n", a * 100, b * 100}'
awk -v a="$cpp_seconds" -v b="$py_seconds" 'BEGIN {printf "whole processes: fastcpp/fastai time ratio %.3f\n", a / b}'
awk -v a="$cpp_loop" -v b="$py_loop" 'BEGIN {printf "fastcpp/fastai time ratio %.3f\n", a / b}'
