"""A host outside the job that writes garbage to the rendezvous store's port.

    python store_garbage.py HOST PORT [CONNECTIONS]

Opens CONNECTIONS (default 30) connections one after another and writes random bytes
(seeded: the same garbage each run) of up to 64 KiB, some starting with a valid
command byte and a huge length; the last connection stays open, silent, until this
process is killed. Prints how many connections were accepted.
"""
import random
import socket
import struct
import sys
import time


def main():
    host, port = sys.argv[1], int(sys.argv[2])
    count = int(sys.argv[3]) if len(sys.argv) > 3 else 30
    draw = random.Random(17)
    accepted = 0
    for i in range(count):
        try:
            connection = socket.create_connection((host, port), timeout=5)
        except OSError as e:
            print(f"store_garbage: connection {i}: {e}", flush=True)
            continue
        accepted += 1
        if i % 3 == 0:  # a command byte and a length no store should believe
            payload = bytes([draw.randrange(0, 20)]) + struct.pack("<Q", draw.getrandbits(63))
        else:
            payload = draw.randbytes(draw.randrange(1, 65536))
        try:
            connection.sendall(payload)
        except OSError:  # the store may close on us: that is its right
            pass
        time.sleep(0.02)
        connection.close()
    print(f"store_garbage: {accepted} of {count} connections accepted and fed garbage", flush=True)
    idle = socket.create_connection((host, port), timeout=5)
    idle.sendall(b"\x01")  # half a command, then silence
    time.sleep(3600)


if __name__ == "__main__":
    main()
