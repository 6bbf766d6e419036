#!/usr/bin/env bash
# The benchmark history: runs the cheap CPU ratio benchmarks and appends one line per
# benchmark to bench/history.tsv (committed), so that a slip shows on the day it lands.
# Run it on a quiet machine before submitting a change to the training path, and commit
# the lines it adds; compare a ratio with earlier lines from the same machine (cores and
# CPU model are on every line). --runs 3 measures the machine's noise: the spread of one
# commit's ratios.
#
#   bench/history.sh [--runs 1] [--benches race-pytorch,race-fastai,learner,loader]
#                    [--build DIR] [--python PY] [--data DIR] [--images DIR] [--file F]
#
# race-pytorch, race-fastai: examples/fashion_mnist against its PyTorch and fastai peers,
#   1 epoch, 2 threads, whole-process seconds (bench/fashion_mnist_vs_python.sh)
# learner: bench_learner_overhead, the Learner against a bare loop (two lines: small CNN,
#   MLP), seconds
# loader: bench_loader against PyTorch's DataLoader, 224 px JPEGs, 2 workers, images/s
#   (the folders are made once in --images, default $TMPDIR/fastcpp-bench-images)
# Each line: date, commit (with -dirty for uncommitted code changes), cores, CPU model, bench,
# fastcpp's figure, the peer's, their unit and the ratio fastcpp/peer (for seconds lower
# is better, for images/s higher).
set -euo pipefail
source "$(dirname "$0")/../scripts/command_line.sh"
cd "$(dirname "$0")/.."
runs=1
benches=race-pytorch,race-fastai,learner,loader
build=build
python=${FASTCPP_PYTHON:-$PWD/.venv/bin/python}
data=/usr/share/datasets/fashion-mnist
images=${TMPDIR:-/tmp}/fastcpp-bench-images
file=bench/history.tsv
while [ $# -gt 0 ]; do
  case "$1" in
    --*=*) set -- "${1%%=*}" "${1#*=}" "${@:2}" ;;
    --runs) need_count "$@"; runs=$2; shift 2; [ "$runs" -ge 1 ] || command_line_error "--runs takes 1 or more" ;;
    --benches) need_value "$@"; benches=$2; shift 2 ;;
    --build) need_value "$@"; build=$2; shift 2 ;;
    --python) need_value "$@"; python=$2; shift 2 ;;
    --data) need_value "$@"; data=$2; shift 2 ;;
    --images) need_value "$@"; images=$2; shift 2 ;;
    --file) need_value "$@"; file=$2; shift 2 ;;
    *) other_flag "$@" ;;
  esac
done
for bench in ${benches//,/ }; do
  case "$bench" in
    race-pytorch | race-fastai | learner | loader) ;;
    *) command_line_error "--benches takes race-pytorch, race-fastai, learner and loader, not $bench" ;;
  esac
done

commit=$(git rev-parse --short HEAD)
git diff --quiet HEAD -- . ':!*.md' ':!bench/history.tsv' || commit+=-dirty  # code changed, not just documents
cpu=$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)
[ -s "$file" ] || printf 'date\tcommit\tcores\tcpu\tbench\tfastcpp\tpeer\tunit\tratio\n' > "$file"
log=$(mktemp)
trap 'rm -f "$log"' EXIT

# record BENCH FASTCPP PEER UNIT: one line in the history, and on the screen.
record() {
  local line
  line=$(printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%.3f' "$(date -u +%Y-%m-%dT%H:%M)" "$commit" "$(nproc)" "$cpu" \
    "$1" "$2" "$3" "$4" "$(awk -v a="$2" -v b="$3" 'BEGIN { print a / b }')")
  echo "$line" >> "$file"
  echo "history: $line"
}

race() {  # race PEER
  bench/fashion_mnist_vs_python.sh --peer "$1" --epochs 1 --threads 2 --data "$data" --build "$build" \
    --python "$python" > "$log" 2>&1 || { cat "$log"; exit 1; }
  local cpp peer
  cpp=$(awk '$1 == "fastcpp" && $3 == "accuracy" { sub(/s$/, "", $2); print $2 }' "$log")
  peer=$(grep -E '^(PyTorch|fastai) +[0-9.]+s +accuracy' "$log" | awk '{ sub(/s$/, "", $2); print $2 }')
  record "race-$1" "$cpp" "$peer" s
}

learner() {
  "$build/bench/bench_learner_overhead" --threads 2 > "$log" 2>&1 || { cat "$log"; exit 1; }
  # "small CNN, bs 128  bare 1.234s  learner 1.240s  ratio learner/bare 1.005"
  while read -r name learner bare; do
    record "learner-$name" "$learner" "$bare" s
  done < <(awk '/ratio learner\/bare/ {
    name = ($0 ~ /^MLP/) ? "mlp" : "cnn"
    for (i = 1; i < NF; i++) { if ($i == "bare") bare = $(i + 1); if ($i == "learner") learner = $(i + 1) }
    sub(/s$/, "", bare); sub(/s$/, "", learner); print name, learner, bare }' "$log")
}

loader() {
  [ -d "$images/photos" ] || "$python" bench/make_image_folders.py "$images" --small 0 --workers 2 > /dev/null
  "$build/bench/bench_loader" "$images/photos" --workers 2 --size 224 > "$log" 2>&1 || { cat "$log"; exit 1; }
  local ours theirs
  ours=$(awk '$1 == "fastcpp:" { print $2; exit }' "$log")
  theirs=$(awk '/^PyTorch DataLoader/ { for (i = 1; i < NF; i++) if ($(i + 1) == "images/s,") print $i }' "$log")
  record loader "$ours" "$theirs" images/s
}

for ((run = 1; run <= runs; run++)); do
  for bench in ${benches//,/ }; do
    case "$bench" in
      race-pytorch) race pytorch ;;
      race-fastai) race fastai ;;
      learner) learner ;;
      loader) loader ;;
    esac
  done
done
