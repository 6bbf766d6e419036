#!/usr/bin/env bash
# fastcpp's Learner against PyTorch eager on this GPU: every cell of bench_train_step and
# of train_step_peer.py (same models, batches, precisions and layouts, in the same run),
# then one table with the ratio fastcpp / eager.
#
#   bench/gpu_train_step.sh [BUILD_DIR [PYTHON]] [-- options of both, e.g. --arch resnet50]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-build}
python=${2:-python3}
shift $(( $# < 2 ? $# : 2 ))
[ "${1:-}" = "--" ] && shift
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$build/bench/bench_train_step" "$@" | tee "$tmp/fastcpp"
"$python" "$here/train_step_peer.py" "$@" | tee "$tmp/eager"
grep -q "img/s" "$tmp/fastcpp" || exit 0  # skipped: no GPU
# Lines: arch bs precision layout img/s "img/s" "peak" MiB "MiB"
key() { awk '{print $1"/"$3"/"$4, $2, $5, $8}' "$1" | sort; }
echo
echo "| model | batch | precision | layout | fastcpp img/s | eager img/s | fastcpp / eager | fastcpp peak MiB | eager peak MiB |"
echo "|---|---|---|---|---|---|---|---|---|"
join <(key "$tmp/fastcpp") <(key "$tmp/eager") |
  awk '{split($1, k, "/"); printf "| %s | %s | %s | %s | %s | %s | %.2fx | %s | %s |\n", k[1], $2, k[2], k[3], $3, $6, $3 / $6, $4, $7}'
