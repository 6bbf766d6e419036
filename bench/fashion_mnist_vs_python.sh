#!/usr/bin/env bash
# examples/fashion_mnist against the same model and job in Python, one after the other
# in one run, on the GPU when there is one: in plain PyTorch (fashion_mnist_peer.py) or
# in real fastai (--peer fastai: fashion_mnist_fastai.py; bench/fashion_mnist_vs_fastai.sh).
#
#   bench/fashion_mnist_vs_python.sh [--peer pytorch|fastai] [--epochs 5] [--threads 2] [--data DIR]
#                                    [--build DIR] [--python PY] [--memory-format channels-last|contiguous]
#                                    [--seed N]   (both sides; default 42)
#
# Defaults: Debian's Fashion-MNIST, build/, the project's .venv (or $FASTCPP_PYTHON), and
# each side's own default memory layout (the example's is channels-last, PyTorch's and
# fastai's contiguous); --memory-format sets the same layout on both sides.
# Prints both whole-process wall times and test accuracies, and last the ratio.
set -euo pipefail
cd "$(dirname "$0")/.."
epochs=5
threads=$(nproc)
data=/usr/share/datasets/fashion-mnist
build=build
python=${FASTCPP_PYTHON:-$PWD/.venv/bin/python}
peer=pytorch
layout=()
seed=42
while [ $# -gt 0 ]; do
  case "$1" in
    --peer) peer=$2; shift 2 ;;
    --epochs) epochs=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --data) data=$(realpath "$2"); shift 2 ;;
    --build) build=$(realpath "$2"); shift 2 ;;
    --python) python=$2; shift 2 ;;
    --memory-format) layout=(--memory-format "$2"); shift 2 ;;
    --seed) seed=$2; shift 2 ;;
    *) echo "unknown flag $1"; exit 2 ;;
  esac
done
case "$peer" in
  pytorch) peer_name=PyTorch; peer_script=bench/fashion_mnist_peer.py; peer_tag=peer ;;
  fastai) peer_name=fastai; peer_script=bench/fashion_mnist_fastai.py; peer_tag=fastai ;;
  *) echo "unknown --peer $peer (pytorch or fastai)"; exit 2 ;;
esac
[ -x "$build/examples/fashion_mnist" ] || scripts/build.sh fashion_mnist
build=$(realpath "$build")

now() { date +%s.%N; }
log=$(mktemp -d)
start=$(now)
(cd "$log" && "$build/examples/fashion_mnist" --epochs "$epochs" --threads "$threads" --data "$data" --seed "$seed" "${layout[@]}") | tee "$log/cpp.txt"
cpp_seconds=$(awk -v a="$(now)" -v b="$start" 'BEGIN{print a-b}')
start=$(now)
"$python" "$peer_script" --epochs "$epochs" --threads "$threads" --data "$data" --seed "$seed" "${layout[@]}" | tee "$log/py.txt"
py_seconds=$(awk -v a="$(now)" -v b="$start" 'BEGIN{print a-b}')

cpp_acc=$(grep -o 'final test accuracy: [0-9.]*' "$log/cpp.txt" | awk '{print $4}')
py_acc=$(grep -o "^$peer_tag: accuracy=[0-9.]*" "$log/py.txt" | cut -d= -f2)
echo
printf 'fastcpp  %6.1fs  accuracy %s\n' "$cpp_seconds" "$cpp_acc"
printf '%-8s %6.1fs  accuracy %s  (%d epochs, %d threads)\n' "$peer_name" "$py_seconds" "$py_acc" "$epochs" "$threads"
printf 'fastcpp/%s time ratio %.3f\n' "$peer_name" "$(awk -v a="$cpp_seconds" -v b="$py_seconds" 'BEGIN{print a/b}')"
rm -rf "$log"
