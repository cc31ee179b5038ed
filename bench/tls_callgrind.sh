#!/usr/bin/env bash
# bench/tls_callgrind.sh — instructions per HTTPS request (TLS 1.3,
# HTTP/1.1 keep-alive), counted by callgrind: a figure the machine's noise
# does not move, for the TLS layer's before/after.
#
# The setup of bench/https.sh (an ECDSA P-256 test certificate made here,
# one nginx origin answering 200 with no body), the recipe of
# bench/callgrind.sh (one worker thread, wrk -t1 -c4: 2 s of warm-up,
# counters zeroed, 6 s counted). Prints the instructions per request and
# the share of the TLS code (rustls, tokio-rustls, ring: inclusive figures
# of the read and write paths and of the AEAD).
#
# Usage: bash bench/tls_callgrind.sh [BIN]   (default target/quick/hopgate)
#   TLS_CG_PROXY=haproxy counts HAProxy instead (same certificate and
#   origin; `BIN` is then ignored).
# Talks to 127.0.0.1 only; stops only the processes it started.
set -euo pipefail

REPO_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN="${1:-$REPO_DIR/target/quick/hopgate}"
PROXY="${TLS_CG_PROXY:-hopgate}"
for t in valgrind callgrind_annotate callgrind_control wrk openssl nginx taskset; do
  command -v "$t" >/dev/null || [[ -x /usr/sbin/$t ]] || { echo "tls_callgrind.sh: $t is missing" >&2; exit 1; }
done
[[ $PROXY == haproxy ]] || [[ -x $BIN ]] || { echo "tls_callgrind.sh: no $BIN" >&2; exit 1; }
NGINX_BIN="$(command -v nginx || echo /usr/sbin/nginx)"
HAPROXY_BIN="$(command -v haproxy || echo /usr/sbin/haproxy)"

D="$(mktemp -d /tmp/hopgate-tlscg.XXXXXX)"
chmod 755 "$D"
PIDS=()
cleanup() {
  local p
  for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$D"
}
trap cleanup EXIT

read -r PO PP PA < <(python3 -c "
import socket
s = [socket.socket() for _ in range(3)]
for x in s: x.bind(('127.0.0.1', 0))
print(' '.join(str(x.getsockname()[1]) for x in s))")
wait_port() { local i; for ((i = 0; i < 300; i++)); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.1; done; return 1; }

openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 30 \
  -keyout "$D/site.key" -out "$D/site.pem" -subj /CN=bench.test \
  -addext subjectAltName=DNS:bench.test 2>/dev/null
cat "$D/site.pem" "$D/site.key" >"$D/site.combined.pem"
mkdir -p "$D/origin"
cat >"$D/origin/nginx.conf" <<EOF
worker_processes 1; daemon off; pid $D/origin/nginx.pid; error_log $D/origin/error.log warn;
events { worker_connections 1024; }
http {
    access_log off;
    client_body_temp_path $D/origin/cb; proxy_temp_path $D/origin/px; fastcgi_temp_path $D/origin/fc;
    uwsgi_temp_path $D/origin/uw; scgi_temp_path $D/origin/sc;
    keepalive_requests 10000000; keepalive_timeout 75s;
    server { listen 127.0.0.1:$PO; location / { return 200; } }
}
EOF
cat >"$D/hopgate.yaml" <<EOF
listeners:
  - name: https
    address: 127.0.0.1:$PP
    tls: { certificates: [ { cert: site.pem, key: site.key, sni: [bench.test] } ] }
admin: { address: 127.0.0.1:$PA }
services:
  - name: o
    nodes: [ { id: o1, address: "127.0.0.1:$PO" } ]
routes:
  - { id: all, match: { path_prefix: / }, service: o }
EOF
cat >"$D/haproxy.cfg" <<EOF
global
    nbthread 1
defaults
    mode http
    timeout connect 5s
    timeout client 60s
    timeout server 60s
    http-reuse always
frontend f
    bind 127.0.0.1:$PP ssl crt $D/site.combined.pem alpn h2,http/1.1 ssl-min-ver TLSv1.3
    default_backend b
backend b
    server o 127.0.0.1:$PO
EOF

taskset -c 1 "$NGINX_BIN" -p "$D/origin" -c "$D/origin/nginx.conf" -e "$D/origin/error.log" &
PIDS+=($!)
wait_port "$PO" || { echo "origin did not start" >&2; exit 1; }
if [[ $PROXY == haproxy ]]; then
  taskset -c 1 valgrind --tool=callgrind --callgrind-out-file="$D/cg.out" \
    "$HAPROXY_BIN" -f "$D/haproxy.cfg" -db >"$D/proxy.log" 2>&1 &
else
  HOPGATE_WORKER_THREADS=1 RUST_LOG=warn taskset -c 1 valgrind --tool=callgrind \
    --callgrind-out-file="$D/cg.out" "$BIN" run --config "$D/hopgate.yaml" >"$D/proxy.log" 2>&1 &
fi
VG=$!
PIDS+=("$VG")
wait_port "$PP" || { echo "$PROXY did not start under valgrind" >&2; tail "$D/proxy.log" >&2; exit 1; }
taskset -c 0 wrk -t1 -c4 -d2s "https://127.0.0.1:$PP/" >/dev/null 2>&1 || true
callgrind_control -z "$VG" >/dev/null 2>&1
taskset -c 0 wrk -t1 -c4 -d6s "https://127.0.0.1:$PP/" >"$D/wrk.txt" 2>&1 || true
callgrind_control -d "$VG" >/dev/null 2>&1
sleep 1
REQS=$(grep -oE '^ *[0-9]+ requests' "$D/wrk.txt" | awk '{print $1}')
F=$(ls "$D"/cg.out.* 2>/dev/null | sort | head -n1)
[[ -n $REQS && -n $F ]] || { echo "tls_callgrind.sh: no count (wrk: $(tail -n 2 "$D/wrk.txt"))" >&2; exit 1; }
callgrind_annotate --threshold=100 --inclusive=yes "$F" >"$D/incl.txt" 2>/dev/null
IR=$(awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1; exit}' "$D/incl.txt")
echo "$PROXY https h1 conns=4 requests=$REQS Ir=$IR per_request=$(python3 -c "print(round($IR/$REQS))")"
[[ $PROXY == haproxy ]] && exit 0
# Inclusive instructions per request of the TLS paths (a handshake of
# each of wrk's 4 connections falls in the counted window too).
python3 - "$D/incl.txt" "$REQS" <<'PY'
import re, sys
want = [
    ("TLS read (TlsStream::poll_read, incl. the recv)", r"<tokio_rustls::server::TlsStream<IO> as tokio::io::async_read::AsyncRead>::poll_read"),
    ("  of which process_new_packets", r"rustls::conn::ConnectionCore<Data>::process_new_packets"),
    ("  of which AES-GCM open", r"ring::aead::algorithm::aes_gcm_open"),
    ("TLS write (Stream::poll_write, incl. the send)", r"<tokio_rustls::common::Stream<IO,C> as tokio::io::async_write::AsyncWrite>::poll_write$"),
    ("  of which AES-GCM seal", r"ring::aead::algorithm::aes_gcm_seal"),
    ("  of which write_tls", r"rustls::vecbuf::ChunkVecBuffer::write_to"),
    ("handshakes (MidHandshake::poll)", r"<tokio_rustls::common::handshake::MidHandshake<IS> as core::future::future::Future>::poll"),
]
n = int(sys.argv[2])
rows = {}
for line in open(sys.argv[1]):
    m = re.match(r"\s*([\d,]+) \([^)]*\)\s+\S*?:(.*) \[", line)
    if m:
        rows.setdefault(m.group(2), int(m.group(1).replace(",", "")))
for label, pat in want:
    v = next((x for k, x in rows.items() if re.fullmatch(pat, k)), None)
    print(f"  {label}: {round(v / n) if v else '-'} per request")
PY
