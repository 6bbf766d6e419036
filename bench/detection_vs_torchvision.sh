#!/usr/bin/env bash
# The detection race against torchvision's own training loop: examples/detection and the
# same job in PyTorch (bench/detection_torchvision.py), one after the other, on the same work:
#   - the same files: bench/make_detection_set.py's set (128 px photographs with shapes, COCO's
#     JSON, every fifth image validating; made first, not timed), read by both sides;
#   - the same model: RetinaNet on ResNet-18 (torchvision's, random weights) + an FPN of
#     --fpn channels, 9 anchors a cell, a head with GroupNorm (--head plain: without), focal
#     loss and l1 box loss; images as pixels / 255;
#   - fit_one_cycle at --lr (AdamW and OneCycleLR on torchvision's side, fastai's
#     settings), batch size 16, loading on the main thread (--workers 0, num_workers=0);
#   - each epoch the validation loss and COCO's AP and AP50 (pycocotools on torchvision's
#     side), nothing after the fit.
# Each side times its own training loop; the whole processes are timed too.
#
#   bench/detection_vs_torchvision.sh [--epochs 4] [--lr 1e-3] [--fpn 128] [--head group-norm] [--seed 42] [--threads 2] [--build DIR] [--python PY]
#
# An epoch of 640 images takes about 30 s on 2 cores (fastcpp). The last lines: "AP (and
# AP50) fastcpp A torchvision B" (percent), "whole processes: ... ratio W", "fastcpp/torchvision
# time ratio R" (the training loops).
set -euo pipefail
source "$(dirname "$0")/../scripts/command_line.sh"
cd "$(dirname "$0")/.."
root=$PWD
epochs=4
lr=1e-3
fpn=128
head=group-norm
seed=42
threads=$(nproc)
build=build
python=${FASTCPP_PYTHON:-$PWD/.venv/bin/python}
while [ $# -gt 0 ]; do
  case "$1" in
    --*=*) set -- "${1%%=*}" "${1#*=}" "${@:2}" ;;
    --epochs) need_count "$@"; epochs=$2; shift 2 ;;
    --fpn) need_count "$@"; fpn=$2; shift 2 ;;
    --head) need_value "$@"; head=$2; shift 2 ;;
    --seed) need_count "$@"; seed=$2; shift 2 ;;
    --lr) need_number "$@"; lr=$2; shift 2 ;;
    --threads) need_count "$@"; threads=$2; shift 2 ;;
    --build) need_value "$@"; build=$(realpath "$2"); shift 2 ;;
    --python) need_value "$@"; python=$2; shift 2 ;;
    *) other_flag "$@" ;;
  esac
done
[ -x "$build/examples/detection" ] || scripts/build.sh detection
build=$(realpath "$build")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

now() { date +%s.%N; }
seconds_since() { awk -v a="$(now)" -v b="$1" 'BEGIN{print a-b}'; }
"$python" bench/make_detection_set.py "$work/set" > /dev/null
start=$(now)
(cd "$work" && "$build/examples/detection" --set set --epochs "$epochs" --lr "$lr" --fpn "$fpn" --head "$head" \
   --seed "$seed" --threads "$threads" --bs 16 --workers 0) | tee "$work/cpp.txt"
cpp_seconds=$(seconds_since "$start")
start=$(now)
"$python" bench/detection_torchvision.py "$work/set" --epochs "$epochs" --lr "$lr" --fpn "$fpn" --head "$head" \
  --seed "$seed" --threads "$threads" --bs 16 | tee "$work/py.txt"
py_seconds=$(seconds_since "$start")
cpp_ap=$(grep -o 'final valid AP [0-9.]*' "$work/cpp.txt" | tail -1 | awk '{print $4}')
cpp_ap50=$(grep -o 'AP50 [0-9.]*' "$work/cpp.txt" | tail -1 | awk '{print $2}')
cpp_loop=$(grep -o 'training loop [0-9.]*' "$work/cpp.txt" | awk '{print $3}')
py_ap=$(grep -o ' ap=[0-9.]*' "$work/py.txt" | cut -d= -f2)
py_ap50=$(grep -o 'ap50=[0-9.]*' "$work/py.txt" | cut -d= -f2)
py_loop=$(grep -o 'loop_seconds=[0-9.]*' "$work/py.txt" | cut -d= -f2)
echo
printf 'training loops: fastcpp %6.1fs, torchvision %6.1fs (%d epochs, %d threads)\n' "$cpp_loop" "$py_loop" "$epochs" "$threads"
printf 'whole processes: fastcpp %6.1fs, torchvision %6.1fs\n' "$cpp_seconds" "$py_seconds"
awk -v a="$cpp_ap" -v b="$py_ap" 'BEGIN {printf "AP fastcpp %.2f torchvision %.2f\n", a * 100, b * 100}'
awk -v a="$cpp_ap50" -v b="$py_ap50" 'BEGIN {printf "AP50 fastcpp %.2f torchvision %.2f\n", a * 100, b * 100}'
awk -v a="$cpp_seconds" -v b="$py_seconds" 'BEGIN {printf "whole processes: fastcpp/torchvision time ratio %.3f\n", a / b}'
awk -v a="$cpp_loop" -v b="$py_loop" 'BEGIN {printf "fastcpp/torchvision time ratio %.3f\n", a / b}'
