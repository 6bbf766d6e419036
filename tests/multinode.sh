#!/usr/bin/env bash
# Multi-node training on one machine: three hosts (network namespaces with their own
# host names, tests/multinode/hosts.sh) on one switch. Ranks 0-1 run on node0, ranks 2-3
# on node1; outsider is a host outside the job. Every run must end with the parameters
# and metrics of the same 4-process job on one host.
#
#   tests/multinode.sh BUILD_DIR PYTHON
#
#  1. fastcpp-launch on each node (--nnodes 2 --node-rank R --master-addr node0):
#     the store listens on node0's address alone (ss), and an outsider feeding the store
#     port garbage neither crashes nor stalls rank 0;
#  2. torchrun's multi-node form (static rendezvous);
#  3. node1 killed mid-epoch with restarts: node0's launcher restarts its group, node1
#     comes back, and the job resumes from the last checkpoint;
#  4. without restarts: killing node1 (then, in a second job, node0) makes every
#     surviving rank exit non-zero within the timeout, naming the lost rank and host;
#  5. 50 ms of latency and 1% loss each way on node1's link: equal results, and the
#     slowdown printed.
# Needs root and iproute2; exits 77 (skipped) without them. Bounded: every job runs
# under a timeout and the hosts are removed on exit.
set -euo pipefail
build=$(cd "$1" && pwd)
python=$2
here=$(cd "$(dirname "$0")" && pwd)
launch="$build/fastcpp-launch"
worker="$build/tests/dist_worker"
work=$(mktemp -d)

if [ "$(id -u)" -ne 0 ] || ! command -v ip >/dev/null || ! ip netns add "fcmn-probe$$" 2>/dev/null; then
  echo "multinode: skipped (needs root and iproute2 to make network namespaces)"
  exit 77
fi
ip netns del "fcmn-probe$$"

HOSTS_PYTHON=$python
source "$here/multinode/hosts.sh"
finish() {
  hosts_destroy
  rm -rf "$work"
}
trap finish EXIT
hosts_create node0 node1 outsider
master=node0  # by name: the store resolves it to the one address it listens on
master_address=$(host_address node0)
port=29400
failures=0

check() {  # DESCRIPTION COMMAND...: runs the command, prints ok/FAILED
  local what=$1
  shift
  if "$@"; then
    echo "ok: $what"
  else
    echo "FAILED: $what"
    failures=$((failures + 1))
  fi
}

same_as_reference() {  # RESULT_BASE
  "$python" "$here/multinode/same_results.py" "$work/reference" "$1" 4
}

# Starts fastcpp-launch for a 2x2 job on HOST in the background; its pid in $!.
launch_on() {  # HOST NODE_RANK LOG PORT [LAUNCHER ARGS...] -- PROGRAM ARGS...
  local host=$1 node_rank=$2 log=$3 job_port=$4
  shift 4
  on "$host" timeout 120 "$launch" --nnodes 2 --node-rank "$node_rank" --nproc-per-node 2 \
    --master-addr "$master" --master-port "$job_port" "$@" >"$log" 2>&1 &
}

# Waits for background pids; sets `codes` to their exit statuses, joined.
wait_all() {
  local pid code
  codes=""
  for pid in "$@"; do
    code=0
    wait "$pid" || code=$?
    codes="$codes$code"
  done
}

seconds_since() { awk "BEGIN { printf \"%.1f\", $(date +%s.%N) - $1 }"; }

# Starts the 2x2 job on node0 and node1 on a new port, in the background: its pids in
# node_pids, its logs NAME0.log and NAME1.log, its results NAME.<rank>.
start_job() {  # NAME MODE [LAUNCHER ARGS...]
  local name=$1 mode=$2 rank
  shift 2
  port=$((port + 1))
  node_pids=()
  for rank in 0 1; do
    launch_on "node$rank" "$rank" "$work/$name$rank.log" "$port" "$@" -- "$worker" "$mode" "$work/$name"
    node_pids+=($!)
  done
}

# Runs the job to its end: `codes` and `job_seconds` set.
timed_job() {  # NAME MODE
  local started
  started=$(date +%s.%N)
  start_job "$@"
  wait_all "${node_pids[@]}"
  job_seconds=$(seconds_since "$started")
}

echo "== reference: the 4-process job on one host"
on node0 timeout 120 "$launch" --nproc-per-node 4 --master-port "$port" "$worker" ddp "$work/reference"

echo "== 1. fastcpp-launch on two nodes; an outsider writes garbage to the store port"
FASTCPP_WORKER_STEP_MS=300 start_job launch checkpointed
# Once both nodes' ranks have formed the group: each has a Gloo listener and a probe
# socket, node0 the store as well. None may listen on every interface.
for host in node0 node1; do
  for _ in $(seq 150); do
    [ "$(on "$host" ss -Hltn | wc -l)" -ge 4 ] && break
    sleep 0.1
  done
  listeners=$(on "$host" ss -Hltn)
  echo "$listeners" | sed "s/^/  $host listens: /"
  check "every listener on $host is on its address $(host_address "$host") (none on 0.0.0.0, [::] or *)" \
    bash -c '[ "$(wc -l <<<"$1")" -ge 4 ] && ! grep -vq " $2:[0-9]* " <<<"$1"' _ "$listeners" "$(host_address "$host")"
  [ "$host" = node0 ] && check "the store listens on $master_address:$port" grep -q "$master_address:$port " <<<"$listeners"
done
on outsider timeout 60 "$python" "$here/multinode/store_garbage.py" "$master_address" "$port" >"$work/garbage.log" 2>&1 &
garbage=$!
wait_all "${node_pids[@]}"
kill $garbage 2>/dev/null || true
sed 's/^/  /' "$work/garbage.log"
# The store exists only while the job runs: all 30 accepted means it took them mid-job.
check "the store accepted the outsider's 30 garbage connections" grep -q "30 of 30 connections accepted" "$work/garbage.log"
check "both nodes end with exit status 0 (got $codes)" [ "$codes" = "00" ]
check "fastcpp-launch on two nodes: results equal the one-host run" same_as_reference "$work/launch"

echo "== 2. torchrun's multi-node form"
port=$((port + 1))
for rank in 0 1; do
  on "node$rank" timeout 120 "$python" -m torch.distributed.run --nnodes 2 --node-rank $rank --nproc-per-node 2 \
    --master-addr "$master" --master-port "$port" --no-python "$worker" ddp "$work/torchrun" \
    >"$work/torchrun$rank.log" 2>&1 &
  eval "torchrun$rank=\$!"
done
wait_all "$torchrun0" "$torchrun1"
check "torchrun on two nodes ends with exit status 0 (got $codes)" [ "$codes" = "00" ]
check "torchrun on two nodes: results equal the one-host run" same_as_reference "$work/torchrun"

echo "== 3. node1 killed mid-epoch, restarts allowed"
FASTCPP_WORKER_STEP_MS=300 start_job restart checkpointed --max-restarts 1
node0=${node_pids[0]}
for _ in $(seq 300); do [ -e "$work/restart.ckpt" ] && break; sleep 0.1; done
sleep 0.3  # into epoch 1
hosts_kill node1
echo "  killed every process on node1 after the epoch-0 checkpoint"
for _ in $(seq 300); do grep -q "restarting the group" "$work/restart0.log" && break; sleep 0.1; done
echo "  node1 comes back"
FASTCPP_WORKER_STEP_MS=300 launch_on node1 1 "$work/restart1b.log" "$port" --max-restarts 1 -- "$worker" checkpointed "$work/restart"
node1=$!
wait_all $node0 $node1
grep "fastcpp-launch" "$work/restart0.log" | sed 's/^/  node0: /'
check "both nodes end with exit status 0 (got $codes)" [ "$codes" = "00" ]
check "node0's launcher restarted its group" grep -q "restarting the group (1 of 1)" "$work/restart0.log"
comparison=$(same_as_reference "$work/restart") && same=0 || same=1
echo "  $comparison"
check "the resumed job's results equal the one-host run" [ "$same" = 0 ]
check "the job resumed from a checkpoint (epoch >= 1)" grep -q "resumed from epoch [12]" <<<"$comparison"

lost_host_check() {  # KILLED SURVIVOR LOST_RANKS
  local killed=$1 survivor=$2 lost=$3 started code elapsed
  rm -f "$work/lost.ckpt"
  FASTCPP_WORKER_STEP_MS=300 start_job lost checkpointed
  for _ in $(seq 300); do [ -e "$work/lost.ckpt" ] && break; sleep 0.1; done
  sleep 0.5
  started=$(date +%s.%N)
  hosts_kill "$killed"
  wait_all "${node_pids[${survivor#node}]}"
  code=$codes
  elapsed=$(seconds_since "$started")
  wait 2>/dev/null || true
  local log="$work/lost${survivor#node}.log"
  grep -E "failed on rank|fastcpp-launch" "$log" | sed "s/^/  $survivor: /"
  check "$survivor exits non-zero (got $code) within the 60 s timeout (${elapsed} s)" \
    awk "BEGIN { exit !($code != 0 && $elapsed < 60) }"
  local rank
  for rank in $( [ "$survivor" = node0 ] && echo "0 1" || echo "2 3"); do
    check "rank $rank names the lost $lost on $killed" \
      grep -Eq "failed on rank $rank \(host $survivor\): lost $lost \(host $killed, $(host_address "$killed")\)( and .*)?: " "$log"
  done
}

echo "== 4. a node lost without restarts"
lost_host_check node1 node0 "ranks 2, 3"
lost_host_check node0 node1 "ranks 0, 1"

echo "== 5. 50 ms latency and 1% loss each way on node1's link"
timed_job clear ddp
clear_codes=$codes clear_time=$job_seconds
link_impair node1 50 0.01
timed_job slow ddp
slow_time=$job_seconds
link_restore node1
check "both jobs end with exit status 0 (got $clear_codes, $codes)" [ "$clear_codes$codes" = "0000" ]
check "with latency and loss: results equal the one-host run" same_as_reference "$work/slow"
echo "multinode: 50 ms + 1% loss each way on node1's link ($HOSTS_IMPAIRMENT): ${slow_time} s against ${clear_time} s on a clear link, slowdown $(awk "BEGIN { printf \"%.1f\", $slow_time / $clear_time }")x"

if [ "$failures" -gt 0 ]; then
  echo "multinode: $failures checks FAILED (logs: $work, kept)"
  trap hosts_destroy EXIT
  exit 1
fi
echo "multinode: all checks passed"
