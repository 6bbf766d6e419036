# Test hosts on one machine, sourced by tests/multinode.sh: each host is a network
# namespace with its own host name, linked by a veth pair to a bridge in a "switch"
# namespace. Addresses are 10.231.0.0/24 and exist only inside these namespaces; the
# hosts know each other by name (an /etc/hosts of their own, /etc/netns/NAMESPACE).
#
#   hosts_create node0 node1 outsider   # 10.231.0.1, .2, .3, in that order
#   on node1 COMMAND...                 # runs COMMAND on that host
#   host_address node1                  # 10.231.0.2
#   hosts_kill node1                    # SIGKILLs every process on the host
#   link_impair node1 DELAY_MS LOSS     # latency and loss on that host's link
#   link_restore node1
#   hosts_destroy                       # also on exit
#
# Offloads are off on every link, so that frames are MTU-sized as on a real wire.

HOSTS_PREFIX="fcmn$$"
HOSTS_SWITCH="${HOSTS_PREFIX}sw"
HOSTS_NAMES=()
HOSTS_RELAY_PIDS=()

host_namespace() { echo "${HOSTS_PREFIX}$1"; }

host_address() {
  local i
  for i in "${!HOSTS_NAMES[@]}"; do
    [ "${HOSTS_NAMES[$i]}" = "$1" ] && echo "10.231.0.$((i + 1))" && return
  done
  echo "hosts.sh: no host $1" >&2
  return 1
}

no_offloads() {  # NAMESPACE INTERFACE
  ip netns exec "$1" ethtool -K "$2" tso off gso off gro off tx off rx off >/dev/null 2>&1 || true
}

hosts_create() {
  ip netns add "$HOSTS_SWITCH"
  ip -n "$HOSTS_SWITCH" link add br0 type bridge
  ip -n "$HOSTS_SWITCH" link set br0 up
  local name ns address other
  for name in "$@"; do
    HOSTS_NAMES+=("$name")
    ns=$(host_namespace "$name")
    address=$(host_address "$name")
    ip netns add "$ns"
    ip link add veth0 netns "$ns" type veth peer name "$name" netns "$HOSTS_SWITCH"
    ip -n "$ns" addr add "$address/24" dev veth0
    ip -n "$ns" link set lo up
    ip -n "$ns" link set veth0 up
    ip -n "$HOSTS_SWITCH" link set "$name" master br0
    ip -n "$HOSTS_SWITCH" link set "$name" up
    no_offloads "$ns" veth0
    no_offloads "$HOSTS_SWITCH" "$name"
  done
  for name in "${HOSTS_NAMES[@]}"; do
    mkdir -p "/etc/netns/$(host_namespace "$name")"
    {
      echo "127.0.0.1 localhost"
      for other in "${HOSTS_NAMES[@]}"; do echo "$(host_address "$other") $other"; done
    } >"/etc/netns/$(host_namespace "$name")/hosts"
  done
}

on() {  # HOST COMMAND...
  local name=$1
  shift
  ip netns exec "$(host_namespace "$name")" unshare --uts -- sh -c 'hostname "$0" && exec "$@"' "$name" "$@"
}

hosts_kill() {
  local pids
  pids=$(ip netns pids "$(host_namespace "$1")" || true)
  [ -n "$pids" ] && kill -9 $pids 2>/dev/null || true
}

# With tc netem where the kernel has it (on both ends of the link); otherwise the
# host's port leaves the bridge and tests/multinode/impaired_link.py relays its frames
# to a second port on the bridge, delayed and dropped.
HOSTS_IMPAIRMENT=""
link_impair() {  # HOST DELAY_MS LOSS(0..1)
  local name=$1 delay=$2 loss=$3 percent
  percent=$(awk "BEGIN { print $loss * 100 }")
  if ip netns exec "$(host_namespace "$name")" tc qdisc add dev veth0 root netem delay "${delay}ms" loss "${percent}%" 2>/dev/null; then
    ip netns exec "$HOSTS_SWITCH" tc qdisc add dev "$name" root netem delay "${delay}ms" loss "${percent}%"
    HOSTS_IMPAIRMENT="tc netem"
    return
  fi
  HOSTS_IMPAIRMENT="userspace relay (no sch_netem in this kernel)"
  ip -n "$HOSTS_SWITCH" link set "$name" nomaster
  ip -n "$HOSTS_SWITCH" link add "r$name" type veth peer name "b$name"
  ip -n "$HOSTS_SWITCH" link set "b$name" master br0
  local end
  for end in "r$name" "b$name"; do
    ip -n "$HOSTS_SWITCH" link set "$end" up
    no_offloads "$HOSTS_SWITCH" "$end"
  done
  ip -n "$HOSTS_SWITCH" link set "$name" promisc on
  ip -n "$HOSTS_SWITCH" link set "r$name" promisc on
  ip netns exec "$HOSTS_SWITCH" "${HOSTS_PYTHON:-python3}" "$(dirname "${BASH_SOURCE[0]}")/impaired_link.py" "$name" "r$name" \
    --delay-ms "$delay" --loss "$loss" &
  HOSTS_RELAY_PIDS+=($!)
  sleep 0.5
}

link_restore() {  # HOST
  local name=$1 pid
  ip netns exec "$(host_namespace "$name")" tc qdisc del dev veth0 root 2>/dev/null || true
  ip netns exec "$HOSTS_SWITCH" tc qdisc del dev "$name" root 2>/dev/null || true
  for pid in "${HOSTS_RELAY_PIDS[@]}"; do kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null || true; done
  HOSTS_RELAY_PIDS=()
  ip -n "$HOSTS_SWITCH" link del "r$name" 2>/dev/null || true
  ip -n "$HOSTS_SWITCH" link set "$name" master br0
}

hosts_destroy() {
  local name pid
  for pid in "${HOSTS_RELAY_PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  for name in "${HOSTS_NAMES[@]}"; do
    hosts_kill "$name"
    ip netns del "$(host_namespace "$name")" 2>/dev/null || true
    rm -rf "/etc/netns/$(host_namespace "$name")"
  done
  ip netns del "$HOSTS_SWITCH" 2>/dev/null || true
  HOSTS_NAMES=()
}
