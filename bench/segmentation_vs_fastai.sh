#!/usr/bin/env bash
# The segmentation race against fastai: examples/segmentation and the same job in real
# fastai (bench/segmentation_fastai.py: the same folders, split, batch size, U-Net on
# ResNet-18 with random weights, fit_one_cycle, epochs and threads), one after the
# other, whole-process wall times. The example writes the folders first (not timed).
#
#   bench/segmentation_vs_fastai.sh [--epochs 1] [--lr 3e-3] [--items 1200] [--threads 2] [--data DIR] [--build DIR] [--python PY]
#
# The encoder is torchvision's ResNet-18 on both sides (the example's --width 64, its
# ImageNet stem); an epoch of 960 images takes about 3 minutes on 2 cores.
#
# The last two lines: "mean IoU fastcpp A fastai B" (percent, void pixels left out)
# and "fastcpp/fastai time ratio R". Both sides train at --lr (default 3e-3).
set -euo pipefail
source "$(dirname "$0")/../scripts/command_line.sh"
cd "$(dirname "$0")/.."
root=$PWD
epochs=1
lr=3e-3
items=1200
threads=$(nproc)
data=${FASTCPP_FASHION_MNIST:-/usr/share/datasets/fashion-mnist}
build=build
python=${FASTCPP_PYTHON:-$PWD/.venv/bin/python}
while [ $# -gt 0 ]; do
  case "$1" in
    --*=*) set -- "${1%%=*}" "${1#*=}" "${@:2}" ;;
    --epochs) need_count "$@"; epochs=$2; shift 2 ;;
    --items) need_count "$@"; items=$2; shift 2 ;;
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
# The folders, once, outside the timings.
example=("$build/examples/segmentation" --data "$data" --items "$items" --width 64 --threads "$threads")
(cd "$work" && "${example[@]}" --epochs 0 > /dev/null)
start=$(now)
(cd "$work" && "${example[@]}" --epochs "$epochs" --lr "$lr" --export '') | tee "$work/cpp.txt"
cpp_seconds=$(seconds_since "$start")
start=$(now)
(cd "$work" && "$python" "$root/bench/segmentation_fastai.py" --epochs "$epochs" --lr "$lr" --threads "$threads") | tee "$work/py.txt"
py_seconds=$(seconds_since "$start")
cpp_iou=$(grep -o 'mean IoU [0-9.]*' "$work/cpp.txt" | tail -1 | awk '{print $3}')
py_iou=$(grep -o 'mean_iou=[0-9.]*' "$work/py.txt" | cut -d= -f2)
echo
printf 'fastcpp %6.1fs, fastai %6.1fs (%d epochs, %d threads)\n' "$cpp_seconds" "$py_seconds" "$epochs" "$threads"
awk -v a="$cpp_iou" -v b="$py_iou" 'BEGIN {printf "mean IoU fastcpp %.2f fastai %.2f\n", a * 100, b * 100}'
awk -v a="$cpp_seconds" -v b="$py_seconds" 'BEGIN {printf "fastcpp/fastai time ratio %.3f\n", a / b}'
