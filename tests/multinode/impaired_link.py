"""A network link with latency and packet loss, for kernels without tc netem.

Bridges two interfaces of a namespace at layer 2: every Ethernet frame that arrives on
one leaves on the other after a fixed delay, unless it is dropped with the given
probability (from a seeded generator, so two runs drop the same frames). TCP above it
sees real loss and real round trips, as it would through netem.

    python3 impaired_link.py IF_A IF_B --delay-ms 50 --loss 0.01 [--seed 1]

Stops on SIGTERM and prints what it relayed and dropped.
"""
import argparse
import collections
import random
import select
import signal
import socket
import sys
import time

ETH_P_ALL = 0x0003
PACKET_OUTGOING = 4


def open_interface(name):
    sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    sock.bind((name, 0))
    sock.setblocking(False)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 8 << 20)
    return sock


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("a")
    parser.add_argument("b")
    parser.add_argument("--delay-ms", type=float, default=50.0)
    parser.add_argument("--loss", type=float, default=0.01)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()

    ends = [open_interface(args.a), open_interface(args.b)]
    queues = [collections.deque(), collections.deque()]  # frames waiting to leave on ends[i]
    delay = args.delay_ms / 1000.0
    draw = random.Random(args.seed).random
    counts = {"relayed": 0, "dropped": 0}
    running = [True]
    signal.signal(signal.SIGTERM, lambda *_: running.__setitem__(0, False))
    signal.signal(signal.SIGINT, lambda *_: running.__setitem__(0, False))

    while running[0]:
        now = time.monotonic()
        for out, queue in zip(ends, queues):
            while queue and queue[0][0] <= now:
                frame = queue.popleft()[1]
                try:
                    out.send(frame)
                    counts["relayed"] += 1
                except OSError:  # a full send buffer drops the frame, as a full queue would
                    counts["dropped"] += 1
        due = [q[0][0] for q in queues if q]
        timeout = max(0.0, min(due) - time.monotonic()) if due else 0.2
        try:
            readable, _, _ = select.select(ends, [], [], timeout)
        except InterruptedError:
            continue
        arrival = time.monotonic()
        for sock in readable:
            other = 1 - ends.index(sock)
            for _ in range(256):
                try:
                    frame, address = sock.recvfrom(65536)
                except BlockingIOError:
                    break
                if address[2] == PACKET_OUTGOING:  # our own sends, seen again
                    continue
                if draw() < args.loss:
                    counts["dropped"] += 1
                    continue
                queues[other].append((arrival + delay, frame))
    print(f"impaired_link: relayed {counts['relayed']} frames, dropped {counts['dropped']}", file=sys.stderr)


if __name__ == "__main__":
    main()
