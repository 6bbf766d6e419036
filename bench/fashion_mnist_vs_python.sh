#!/usr/bin/env bash
# examples/fashion_mnist against the same model and job in Python, one after the other
# in one run, on the GPU when there is one: in plain PyTorch (fashion_mnist_peer.py) or
# in real fastai (--peer fastai: fashion_mnist_fastai.py; bench/fashion_mnist_vs_fastai.sh).
#
#   bench/fashion_mnist_vs_python.sh [--peer pytorch|fastai] [--epochs 5] [--threads 2] [--data DIR]
#                                    [--build DIR] [--python PY] [--memory-format channels-last|contiguous]
#                                    [--seeds 42,1,2]   (both sides, one run each; default 42)
#                                    [--resident on|off]  (both sides: the data on the GPU once, or
#                                     batches copied from the host; the PyTorch peer only)
#                                    [--graphs on|off]  (the example's training step as a CUDA graph)
#
# Defaults: Debian's Fashion-MNIST, build/, the project's .venv (or $FASTCPP_PYTHON), and
# each side's own default memory layout (the example's is channels-last, PyTorch's and
# fastai's contiguous); --memory-format sets the same layout on both sides.
# Prints both whole-process wall times and test accuracies (per seed, then summed and
# averaged over the seeds), the ratio of the training loops' own times, and last the
# ratio of the whole processes.
set -euo pipefail
source "$(dirname "$0")/../scripts/command_line.sh"
cd "$(dirname "$0")/.."
epochs=5
threads=$(nproc)
data=/usr/share/datasets/fashion-mnist
build=build
python=${FASTCPP_PYTHON:-$PWD/.venv/bin/python}
peer=pytorch
both=()  # flags given to both sides
ours=()  # flags given to the example only
seeds=42
while [ $# -gt 0 ]; do
  case "$1" in
    --*=*) set -- "${1%%=*}" "${1#*=}" "${@:2}" ;;
    --peer) need_value "$@"; peer=$2; shift 2 ;;
    --epochs) need_count "$@"; epochs=$2; shift 2 ;;
    --threads) need_count "$@"; threads=$2; shift 2 ;;
    --data) need_value "$@"; data=$(realpath "$2"); shift 2 ;;
    --build) need_value "$@"; build=$(realpath "$2"); shift 2 ;;
    --python) need_value "$@"; python=$2; shift 2 ;;
    --memory-format) need_value "$@"; both+=(--memory-format "$2"); shift 2 ;;
    --seeds) need_value "$@"; seeds=$2; shift 2 ;;
    --resident) need_value "$@"; both+=(--resident "$2"); shift 2 ;;
    --graphs) need_value "$@"; ours+=(--graphs "$2"); shift 2 ;;
    *) other_flag "$@" ;;
  esac
done
case "$peer" in
  pytorch) peer_name=PyTorch; peer_script=bench/fashion_mnist_peer.py; peer_tag=peer ;;
  fastai) peer_name=fastai; peer_script=bench/fashion_mnist_fastai.py; peer_tag=fastai ;;
  *) command_line_error "--peer takes pytorch or fastai, not $peer" ;;
esac
[ -x "$build/examples/fashion_mnist" ] || scripts/build.sh fashion_mnist
build=$(realpath "$build")

now() { date +%s.%N; }
seconds_since() { awk -v a="$(now)" -v b="$1" 'BEGIN{print a-b}'; }
log=$(mktemp -d)
trap 'rm -rf "$log"' EXIT
summary=()
for seed in ${seeds//,/ }; do
  start=$(now)
  (cd "$log" && "$build/examples/fashion_mnist" --epochs "$epochs" --threads "$threads" --data "$data" --seed "$seed" "${both[@]}" ${ours[@]+"${ours[@]}"}) | tee "$log/cpp.txt"
  cpp_seconds=$(seconds_since "$start")
  start=$(now)
  "$python" "$peer_script" --epochs "$epochs" --threads "$threads" --data "$data" --seed "$seed" "${both[@]}" | tee "$log/py.txt"
  py_seconds=$(seconds_since "$start")
  cpp_acc=$(grep -o 'final test accuracy: [0-9.]*' "$log/cpp.txt" | awk '{print $4}')
  py_acc=$(grep -o "^$peer_tag: accuracy=[0-9.]*" "$log/py.txt" | cut -d= -f2)
  # The training loops alone (validation included), as each side times its own; fastai's
  # script times its data loading and a second validation too, so only PyTorch's.
  cpp_loop=$(grep -o 'training time: [0-9.]*' "$log/cpp.txt" | awk '{print $3}')
  py_loop=
  [ "$peer" = pytorch ] && py_loop=$(grep -o "^peer: accuracy=[0-9.]* seconds=[0-9.]*" "$log/py.txt" | sed 's/.*seconds=//')
  summary+=("$seed $cpp_seconds $cpp_acc $py_seconds $py_acc ${cpp_loop:-0} ${py_loop:-0}")
done

# One line per seed, then the totals: the time ratio is total over total (the mean of the
# ratios where the runs take about as long), the accuracies are means. The training-time
# ratio leaves out both start-ups (loading the data, CUDA's and Python's) and what the
# example does after training (its pictures and checkpoint).
echo
printf '%s\n' "${summary[@]}" | awk -v peer="$peer_name" -v epochs="$epochs" -v threads="$threads" '
  { printf "seed %s: fastcpp %6.1fs accuracy %s, %s %6.1fs accuracy %s, ratio %.3f\n", $1, $2, $3, peer, $4, $5, $2 / $4
    cs += $2; ca += $3; ps += $4; pa += $5; cl += $6; pl += $7; n++ }
  END { printf "fastcpp  %6.1fs  accuracy %.4f\n", cs, ca / n
        printf "%-8s %6.1fs  accuracy %.4f  (%d epochs, %d threads, %d seed%s; times summed, accuracies averaged)\n", peer, ps, pa / n, epochs, threads, n, (n > 1 ? "s" : "")
        if (cl > 0 && pl > 0)
          printf "fastcpp/%s training-time ratio %.3f (the training loops alone: %.2fs vs %.2fs)\n", peer, cl / pl, cl, pl
        printf "fastcpp/%s time ratio %.3f\n", peer, cs / ps }'
