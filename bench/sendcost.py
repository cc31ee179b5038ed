#!/usr/bin/env python3
"""bench/sendcost.py — the kernel's cost of one small write on a loopback
TCP connection: one `writev` of several slices, one `writev` of one slice
and one `send` of the same bytes (what an HTTP/1.1 answer head costs the proxy that writes it),
with the receiving end read back on the same thread so that both paths
pay the same delivery.

System time per call from getrusage, over ROUNDS alternating phases of
CALLS calls each; prints the median per phase kind and the spread.
Only 127.0.0.1; bounded by ROUNDS x CALLS calls.

Usage: taskset -c 1 python3 bench/sendcost.py [ROUNDS] [CALLS] [SLICES]
  (defaults 9, 50000, 17,104,2: the slices of a 0-byte answer's head)
"""
import os
import resource
import socket
import statistics
import sys
import time

rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 9
calls = int(sys.argv[2]) if len(sys.argv) > 2 else 50000
sizes = [int(x) for x in (sys.argv[3] if len(sys.argv) > 3 else "17,104,2").split(",")]
parts = [b"a" * n for n in sizes]
flat = b"".join(parts)

lst = socket.socket()
lst.bind(("127.0.0.1", 0))
lst.listen(1)
tx = socket.create_connection(lst.getsockname())
rx, _ = lst.accept()
lst.close()
for s in (tx, rx):
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
fd = tx.fileno()
recv_into = rx.recv_into
buf = bytearray(8192)


def phase(write):
    r0 = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.perf_counter()
    for _ in range(calls):
        write()
        recv_into(buf)
    t1 = time.perf_counter()
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    return (r1.ru_stime - r0.ru_stime) / calls * 1e6, (t1 - t0) / calls * 1e6


kinds = {
    f"writev ({len(parts)} slices)": lambda: os.writev(fd, parts),
    "writev (1 slice)": lambda: os.writev(fd, [flat]),
    "send (1 buffer)": lambda: tx.send(flat),
}
res = {k: [] for k in kinds}
for i in range(rounds):
    order = list(kinds) if i % 2 == 0 else list(reversed(list(kinds)))
    for k in order:
        res[k].append(phase(kinds[k]))
print(f"{rounds} rounds x {calls} calls of {len(flat)} bytes (+ one recv each)")
for k, v in res.items():
    sys_us = [x[0] for x in v]
    wall = [x[1] for x in v]
    print(f"  {k:20s} sys µs/call median {statistics.median(sys_us):.3f} "
          f"(min {min(sys_us):.3f}, max {max(sys_us):.3f}); wall µs/call {statistics.median(wall):.3f}")
