#!/usr/bin/env python3
"""bench/idle_memory.py: memory per idle client connection, hopgate beside
NGINX and HAProxy.

Each proxy runs in front of one local nginx origin, configured as
bench/run.sh and bench/https.sh configure them (one worker/thread,
upstream keep-alive, access log off). Per proxy and protocol, on a proxy
started afresh:

  1. warm-up: 32 connections make one request each and close (the
     upstream pool, TLS state and per-thread caches exist from then on);
  2. the proxy's RSS (VmRSS, summed over its processes) is read;
  3. N client connections (default 5,000) each make one request (at most
     16 in flight at a time, so the upstream pool stays small) and then
     stay open, idle: HTTP/1.1 keep-alive, h2c (prior knowledge, the
     stream finished, the connection kept) or TLS 1.3 with HTTP/1.1;
  4. after a second of quiet the RSS is read again: (after - before) / N
     is the figure, in bytes per idle connection.

Protocols: h1 (all three), h2c (hopgate, HAProxy, NGINX: `listen ...
http2` without TLS is h2c with prior knowledge), tls (HTTPS with
HTTP/1.1 over TLS 1.3, a self-signed ECDSA P-256 certificate made with
openssl, as bench/https.sh makes it).

Talks to 127.0.0.1 only, raises its own open-file limit to the hard
limit (N client sockets here, N accepted ones in the proxy), stops every
process it started, and gives up after --deadline seconds in all.

Usage: python3 bench/idle_memory.py [--conns N] [--proxies hopgate,nginx,haproxy]
         [--protocols h1,h2c,tls] [--hopgate BIN] [--deadline S] [--keep]
"""

import argparse
import asyncio
import os
import resource
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
IN_FLIGHT = 16
WARMUP = 32
REQUEST = b"GET / HTTP/1.1\r\nHost: bench.test\r\nUser-Agent: idle-memory\r\nAccept: */*\r\n\r\n"


def log(msg):
    print(f"[idle {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def free_ports(n):
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def wait_port(port, proc, seconds=15):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if proc.poll() is not None:
            return False
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return True
        except OSError:
            time.sleep(0.05)
    return False


def tree(pid):
    """pid and its descendants (nginx's master and worker)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            with open(f"/proc/{p}/task/{p}/children") as f:
                todo.extend(int(c) for c in f.read().split())
        except OSError:
            pass
    return out


def rss_bytes(pid):
    total = 0
    for p in tree(pid):
        try:
            with open(f"/proc/{p}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1]) * 1024
        except OSError:
            pass
    return total


NGINX_HEAD = """worker_processes 1;
worker_rlimit_nofile {nofile};
daemon off;
pid {d}/nginx.pid;
error_log {d}/error.log warn;
events {{ worker_connections {wc}; }}
http {{
    access_log off;
    client_body_temp_path {d}/cb; proxy_temp_path {d}/px; fastcgi_temp_path {d}/fc;
    uwsgi_temp_path {d}/uw; scgi_temp_path {d}/sc;
    keepalive_requests 10000000;
    keepalive_timeout 300s;
"""


class Bench:
    def __init__(self, args):
        self.args = args
        self.tmp = tempfile.mkdtemp(prefix="hopgate-idle.")
        os.chmod(self.tmp, 0o755)
        self.procs = []
        n = args.conns
        (self.p_origin, self.p_h1, self.p_h2, self.p_tls, self.p_admin) = free_ports(5)
        self.nofile = n + 2048
        self.cert()
        self.write_origin()

    # -- configuration ---------------------------------------------------

    def cert(self):
        key, pem = f"{self.tmp}/site.key", f"{self.tmp}/site.pem"
        subprocess.run(
            ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
             "-nodes", "-days", "30", "-keyout", key, "-out", pem, "-subj", "/CN=bench.test",
             "-addext", "subjectAltName=DNS:bench.test"],
            check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        with open(f"{self.tmp}/site.combined.pem", "w") as out:
            out.write(open(pem).read() + open(key).read())
        for f in ("site.key", "site.pem", "site.combined.pem"):
            os.chmod(f"{self.tmp}/{f}", 0o644)

    def nginx_head(self, d):
        return NGINX_HEAD.format(d=d, nofile=self.nofile, wc=self.args.conns + 1024)

    def write_origin(self):
        d = f"{self.tmp}/origin"
        os.makedirs(d)
        with open(f"{d}/nginx.conf", "w") as f:
            f.write(self.nginx_head(d))
            f.write(f"    server {{ listen 127.0.0.1:{self.p_origin} backlog=4096; "
                    "location / { return 200 \"\"; } }\n}\n")

    def write_nginx(self, d):
        t = self.tmp
        with open(f"{d}/nginx.conf", "w") as f:
            f.write(self.nginx_head(d))
            f.write(f"""    upstream origin {{ server 127.0.0.1:{self.p_origin}; keepalive 512; keepalive_requests 10000000; }}
    server {{
        listen 127.0.0.1:{self.p_h1} backlog=4096;
        listen 127.0.0.1:{self.p_h2} backlog=4096 http2;
        listen 127.0.0.1:{self.p_tls} backlog=4096 ssl;
        ssl_certificate {t}/site.pem;
        ssl_certificate_key {t}/site.key;
        ssl_protocols TLSv1.3;
        location / {{
            proxy_pass http://origin;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_max_temp_file_size 0;
        }}
    }}
}}
""")

    def write_haproxy(self, d):
        with open(f"{d}/haproxy.cfg", "w") as f:
            f.write(f"""global
    nbthread 1
    maxconn {self.args.conns + 1024}
defaults
    mode http
    option http-keep-alive
    timeout connect 5s
    timeout client 300s
    timeout server 300s
    timeout http-keep-alive 300s
frontend fe
    bind 127.0.0.1:{self.p_h1}
    bind 127.0.0.1:{self.p_h2} proto h2
    bind 127.0.0.1:{self.p_tls} ssl crt {self.tmp}/site.combined.pem alpn http/1.1 ssl-min-ver TLSv1.3
    default_backend be
backend be
    http-reuse always
    server o1 127.0.0.1:{self.p_origin}
""")

    def write_hopgate(self, d):
        # h2c is sniffed on the plain listener; its port is the h1 one.
        self.p_h2_hopgate = self.p_h1
        with open(f"{d}/hopgate.yaml", "w") as f:
            f.write(f"""listeners:
  - {{ name: public, address: "127.0.0.1:{self.p_h1}" }}
  - name: https
    address: "127.0.0.1:{self.p_tls}"
    tls: {{ certificates: [ {{ cert: {self.tmp}/site.pem, key: {self.tmp}/site.key, sni: [bench.test] }} ] }}
admin: {{ address: "127.0.0.1:{self.p_admin}" }}
limits: {{ max_connections: {self.args.conns + 512} }}
timeouts: {{ header_read: 300s, idle: 300s }}
services:
  - name: origin
    nodes: [ {{ id: o1, address: "127.0.0.1:{self.p_origin}" }} ]
routes:
  - {{ id: all, match: {{ path_prefix: / }}, service: origin }}
""")

    # -- processes -------------------------------------------------------

    def spawn(self, argv, port, env=None, out=None):
        proc = subprocess.Popen(
            argv, env=env, stdin=subprocess.DEVNULL,
            stdout=out or subprocess.DEVNULL, stderr=subprocess.STDOUT, start_new_session=True)
        self.procs.append(proc)
        if not wait_port(port, proc):
            raise RuntimeError(f"{argv[0]} did not listen on {port}")
        return proc

    def stop(self, proc):
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(5)
        if proc in self.procs:
            self.procs.remove(proc)

    def start_origin(self):
        d = f"{self.tmp}/origin"
        return self.spawn(["nginx", "-p", d, "-c", f"{d}/nginx.conf", "-e", f"{d}/error.log"],
                          self.p_origin)

    def start(self, proxy):
        d = f"{self.tmp}/{proxy}"
        os.makedirs(d, exist_ok=True)
        os.chmod(d, 0o755)
        log_to = open(f"{d}/out.log", "ab")
        if proxy == "nginx":
            self.write_nginx(d)
            return self.spawn(["nginx", "-p", d, "-c", f"{d}/nginx.conf", "-e", f"{d}/error.log"],
                              self.p_h1, out=log_to)
        if proxy == "haproxy":
            self.write_haproxy(d)
            return self.spawn(["haproxy", "-db", "-f", f"{d}/haproxy.cfg"], self.p_h1, out=log_to)
        self.write_hopgate(d)
        env = dict(os.environ, HOPGATE_WORKER_THREADS="1", RUST_LOG="warn")
        env.pop("TOKIO_WORKER_THREADS", None)
        return self.spawn([self.args.hopgate, "run", "--config", f"{d}/hopgate.yaml"],
                          self.p_h1, env=env, out=log_to)

    def cleanup(self):
        for p in list(self.procs):
            self.stop(p)
        if self.args.keep:
            log(f"kept {self.tmp}")
        else:
            shutil.rmtree(self.tmp, ignore_errors=True)

    # -- one measurement -------------------------------------------------

    def port_of(self, proxy, proto):
        if proto == "tls":
            return self.p_tls
        if proto == "h2c":
            return self.p_h2_hopgate if proxy == "hopgate" else self.p_h2
        return self.p_h1

    async def measure(self, proxy, proto, pid):
        port = self.port_of(proxy, proto)
        client = CLIENTS[proto]
        warm = await open_many(client, port, WARMUP)
        close_all(warm)
        await asyncio.sleep(1.0)
        before = rss_bytes(pid)
        conns = await open_many(client, port, self.args.conns)
        await asyncio.sleep(1.0)
        after = rss_bytes(pid)
        # Every connection still open (the proxy closed none of them).
        alive = sum(1 for c in conns if still_open(c))
        close_all(conns)
        return before, after, alive


# -- clients ---------------------------------------------------------------


async def read_h1_response(reader):
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    if length:
        await reader.readexactly(length)
    return status


async def h1_client(port):
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(REQUEST)
    await writer.drain()
    status = await read_h1_response(reader)
    return writer, status


TLS_CTX = ssl.create_default_context()
TLS_CTX.check_hostname = False
TLS_CTX.verify_mode = ssl.CERT_NONE
TLS_CTX.minimum_version = ssl.TLSVersion.TLSv1_3
TLS_CTX.set_alpn_protocols(["http/1.1"])


async def tls_client(port):
    reader, writer = await asyncio.open_connection(
        "127.0.0.1", port, ssl=TLS_CTX, server_hostname="bench.test")
    writer.write(REQUEST)
    await writer.drain()
    status = await read_h1_response(reader)
    return writer, status


async def h2c_client(port):
    import h2.config
    import h2.connection
    import h2.events

    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    conn.initiate_connection()
    conn.send_headers(1, [(":method", "GET"), (":scheme", "http"), (":authority", "bench.test"),
                          (":path", "/"), ("user-agent", "idle-memory")], end_stream=True)
    writer.write(conn.data_to_send())
    await writer.drain()
    status = None
    while True:
        data = await reader.read(65536)
        if not data:
            raise ConnectionError("h2c: closed before the answer")
        for ev in conn.receive_data(data):
            if isinstance(ev, h2.events.ResponseReceived):
                status = int(dict(ev.headers)[b":status"])
            if isinstance(ev, h2.events.StreamEnded) and ev.stream_id == 1:
                writer.write(conn.data_to_send())
                await writer.drain()
                # The reader stays referenced by the transport; the
                # connection idles from here on.
                return writer, status
            if isinstance(ev, h2.events.StreamReset):
                raise ConnectionError("h2c: stream reset")
        out = conn.data_to_send()
        if out:
            writer.write(out)
            await writer.drain()


CLIENTS = {"h1": h1_client, "h2c": h2c_client, "tls": tls_client}


async def open_many(client, port, n):
    sem = asyncio.Semaphore(IN_FLIGHT)
    bad = 0

    async def one():
        nonlocal bad
        async with sem:
            writer, status = await asyncio.wait_for(client(port), 30)
            if status != 200:
                bad += 1
            return writer

    conns = await asyncio.gather(*(one() for _ in range(n)))
    if bad:
        raise RuntimeError(f"{bad} of {n} requests were not answered 200")
    return conns


def still_open(writer):
    sock = writer.get_extra_info("socket")
    if sock is None or writer.is_closing():
        return False
    try:
        # A peek that would block: open and nothing pending (no FIN).
        raw = socket.socket(fileno=os.dup(sock.fileno()))
        try:
            raw.setblocking(False)
            raw.recv(1, socket.MSG_PEEK)
            return False
        except BlockingIOError:
            return True
        finally:
            raw.close()
    except OSError:
        return False


def close_all(writers):
    for w in writers:
        w.close()


# -- main -----------------------------------------------------------------


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--conns", type=int, default=5000)
    ap.add_argument("--proxies", default="hopgate,nginx,haproxy")
    ap.add_argument("--protocols", default="h1,h2c,tls")
    ap.add_argument("--hopgate", default=os.path.join(REPO, "target/release/hopgate"))
    ap.add_argument("--deadline", type=float, default=900.0)
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    for tool in ("nginx", "haproxy", "openssl"):
        if shutil.which(tool) is None and not os.path.exists(f"/usr/sbin/{tool}"):
            sys.exit(f"idle_memory.py: {tool} is missing (bash scripts/deps.sh)")
    os.environ["PATH"] += os.pathsep + "/usr/sbin"
    if "hopgate" in args.proxies and not os.access(args.hopgate, os.X_OK):
        sys.exit(f"idle_memory.py: no {args.hopgate} (cargo build --release -p hopgate)")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = args.conns + 2048
    if hard != resource.RLIM_INFINITY and hard < want:
        sys.exit(f"idle_memory.py: the hard open-file limit {hard} is below {want}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, want), hard))
    # Bounded in time: an alarm ends the run (the cleanup still runs).
    signal.signal(signal.SIGALRM, lambda *_: (_ for _ in ()).throw(TimeoutError("deadline")))
    signal.alarm(int(args.deadline))
    b = Bench(args)
    rows = []
    try:
        b.start_origin()
        for proxy in args.proxies.split(","):
            for proto in args.protocols.split(","):
                proc = b.start(proxy)
                try:
                    log(f"{proxy} {proto}: {args.conns} connections")
                    before, after, alive = asyncio.run(b.measure(proxy, proto, proc.pid))
                finally:
                    b.stop(proc)
                per = (after - before) / args.conns
                rows.append((proxy, proto, before, after, alive, per))
                log(f"{proxy} {proto}: {per:,.0f} B per idle connection ({alive} open)")
    finally:
        signal.alarm(0)
        b.cleanup()
    print(f"| proxy | protocol | RSS before (MiB) | RSS with {args.conns} idle (MiB) "
          "| open at the end | bytes per idle connection |")
    print("| --- | --- | ---: | ---: | ---: | ---: |")
    for proxy, proto, before, after, alive, per in rows:
        print(f"| {proxy} | {proto} | {before / 2**20:.1f} | {after / 2**20:.1f} | {alive} | {per:,.0f} |")


if __name__ == "__main__":
    main()
