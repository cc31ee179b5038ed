#!/usr/bin/env bash
# bench/https.sh — HTTPS termination beside NGINX and HAProxy
# (`bash bench/run.sh --scenario https` runs this).
#
# nginx, haproxy and hopgate each terminate TLS 1.3 with the same test
# certificate (ECDSA P-256, made here with openssl) and proxy to one local
# nginx origin over keep-alive HTTP/1.1; one worker/thread each; the load
# generator on one CPU, proxy and origin on the other. Per proxy:
#   - req/s and proxy CPU per request, HTTP/1.1 over TLS, keep-alive (wrk);
#   - req/s and CPU per request, HTTP/2 over TLS (h2load, when installed);
#   - handshakes per second, full and resumed (openssl s_time -new/-reuse,
#     one request each), with proxy CPU per handshake.
# CPU is the proxy's user+system time from /proc (all its processes).
# Talks to 127.0.0.1 only; kills only the processes it started.
#
# Usage: bash bench/https.sh [--duration S] [--no-build] [--keep]
# Environment: HOPGATE_BIN (default target/release/hopgate),
#   LOADGEN_CPU (default 0), PROXY_CPU (default 1), CONNS (default 16).
set -euo pipefail

BENCH_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_DIR="$(cd "$BENCH_DIR/.." && pwd)"
DURATION=5
NO_BUILD=0
KEEP=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --duration) DURATION="$2"; shift ;;
    --duration=*) DURATION="${1#*=}" ;;
    --no-build) NO_BUILD=1 ;;
    --keep) KEEP=1 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "https.sh: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
HOPGATE_BIN="${HOPGATE_BIN:-$REPO_DIR/target/release/hopgate}"
LOADGEN_CPU="${LOADGEN_CPU:-0}"
PROXY_CPU="${PROXY_CPU:-1}"
CONNS="${CONNS:-16}"
LOAD=(taskset -c "$LOADGEN_CPU")
ON_PROXY=(taskset -c "$PROXY_CPU")
log() { printf '[https %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

for t in nginx haproxy wrk openssl taskset; do
  command -v "$t" >/dev/null || [[ -x /usr/sbin/$t ]] || { echo "https.sh: $t is missing" >&2; exit 1; }
done
NGINX_BIN="$(command -v nginx || echo /usr/sbin/nginx)"
HAPROXY_BIN="$(command -v haproxy || echo /usr/sbin/haproxy)"
if [[ $NO_BUILD == 0 ]]; then
  (cd "$REPO_DIR" && cargo build --release -p hopgate >&2)
fi
[[ -x $HOPGATE_BIN ]] || { echo "https.sh: no $HOPGATE_BIN" >&2; exit 1; }

TMP="$(mktemp -d /tmp/hopgate-https.XXXXXX)"
chmod 755 "$TMP"
PIDS=()
cleanup() {
  local p
  for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  sleep 0.3
  for p in "${PIDS[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
  if [[ $KEEP == 1 ]]; then log "kept $TMP"; else rm -rf "$TMP"; fi
}
trap cleanup EXIT

read -r P_ORIGIN P_NGINX P_HAPROXY P_HOPGATE P_ADMIN < <(python3 - <<'EOF'
import socket
socks = [socket.socket() for _ in range(5)]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in socks))
for s in socks:
    s.close()
EOF
)
wait_port() { local i; for ((i = 0; i < 200; i++)); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.05; done; return 1; }

# The certificate all three serve.
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 30 \
  -keyout "$TMP/site.key" -out "$TMP/site.pem" -subj /CN=bench.test \
  -addext subjectAltName=DNS:bench.test 2>/dev/null
cat "$TMP/site.pem" "$TMP/site.key" >"$TMP/site.combined.pem"
chmod 644 "$TMP"/site.*

nginx_head() {
  cat <<EOF
worker_processes 1;
daemon off;
pid $1/nginx.pid;
error_log $1/error.log warn;
events { worker_connections 8192; }
http {
    access_log off;
    client_body_temp_path $1/cb; proxy_temp_path $1/px; fastcgi_temp_path $1/fc;
    uwsgi_temp_path $1/uw; scgi_temp_path $1/sc;
    keepalive_requests 10000000;
    keepalive_timeout 75s;
EOF
}
mkdir -p "$TMP/origin" "$TMP/nginx" "$TMP/haproxy"
{ nginx_head "$TMP/origin"; cat <<EOF
    server { listen 127.0.0.1:$P_ORIGIN; location / { return 200; } }
}
EOF
} >"$TMP/origin/nginx.conf"
{ nginx_head "$TMP/nginx"; cat <<EOF
    upstream o { server 127.0.0.1:$P_ORIGIN; keepalive 64; }
    server {
        listen 127.0.0.1:$P_NGINX ssl http2;
        ssl_certificate $TMP/site.pem;
        ssl_certificate_key $TMP/site.key;
        ssl_protocols TLSv1.3;
        ssl_session_cache shared:S:10m;
        ssl_session_tickets on;
        location / { proxy_pass http://o; proxy_http_version 1.1; proxy_set_header Connection ""; }
    }
}
EOF
} >"$TMP/nginx/nginx.conf"
cat >"$TMP/haproxy/haproxy.cfg" <<EOF
global
    nbthread 1
    tune.ssl.default-dh-param 2048
defaults
    mode http
    timeout connect 5s
    timeout client 60s
    timeout server 60s
    http-reuse always
frontend f
    bind 127.0.0.1:$P_HAPROXY ssl crt $TMP/site.combined.pem alpn h2,http/1.1 ssl-min-ver TLSv1.3
    default_backend b
backend b
    server o 127.0.0.1:$P_ORIGIN
EOF
cat >"$TMP/hopgate.yaml" <<EOF
listeners:
  - name: https
    address: 127.0.0.1:$P_HOPGATE
    tls: { certificates: [ { cert: site.pem, key: site.key, sni: [bench.test] } ] }
admin: { address: 127.0.0.1:$P_ADMIN }
services:
  - name: o
    nodes: [ { id: o1, address: "127.0.0.1:$P_ORIGIN" } ]
routes:
  - { id: all, match: { path_prefix: / }, service: o }
EOF

"${ON_PROXY[@]}" "$NGINX_BIN" -p "$TMP/origin" -c "$TMP/origin/nginx.conf" -e "$TMP/origin/error.log" &
PIDS+=($!)
wait_port "$P_ORIGIN" || { echo "origin did not start" >&2; exit 1; }

# start NAME: starts the proxy, sets PROXY_PIDS (the processes whose CPU counts).
start() {
  case "$1" in
    nginx)
      "${ON_PROXY[@]}" "$NGINX_BIN" -p "$TMP/nginx" -c "$TMP/nginx/nginx.conf" -e "$TMP/nginx/error.log" &
      PROXY_PIDS=($!); PIDS+=($!); PORT=$P_NGINX ;;
    haproxy)
      "${ON_PROXY[@]}" "$HAPROXY_BIN" -f "$TMP/haproxy/haproxy.cfg" -db >"$TMP/haproxy/log" 2>&1 &
      PROXY_PIDS=($!); PIDS+=($!); PORT=$P_HAPROXY ;;
    hopgate)
      HOPGATE_WORKER_THREADS=1 RUST_LOG=warn "${ON_PROXY[@]}" "$HOPGATE_BIN" run --config "$TMP/hopgate.yaml" >"$TMP/hopgate.out" 2>"$TMP/hopgate.err" &
      PROXY_PIDS=($!); PIDS+=($!); PORT=$P_HOPGATE ;;
  esac
  wait_port "$PORT" || { echo "$1 did not start" >&2; exit 1; }
  sleep 0.3
  local p c
  for p in "${PROXY_PIDS[@]}"; do
    for c in $(ps -o pid= --ppid "$p" 2>/dev/null); do PROXY_PIDS+=("$c"); PIDS+=("$c"); done
  done
}
stop() { local p; for p in "${PROXY_PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done; sleep 0.5; }
ticks() { local p s=0 f; for p in "${PROXY_PIDS[@]}"; do f=$(cat "/proc/$p/stat" 2>/dev/null) || continue; f=${f##*) }; set -- $f; s=$((s + ${12} + ${13})); done; echo "$s"; }
HZ=$(getconf CLK_TCK)
us_per() { python3 -c "import sys; t,n,hz=map(float,sys.argv[1:]); print('%.1f' % (t/hz*1e6/n) if n else '-')" "$1" "$2" "$HZ"; }

URL_HOST=bench.test
RESULTS="$TMP/results.md"
printf '| proxy | h1 req/s | h1 CPU µs/req | h2 req/s | h2 CPU µs/req | full handshakes/s | CPU µs/handshake | resumed handshakes/s | CPU µs/resumed |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n' >"$RESULTS"
for proxy in nginx haproxy hopgate; do
  log "$proxy"
  start "$proxy"
  url="https://127.0.0.1:$PORT/"
  # HTTP/1.1 over TLS, keep-alive.
  "${LOAD[@]}" wrk -t1 -c"$CONNS" -d1 "$url" >/dev/null 2>&1 || true
  t0=$(ticks)
  out=$("${LOAD[@]}" wrk -t1 -c"$CONNS" -d"$DURATION" "$url")
  t1=$(ticks)
  n=$(awk '/requests in/ {print $1}' <<<"$out")
  h1_rps=$(python3 -c "print(round($n/$DURATION))")
  h1_cpu=$(us_per $((t1 - t0)) "$n")
  # HTTP/2 over TLS.
  h2_rps=-; h2_cpu=-
  if command -v h2load >/dev/null; then
    t0=$(ticks)
    out=$("${LOAD[@]}" h2load -D "$DURATION" -c "$CONNS" -m 10 -t 1 "$url" 2>&1 || true)
    t1=$(ticks)
    n=$(awk '/^requests:/ {print $8}' <<<"$out")
    if [[ -n $n && $n != 0 ]]; then
      h2_rps=$(python3 -c "print(round($n/$DURATION))")
      h2_cpu=$(us_per $((t1 - t0)) "$n")
    fi
  fi
  # Handshakes: a new TLS 1.3 connection per request, full then resumed.
  hs() {
    local t0 t1 out n
    t0=$(ticks)
    out=$("${LOAD[@]}" openssl s_time -connect "127.0.0.1:$PORT" -www / -time "$DURATION" "$1" 2>&1 || true)
    t1=$(ticks)
    n=$(awk '/connections in [0-9.]+ real seconds/ {print $1; exit}' <<<"$out")
    [[ -n $n ]] || n=0
    echo "$(python3 -c "print(round($n/$DURATION))") $(us_per $((t1 - t0)) "$n")"
  }
  read -r full_hs full_cpu < <(hs -new)
  read -r res_hs res_cpu < <(hs -reuse)
  printf '| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n' "$proxy" "$h1_rps" "$h1_cpu" "$h2_rps" "$h2_cpu" \
    "$full_hs" "$full_cpu" "$res_hs" "$res_cpu" >>"$RESULTS"
  stop
done
cat "$RESULTS"
