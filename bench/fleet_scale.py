#!/usr/bin/env python3
"""A fleet at scale on one machine, measured.

Starts a Redis Cluster (three masters, three replicas), a three-member
etcd, three demo backends and N hopgate replicas (default 10) in fleet
mode, with S session bindings (default 100,000) in Redis before the
replicas start, then prints:

- start-up: how long each replica took to load the bindings, and its
  resident memory with them cached;
- Redis: memory used by the store's slot, commands per second per replica
  at idle and under session traffic;
- hop propagation: a session hopped on replica 1 (its node drained), the
  time until another replica's admin API shows the new binding, p50/p99;
- etcd: events sent to watchers for one config change, and the watchers.

Nothing here is asserted: the figures go to docs/BENCHMARKS.md with the
command that printed them. Every process is started on 127.0.0.1 with free
ports under a temporary directory and stopped at the end.

usage: python3 bench/fleet_scale.py [--replicas N] [--sessions S]
                                    [--hops K] [--bin target/release/hopgate]
"""

import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

PROCS = []


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(args, log, env=None, cwd=None):
    p = subprocess.Popen(
        args,
        stdout=open(log, "w"),
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        env=env,
        cwd=cwd,
    )
    PROCS.append(p)
    return p


def wait_port(port, bound=30):
    end = time.time() + bound
    while time.time() < end:
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    sys.exit(f"port {port} never opened")


def redis_cli(port, *args):
    out = subprocess.run(
        ["redis-cli", "-p", str(port), *args], capture_output=True, text=True
    )
    return out.stdout.strip()


def http(url, method="GET", body=None, headers=None):
    req = urllib.request.Request(url, method=method, data=body, headers=headers or {})
    with urllib.request.urlopen(req, timeout=10) as r:
        return r.status, r.headers, r.read()


def info_field(port, section, field):
    for line in redis_cli(port, "INFO", section).splitlines():
        if line.startswith(field + ":"):
            return line.split(":", 1)[1].strip()
    return None


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def cluster_port():
    """A free port whose cluster bus port (+10000) is free and valid too."""
    while True:
        port = free_port()
        if port + 10000 > 65535:
            continue
        try:
            with socket.socket() as s:
                s.bind(("127.0.0.1", port + 10000))
            return port
        except OSError:
            continue


def redis_cluster(work):
    ports = [cluster_port() for _ in range(6)]
    for i, port in enumerate(ports):
        d = os.path.join(work, f"redis-{i}")
        os.makedirs(d)
        start(
            [
                "redis-server", "--port", str(port), "--bind", "127.0.0.1",
                "--dir", d, "--save", "", "--appendonly", "no",
                "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                "--cluster-node-timeout", "2000",
            ],
            os.path.join(d, "log"),
        )
    for port in ports:
        wait_port(port)
    subprocess.run(
        ["redis-cli", "--cluster", "create",
         *[f"127.0.0.1:{p}" for p in ports],
         "--cluster-replicas", "1", "--cluster-yes"],
        check=True, capture_output=True,
    )
    for _ in range(200):
        if "cluster_state:ok" in redis_cli(ports[0], "CLUSTER", "INFO"):
            break
        time.sleep(0.1)
    masters = [p for p in ports if info_field(p, "replication", "role") == "master"]
    return ports, masters


def slot_master(ports, key_tag):
    """The port of the master serving the slot of `key_tag`."""
    slot = int(redis_cli(ports[0], "CLUSTER", "KEYSLOT", key_tag))
    for line in redis_cli(ports[0], "CLUSTER", "NODES").splitlines():
        parts = line.split()
        if "master" not in parts[2]:
            continue
        for rng in parts[8:]:
            if "-" in rng and not rng.startswith("["):
                a, b = (int(x) for x in rng.split("-"))
            elif rng.isdigit():
                a = b = int(rng)
            else:
                continue
            if a <= slot <= b:
                return int(parts[1].split("@")[0].rsplit(":", 1)[1])
    sys.exit("no master for the store's slot")


def etcd_cluster(work):
    names = ["e1", "e2", "e3"]
    client = [free_port() for _ in names]
    peer = [free_port() for _ in names]
    initial = ",".join(f"{n}=http://127.0.0.1:{p}" for n, p in zip(names, peer))
    for n, c, p in zip(names, client, peer):
        start(
            [
                "etcd", "--name", n, "--data-dir", os.path.join(work, n),
                "--listen-client-urls", f"http://127.0.0.1:{c}",
                "--advertise-client-urls", f"http://127.0.0.1:{c}",
                "--listen-peer-urls", f"http://127.0.0.1:{p}",
                "--initial-advertise-peer-urls", f"http://127.0.0.1:{p}",
                "--initial-cluster", initial, "--initial-cluster-state", "new",
            ],
            os.path.join(work, f"{n}.log"),
        )
    endpoints = [f"http://127.0.0.1:{c}" for c in client]
    for _ in range(200):
        out = subprocess.run(
            ["etcdctl", "--endpoints", ",".join(endpoints), "endpoint", "health"],
            capture_output=True, text=True,
        )
        if out.returncode == 0:
            return endpoints
        time.sleep(0.2)
    sys.exit("etcd did not become healthy")


def etcd_metric(endpoints, name):
    total = 0.0
    for e in endpoints:
        _, _, body = http(e + "/metrics")
        for line in body.decode().splitlines():
            if line.startswith(name + " ") or line.startswith(name + "{"):
                total += float(line.rsplit(" ", 1)[1])
    return total


def resp(*args):
    out = f"*{len(args)}\r\n"
    for a in args:
        a = str(a)
        out += f"${len(a.encode())}\r\n{a}\r\n"
    return out


def seed(port, sessions, nodes):
    """`sessions` bindings written straight into the store's layout."""
    now = int(time.time())
    expires = now + 3600
    lines = []
    for i in range(sessions):
        key = f"{{hopgate:}}s:{i:032x}"
        lines.append(resp(
            "HSET", key, "service", "api", "node", nodes[i % len(nodes)],
            "bound_at", now, "hops", 0, "expires_at", expires, "writer", "seed"))
        lines.append(resp("EXPIREAT", key, expires))
    data = "".join(lines).encode()
    out = subprocess.run(
        ["redis-cli", "-p", str(port), "--pipe"], input=data, capture_output=True
    )
    if out.returncode != 0:
        sys.exit(f"seeding failed: {out.stdout!r} {out.stderr!r}")


def commands_processed(ports):
    return sum(int(info_field(p, "stats", "total_commands_processed") or 0) for p in ports)


def traffic(replicas, seconds, stop_at=None):
    """Mints and binds sessions through every replica for `seconds`
    (threads, one per replica); the number of requests answered."""
    done = [0]
    lock = threading.Lock()
    end = time.time() + seconds

    def loop(i):
        port = replicas[i]["port"]
        other = replicas[(i + 1) % len(replicas)]["port"]
        n = 0
        while time.time() < end:
            try:
                _, h, _ = http(f"http://127.0.0.1:{port}/")
                token = h.get("Hop-Session")
                http(f"http://127.0.0.1:{other}/", headers={"Hop-Session": token})
                n += 2
            except Exception:
                pass
        with lock:
            done[0] += n

    threads = [threading.Thread(target=loop, args=(i,)) for i in range(len(replicas))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return done[0]


def percentile(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--replicas", type=int, default=10)
    ap.add_argument("--sessions", type=int, default=100_000)
    ap.add_argument("--hops", type=int, default=200)
    ap.add_argument("--bin", default="target/release/hopgate")
    ap.add_argument("--keep", action="store_true", help="keep the work directory (logs)")
    a = ap.parse_args()
    binary = os.path.abspath(a.bin)
    work = tempfile.mkdtemp(prefix="hopgate-fleet-scale-")
    try:
        run(a, binary, work)
    finally:
        for p in PROCS:
            try:
                p.send_signal(signal.SIGKILL)
                p.wait(5)
            except Exception:
                pass
        if a.keep:
            print(f"work directory kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


def run(a, binary, work):
    print(f"fleet scale: {a.replicas} replicas, {a.sessions} sessions, binary {binary}")
    redis_ports, masters = redis_cluster(work)
    store_master = slot_master(redis_ports, "{hopgate:}")
    endpoints = etcd_cluster(work)
    nodes = []
    for i in range(1, 4):
        port = free_port()
        start([binary, "backend", "--id", f"node-{i}", "--listen", f"127.0.0.1:{port}"],
              os.path.join(work, f"node-{i}.log"))
        wait_port(port)
        nodes.append((f"node-{i}", port))
    shared = (
        "services:\n  - name: api\n    nodes:\n"
        + "".join(f"      - {{ id: {n}, address: \"127.0.0.1:{p}\" }}\n" for n, p in nodes)
        + "routes:\n  - { id: default, match: { path_prefix: / }, service: api }\n"
        "sessions: { ttl: 1h }\n"
    )
    etcdctl = ["etcdctl", "--endpoints", ",".join(endpoints)]
    subprocess.run([*etcdctl, "put", "/hopgate/scale/config", shared], check=True,
                   capture_output=True)
    t = time.time()
    empty = int(info_field(store_master, "memory", "used_memory"))
    seed(store_master, a.sessions, [n for n, _ in nodes])
    used = int(info_field(store_master, "memory", "used_memory"))
    per = (used - empty) / max(a.sessions, 1)
    print(f"seeded {a.sessions} bindings in {time.time() - t:.1f} s; "
          f"Redis used_memory on the store's master: {used / 2**20:.1f} MiB "
          f"({per:.0f} bytes per binding)")

    env = dict(os.environ, HOPGATE_SESSION_SECRET="fleet-scale-secret-0123456789abcdef",
               RUST_LOG="info")
    replicas = []
    cluster = ", ".join(f"\"redis://127.0.0.1:{p}\"" for p in redis_ports)
    etcd_list = ", ".join(f"\"{e}\"" for e in endpoints)
    for i in range(a.replicas):
        port, admin = free_port(), free_port()
        cfg = os.path.join(work, f"gw-{i}.yaml")
        with open(cfg, "w") as f:
            f.write(
                f"replica_id: gw-{i}\n"
                f"listeners:\n  - {{ name: public, address: 127.0.0.1:{port} }}\n"
                f"admin: {{ address: 127.0.0.1:{admin} }}\n"
                f"access_log: {{ enabled: false }}\n"
                f"store: {{ kind: redis, cluster: {{ endpoints: [{cluster}] }} }}\n"
                f"sources:\n  etcd: {{ endpoints: [{etcd_list}], prefix: /hopgate/scale/, "
                f"cache: gw-{i}-cache.json }}\n"
            )
        t = time.time()
        p = start([binary, "run", "--config", cfg], os.path.join(work, f"gw-{i}.log"),
                  env=env, cwd=work)
        wait_port(admin, 120)
        # Loaded: the replica's cache holds the seeded bindings.
        for _ in range(6000):
            if "bindings loaded from Redis" in open(os.path.join(work, f"gw-{i}.log")).read():
                break
            time.sleep(0.01)
        replicas.append({"port": port, "admin": admin, "pid": p.pid, "start_s": time.time() - t})
    time.sleep(2)
    starts = [r["start_s"] for r in replicas]
    rss = [rss_kib(r["pid"]) for r in replicas]
    print(f"replica start until the bindings are loaded: median {statistics.median(starts):.2f} s, "
          f"max {max(starts):.2f} s")
    print(f"replica RSS with {a.sessions} bindings cached: median "
          f"{statistics.median(rss) / 1024:.1f} MiB, max {max(rss) / 1024:.1f} MiB")

    before = commands_processed(masters)
    time.sleep(10)
    idle = (commands_processed(masters) - before) / 10 / a.replicas
    print(f"Redis commands/s per replica at idle: {idle:.1f} (masters' "
          f"total_commands_processed over 10 s, divided by {a.replicas})")

    before = commands_processed(masters)
    t = time.time()
    answered = traffic(replicas, 10)
    secs = time.time() - t
    busy = (commands_processed(masters) - before) / secs / a.replicas
    print(f"under session traffic ({answered / secs:.0f} req/s over the fleet, half "
          f"minting, half binding on another replica): Redis commands/s per replica "
          f"{busy:.1f}")

    # Hop propagation: sessions bound to node-1, hopped by draining it.
    sessions = []
    for _ in range(a.hops * 4):
        if len(sessions) >= a.hops:
            break
        _, h, body = http(f"http://127.0.0.1:{replicas[0]['port']}/")
        token = h.get("Hop-Session")
        _, _, body = http(f"http://127.0.0.1:{replicas[1]['port']}/",
                          headers={"Hop-Session": token})
        if json.loads(body)["node"] == "node-1":
            sessions.append(token)
    time.sleep(2)
    http(f"http://127.0.0.1:{replicas[0]['admin']}/admin/v1/nodes/api/node-1/drain",
         method="POST")
    for r in replicas:
        for _ in range(200):
            _, _, body = http(f"http://127.0.0.1:{r['admin']}/admin/v1/nodes")
            if any(n["id"] == "node-1" and n["draining"] for n in json.loads(body)["nodes"]):
                break
            time.sleep(0.05)
    delays = []
    for i, token in enumerate(sessions):
        watcher = replicas[1 + i % (len(replicas) - 1)]
        _, _, body = http(f"http://127.0.0.1:{replicas[0]['port']}/",
                          headers={"Hop-Session": token})
        t0 = time.time()
        while time.time() - t0 < 10:
            _, _, b = http(f"http://127.0.0.1:{watcher['admin']}/admin/v1/sessions/{token}")
            binds = json.loads(b).get("bindings", [])
            if binds and binds[0]["node"] != "node-1":
                delays.append((time.time() - t0) * 1000)
                break
            time.sleep(0.002)
    if delays:
        print(f"hop propagation to another replica ({len(delays)} hops, polled every "
              f"2 ms): p50 {percentile(delays, 0.5):.1f} ms, p99 "
              f"{percentile(delays, 0.99):.1f} ms, max {max(delays):.1f} ms")

    # etcd: one config change.
    events = "etcd_debugging_mvcc_events_total"
    before = etcd_metric(endpoints, events)
    watchers = etcd_metric(endpoints, "etcd_debugging_mvcc_watcher_total")
    subprocess.run([*etcdctl, "put", "/hopgate/scale/config",
                    shared.replace("ttl: 1h", "ttl: 2h")], check=True, capture_output=True)
    for r in replicas:
        for _ in range(200):
            _, _, body = http(f"http://127.0.0.1:{r['admin']}/admin/v1/config")
            if "2h" in json.dumps(json.loads(body)["config"].get("sessions", {})):
                break
            time.sleep(0.05)
    time.sleep(1)
    sent = etcd_metric(endpoints, events) - before
    print(f"etcd: one config change sent {sent:.0f} watch events over the members "
          f"({watchers:.0f} watchers open, {a.replicas} replicas)")


if __name__ == "__main__":
    main()
