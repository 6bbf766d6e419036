#!/usr/bin/env bash
# fastcpp's Learner against PyTorch eager on this GPU: every cell of bench_train_step and
# of train_step_peer.py (same models, batches, precisions and layouts, in the same run),
# then one table with the ratio fastcpp / eager. Each side is one process for the whole
# run (bench_train_step --serve, train_step_peer.py --serve), so cuDNN's plans are
# searched once per cell, not once per round. The two alternate cell by cell, the first
# side swapping each round, over $FASTCPP_BENCH_ROUNDS rounds (default 3); each cell's
# figure is the median of its rounds, so that the GPU's drift over the run falls on both
# sides alike. The table is printed after each round, and when a time limit cuts the run
# (SIGTERM), with the cells it has.
#
#   bench/gpu_train_step.sh [--build build] [--python python3] [--graphs] [-- options of both, e.g. --arch resnet50]
#   (--graphs: fastcpp's step recorded as a CUDA graph and replayed, learn.to_graphs(); the
#   goal lines then start "with to_graphs," and allow 5% more peak memory for the graphs' pools)
set -euo pipefail
source "$(dirname "$0")/../scripts/command_line.sh"
here=$(cd "$(dirname "$0")" && pwd)
build=build python=python3
ours=() label="" memory_goal=1  # --graphs: fastcpp's step as a CUDA graph (the peer stays eager)
while [ $# -gt 0 ]; do
  case "$1" in
    --) shift; break ;;
    --*=*) set -- "${1%%=*}" "${1#*=}" "${@:2}" ;;
    --build) need_value "$@"; build=$2; shift 2 ;;
    --python) need_value "$@"; python=$2; shift 2 ;;
    --graphs) ours=(--graphs); label="with to_graphs, "; memory_goal=5; shift ;;
    *) other_flag "$@" ;;
  esac
done
tmp=$(mktemp -d)
trap 'kill $(jobs -p) 2> /dev/null; rm -rf "$tmp"' EXIT  # the servers end with this script
rounds=${FASTCPP_BENCH_ROUNDS:-3}
# Per cell (arch, bs, precision, layout): the line of its median speed, over the rounds it has.
median() {
  sort -k1,1 -k3,3 -k4,4 -k5,5g "$1" |
    awk '{key = $1" "$3" "$4; line[key, ++n[key]] = $0} END {for (k in n) print line[k, int((n[k] + 1) / 2)]}'
}
# Lines: arch bs precision layout img/s "img/s" "peak" MiB "MiB"
key() { awk '{print $1"/"$3"/"$4, $2, $5, $8}' "$1" | sort; }
rate() { awk -v a="$1" -v p="$2" -v l="$3" '$1 == a && $3 == p && $4 == l {print $5}' "$tmp/fastcpp"; }

# The table and the goals' figures over the rounds done so far.
report() {
  median "$tmp/fastcpp_all" > "$tmp/fastcpp"
  median "$tmp/eager_all" > "$tmp/eager"
  echo
  echo "Medians of $1 round$([ "$1" -eq 1 ] || echo s) alternating cell by cell (rounds took ${round_times# }):"
  echo "| model | batch | precision | layout | fastcpp img/s | eager img/s | fastcpp / eager | fastcpp peak MiB | eager peak MiB |"
  echo "|---|---|---|---|---|---|---|---|---|"
  join <(key "$tmp/fastcpp") <(key "$tmp/eager") > "$tmp/joined"  # the cells both sides timed
  awk '{split($1, k, "/"); printf "| %s | %s | %s | %s | %s | %s | %.2fx | %s | %s |\n", k[1], $2, k[2], k[3], $3, $6, $3 / $6, $4, $7}' "$tmp/joined"
  # The figures with goals, from fastcpp's cells above. A goal over every cell, read off
  # part of them (a run cut by its limit), says so: not met.
  local joined total partial=""
  joined=$(wc -l < "$tmp/joined")
  total=$(grep -c . <<<"$cells")
  [ "$joined" -lt "$total" ] && partial="only $joined of $total cells; "
  [ "$1" -lt "$rounds" ] && partial="$partial$1 of $rounds rounds; "
  echo
  for arch in resnet18 resnet50; do
    fp32=$(rate $arch fp32 contiguous); fp16=$(rate $arch fp16 contiguous); best=$(rate $arch fp16 channels-last)
    if [ -n "$fp32" ] && [ -n "$fp16" ]; then
      goal=""; [ "$arch" = resnet50 ] && goal=" (goal: >= 2x)"
      awk -v a="$fp16" -v b="$fp32" -v n=$arch -v g="$goal" 'BEGIN {printf "%s: fp16 / fp32 (contiguous) %.3fx%s\n", n, a / b, g}'
    fi
    if [ "$arch" = resnet50 ] && [ -n "$best" ]; then
      echo "resnet50 fp16 channels-last: $best img/s (goal on an H100: >= 4000 img/s)"
    fi
  done
  awk -v partial="$partial" -v label="$label" '$6 > 0 {r = $3 / $6; if (!n++ || r < lo) {lo = r; cell = $1}}
         END {if (n) printf "%sslowest cell, fastcpp / eager: %.3fx (%s; %sgoal: >= 1.0x in every cell)\n", label, lo, cell, partial}' "$tmp/joined"
  awk -v partial="$partial" -v label="$label" -v goal="$memory_goal" '$7 > 0 {r = ($4 / $7 - 1) * 100; if (!n++ || r > hi) {hi = r; cell = $1}}
         END {if (n) printf "%slargest peak memory, fastcpp over eager: %+.2f%% (%s; %sgoal: <= %d%% in every cell)\n", label, hi, cell, partial, goal}' "$tmp/joined"
}

cells=$("$build/bench/bench_train_step" --list "$@" ${ours[@]+"${ours[@]}"})
# The two servers, each reading cells from a pipe and answering on another.
mkfifo "$tmp/fastcpp.in" "$tmp/fastcpp.out" "$tmp/eager.in" "$tmp/eager.out"
"$build/bench/bench_train_step" --serve "$@" ${ours[@]+"${ours[@]}"} < "$tmp/fastcpp.in" > "$tmp/fastcpp.out" &
"$python" "$here/train_step_peer.py" --serve "$@" < "$tmp/eager.in" > "$tmp/eager.out" &
exec 3> "$tmp/fastcpp.in" 4< "$tmp/fastcpp.out" 5> "$tmp/eager.in" 6< "$tmp/eager.out"
trap '' PIPE  # a server that has ended is an answer below, not the end of this script

# ask SIDE CELL: the side's line for the cell (shown with the seconds it took, set-up and
# warm-up included), kept when it is a figure.
ask() {
  local in=3 out=4 answer started=$SECONDS
  [ "$1" = eager ] && in=5 out=6
  echo "$2" >&"$in" 2> /dev/null || true
  IFS= read -r answer <&"$out" || answer="error: the $1 server ended"
  printf '%-9s%s (%d s)\n' "$1:" "$answer" $((SECONDS - started))
  case $answer in
    *" img/s "*) echo "$answer" >> "$tmp/$1_all" ;;
    *"skipped: no CUDA device"*) exit 0 ;;
  esac
}

: > "$tmp/fastcpp_all"
: > "$tmp/eager_all"
round_times=""
round=1
trap 'echo "(cut by its time limit in round $round)"; report "$round"; exit 124' TERM
for round in $(seq "$rounds"); do
  started=$SECONDS
  sides=(fastcpp eager)
  [ $((round % 2)) -eq 0 ] && sides=(eager fastcpp)
  while read -r cell; do
    ask "${sides[0]}" "$cell"
    ask "${sides[1]}" "$cell"
  done <<<"$cells"
  round_times+="${round_times:+,} $((SECONDS - started)) s"
  report "$round"
done
