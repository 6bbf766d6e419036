#!/usr/bin/env bash
# fastcpp's Learner against PyTorch eager on this GPU: every cell of bench_train_step and
# of train_step_peer.py (same models, batches, precisions and layouts, in the same run),
# then one table with the ratio fastcpp / eager. The two sides alternate, round after
# round ($FASTCPP_BENCH_ROUNDS, default 3), and each cell's figure is the median of its
# rounds, so that the GPU's drift over the run falls on both sides alike. The table is
# printed after each round.
#
#   bench/gpu_train_step.sh [BUILD_DIR [PYTHON]] [-- options of both, e.g. --arch resnet50]
set -euo pipefail
source "$(dirname "$0")/../scripts/command_line.sh"
positional_only "$@"
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-build}
python=${2:-python3}
shift $(( $# < 2 ? $# : 2 ))
[ "${1:-}" = "--" ] && shift
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
rounds=${FASTCPP_BENCH_ROUNDS:-3}
# Per cell (arch, bs, precision, layout): the round of median speed, whole line.
median() {
  sort -k1,1 -k3,3 -k4,4 -k5,5g "$1" |
    awk -v n="$2" '{key = $1" "$3" "$4; count[key]++; if (count[key] == int((n + 1) / 2)) print}'
}
# Lines: arch bs precision layout img/s "img/s" "peak" MiB "MiB"
key() { awk '{print $1"/"$3"/"$4, $2, $5, $8}' "$1" | sort; }
rate() { awk -v a="$1" -v p="$2" -v l="$3" '$1 == a && $3 == p && $4 == l {print $5}' "$tmp/fastcpp"; }

# The table and the goals' figures over the rounds done so far.
report() {
  local done=$1
  median "$tmp/fastcpp_all" "$done" > "$tmp/fastcpp"
  median "$tmp/eager_all" "$done" > "$tmp/eager"
  echo
  echo "Medians of $done alternating rounds:"
  echo "| model | batch | precision | layout | fastcpp img/s | eager img/s | fastcpp / eager | fastcpp peak MiB | eager peak MiB |"
  echo "|---|---|---|---|---|---|---|---|---|"
  join <(key "$tmp/fastcpp") <(key "$tmp/eager") |
    awk '{split($1, k, "/"); printf "| %s | %s | %s | %s | %s | %s | %.2fx | %s | %s |\n", k[1], $2, k[2], k[3], $3, $6, $3 / $6, $4, $7}'
  # The figures the GPU issue sets goals for, from fastcpp's cells above.
  echo
  for arch in resnet18 resnet50; do
    fp32=$(rate $arch fp32 contiguous); fp16=$(rate $arch fp16 contiguous); best=$(rate $arch fp16 channels_last)
    if [ -n "$fp32" ] && [ -n "$fp16" ]; then
      awk -v a="$fp16" -v b="$fp32" -v n=$arch 'BEGIN {printf "%s: fp16 / fp32 (contiguous) %.2fx (goal for resnet50: >= 2x)\n", n, a / b}'
    fi
    if [ "$arch" = resnet50 ] && [ -n "$best" ]; then
      echo "resnet50 fp16 channels-last: $best img/s (goal on an H100: >= 4000 img/s)"
    fi
  done
  join <(key "$tmp/fastcpp") <(key "$tmp/eager") |
    awk '$6 > 0 {r = $3 / $6; if (!n++ || r < lo) {lo = r; cell = $1}}
         END {if (n) printf "slowest cell, fastcpp / eager: %.2fx (%s; goal: >= 1.0x in every cell)\n", lo, cell}'
  join <(key "$tmp/fastcpp") <(key "$tmp/eager") |
    awk '$7 > 0 {r = ($4 / $7 - 1) * 100; if (!n++ || r > hi) {hi = r; cell = $1}}
         END {if (n) printf "largest peak memory, fastcpp over eager: %+.1f%% (%s; goal: <= 1%% in every cell)\n", hi, cell}'
}

# After each round, so that a run cut short by a time limit still leaves a table.
for round in $(seq "$rounds"); do
  "$build/bench/bench_train_step" "$@" | tee -a "$tmp/fastcpp_all"
  grep -q "img/s" "$tmp/fastcpp_all" || exit 0  # skipped: no GPU
  "$python" "$here/train_step_peer.py" "$@" | tee -a "$tmp/eager_all"
  report "$round"
done
