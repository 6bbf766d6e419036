#!/usr/bin/env bash
# bench/gpu_train_step.sh's protocol, checked without a GPU by stand-in servers for
# bench_train_step and the eager peer: one process per side for every round, the sides
# alternating cell by cell with the first side swapping each round, each cell's median
# over its rounds, a failed cell answered and left out, and a run cut by its time limit
# still printing the table of what it has.
#
#   tests/bench_alternation.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/build/bench"
export LOG=$tmp/log

# A stand-in answers each cell with the next of its rates (after $PAUSE seconds); "fail"
# is an error line.
stand_in() {
  cat > "$1" <<SERVER
#!/usr/bin/env bash
if [[ " \$* " == *" --list "* ]]; then printf 'resnet18 fp32 contiguous\nresnet50 fp16 channels-last\n'; exit; fi
echo "start $2" >> "\$LOG"
declare -A rates=([resnet18]="$3" [resnet50]="$4") round
while read -r arch precision layout; do
  echo "$2 \$arch" >> "\$LOG"
  sleep "\${PAUSE:-0}"
  round[\$arch]=\$(( \${round[\$arch]:-0} + 1 ))
  rate=\$(cut -d, -f\${round[\$arch]} <<<"\${rates[\$arch]}")
  if [ "\$rate" = fail ]; then echo "error: out of memory"; continue; fi
  echo "\$arch 256 \$precision \$layout \$rate img/s peak 100.0 MiB"
done
SERVER
  chmod +x "$1"
}
stand_in "$tmp/build/bench/bench_train_step" fastcpp 1000,3000,2000 1500,fail,500
stand_in "$tmp/python" eager 1000,1000,1000 1000,1000,1000

out=$(FASTCPP_BENCH_ROUNDS=3 bash "$root/bench/gpu_train_step.sh" --build "$tmp/build" --python "$tmp/python")
failed=0
expect() {
  if [ "$2" != "$3" ]; then
    printf 'bench_alternation: %s\n  expected: %s\n  got:      %s\n' "$1" "$3" "$2"
    failed=1
  fi
}
expect "servers started" "$(grep -c '^start' "$LOG")" 2
expect "order of the cells" "$(grep -v '^start' "$LOG" | tr '\n' ' ')" \
  "fastcpp resnet18 eager resnet18 fastcpp resnet50 eager resnet50 eager resnet18 fastcpp resnet18 eager resnet50 fastcpp resnet50 fastcpp resnet18 eager resnet18 fastcpp resnet50 eager resnet50 "
table=$(awk '/^Medians of 3/ {on = 1} on && /^\| resnet/' <<<"$out")
expect "the last table" "$table" "| resnet18 | 256 | fp32 | contiguous | 2000 | 1000 | 2.00x | 100.0 | 100.0 |
| resnet50 | 256 | fp16 | channels-last | 500 | 1000 | 0.50x | 100.0 | 100.0 |"
expect "the failed cell shown" "$(grep -c '^fastcpp: error: out of memory' <<<"$out")" 1
expect "the slowest cell" "$(grep '^slowest' <<<"$out" | tail -1)" \
  "slowest cell, fastcpp / eager: 0.500x (resnet50/fp16/channels-last; goal: >= 1.0x in every cell)"
# The limit's SIGTERM once ASKED cells have been asked for (with PAUSE s per answer),
# however slow this machine is; prints what the run printed.
cut_after() {
  LOG=$tmp/log_cut$1 PAUSE=$2 FASTCPP_BENCH_ROUNDS=3 bash "$root/bench/gpu_train_step.sh" --build "$tmp/build" --python "$tmp/python" > "$tmp/cut$1" &
  local run=$! asked
  for _ in $(seq 600); do
    asked=$(grep -vc '^start' "$tmp/log_cut$1" 2> /dev/null || true)
    [ "${asked:-0}" -ge "$1" ] && break
    sleep 0.05
  done
  kill -TERM "$run"
  wait "$run" || true
  cat "$tmp/cut$1"
}
# Cut once round 2 has begun: the table has round 1's cells, its goals say how few rounds.
cut=$(cut_after 5 0.2)
expect "a cut run says so" "$(grep -c '^(cut by its time limit in round' <<<"$cut")" 1
expect "a cut run's table" "$(awk '/^\(cut by/ {on = 1} on && /^\| resnet18/ {n++} END {print n + 0}' <<<"$cut")" 1
expect "a cut run's rounds" "$(grep '^slowest' <<<"$cut" | tail -1)" \
  "slowest cell, fastcpp / eager: 1.000x (resnet18/fp32/contiguous; 2 of 3 rounds; goal: >= 1.0x in every cell)"
# Cut in round 1 with one cell answered by both sides: a goal over every cell from one.
cut=$(cut_after 3 1)
expect "a goal from part of the cells" "$(grep '^slowest' <<<"$cut" | tail -1)" \
  "slowest cell, fastcpp / eager: 1.000x (resnet18/fp32/contiguous; only 1 of 2 cells; 1 of 3 rounds; goal: >= 1.0x in every cell)"
[ $failed -eq 0 ] && echo "bench_alternation: 2 servers, cells alternating, medians per cell, a cut run's table, its goals marked as partial"
exit $failed
