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
# The three proxies run side by side for the whole run and are measured
# interleaved: each repeat measures every proxy once (the order rotates
# between repeats), each measurement after an optional wait for a quiet
# machine. The table shows each figure's median over the repeats with its
# spread (min–max), and the ratios of hopgate's medians to the others'.
# Every single measurement is kept in results.tsv (with --keep).
# Talks to 127.0.0.1 only; kills only the processes it started.
#
# Usage: bash bench/https.sh [--duration S] [--repeat N] [--wait-quiet S]
#                            [--no-build] [--keep]
#   --repeat N       measurements per proxy and figure (default 3)
#   --wait-quiet S   before each measurement wait up to S s for the machine
#                    to be < QUIET_PCT % busy (default 15) over 1 s (default 0)
# Environment: HOPGATE_BIN (default target/release/hopgate),
#   LOADGEN_CPU (default 0), PROXY_CPU (default 1), CONNS (default 16).
set -euo pipefail

BENCH_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_DIR="$(cd "$BENCH_DIR/.." && pwd)"
DURATION=5
REPEAT=3
WAIT_QUIET=0
QUIET_PCT="${QUIET_PCT:-15}"
NO_BUILD=0
KEEP=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --duration) DURATION="$2"; shift ;;
    --duration=*) DURATION="${1#*=}" ;;
    --repeat) REPEAT="$2"; shift ;;
    --repeat=*) REPEAT="${1#*=}" ;;
    --wait-quiet) WAIT_QUIET="$2"; shift ;;
    --wait-quiet=*) WAIT_QUIET="${1#*=}" ;;
    --no-build) NO_BUILD=1 ;;
    --keep) KEEP=1 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "https.sh: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
[[ $REPEAT =~ ^[1-9][0-9]*$ ]] || { echo "https.sh: --repeat must be a positive integer" >&2; exit 2; }
[[ $WAIT_QUIET =~ ^[0-9]+$ ]] || { echo "https.sh: --wait-quiet must be whole seconds" >&2; exit 2; }
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
  # Up to 3 s for a graceful stop (hopgate drains its connections), then KILL.
  for _ in $(seq 30); do
    local alive=0
    for p in "${PIDS[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
    ((alive)) || break
    sleep 0.1
  done
  for p in "${PIDS[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
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

# start NAME: starts the proxy; PROXY_PIDS[NAME] holds the processes whose
# CPU counts, PORTS[NAME] its port.
declare -A PROXY_PIDS PORTS
start() {
  local pids=() port
  case "$1" in
    nginx)
      "${ON_PROXY[@]}" "$NGINX_BIN" -p "$TMP/nginx" -c "$TMP/nginx/nginx.conf" -e "$TMP/nginx/error.log" &
      pids=($!); PIDS+=($!); port=$P_NGINX ;;
    haproxy)
      "${ON_PROXY[@]}" "$HAPROXY_BIN" -f "$TMP/haproxy/haproxy.cfg" -db >"$TMP/haproxy/log" 2>&1 &
      pids=($!); PIDS+=($!); port=$P_HAPROXY ;;
    hopgate)
      HOPGATE_WORKER_THREADS=1 RUST_LOG=warn "${ON_PROXY[@]}" "$HOPGATE_BIN" run --config "$TMP/hopgate.yaml" >"$TMP/hopgate.out" 2>"$TMP/hopgate.err" &
      pids=($!); PIDS+=($!); port=$P_HOPGATE ;;
  esac
  wait_port "$port" || { echo "$1 did not start" >&2; exit 1; }
  sleep 0.3
  local p c
  for p in "${pids[@]}"; do
    for c in $(ps -o pid= --ppid "$p" 2>/dev/null); do pids+=("$c"); PIDS+=("$c"); done
  done
  PROXY_PIDS[$1]="${pids[*]}"
  PORTS[$1]=$port
}
ticks() { local p s=0 f; for p in ${PROXY_PIDS[$1]}; do f=$(cat "/proc/$p/stat" 2>/dev/null) || continue; f=${f##*) }; set -- $f; s=$((s + ${12} + ${13})); done; echo "$s"; }
HZ=$(getconf CLK_TCK)
us_per() { python3 -c "import sys; t,n,hz=map(float,sys.argv[1:]); print('%.1f' % (t/hz*1e6/n) if n else '-')" "$1" "$2" "$HZ"; }
source "$BENCH_DIR/lib/quiet.sh"

URL_HOST=bench.test
PROXIES=(nginx haproxy hopgate)
for proxy in "${PROXIES[@]}"; do start "$proxy"; done
# One line per measurement: repeat, proxy, figure, per second, CPU µs each.
RAW="$TMP/results.tsv"
: >"$RAW"
record() { printf '%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" "$5" >>"$RAW"; }
rate() { python3 -c "print(round($1/$DURATION))"; }

# HTTP/1.1 over TLS, keep-alive, after a 1 s warm-up.
measure_h1() {
  local url="https://127.0.0.1:${PORTS[$1]}/" t0 t1 out n
  "${LOAD[@]}" wrk -t1 -c"$CONNS" -d1 "$url" >/dev/null 2>&1 || true
  t0=$(ticks "$1")
  out=$("${LOAD[@]}" wrk -t1 -c"$CONNS" -d"$DURATION" "$url")
  t1=$(ticks "$1")
  n=$(awk '/requests in/ {print $1}' <<<"$out")
  record "$2" "$1" h1 "$(rate "$n")" "$(us_per $((t1 - t0)) "$n")"
}
# HTTP/2 over TLS (h2load, 10 streams per connection).
measure_h2() {
  command -v h2load >/dev/null || return 0
  local url="https://127.0.0.1:${PORTS[$1]}/" t0 t1 out n
  t0=$(ticks "$1")
  out=$("${LOAD[@]}" h2load -D "$DURATION" -c "$CONNS" -m 10 -t 1 "$url" 2>&1 || true)
  t1=$(ticks "$1")
  n=$(awk '/^requests:/ {print $8}' <<<"$out")
  [[ -n $n && $n != 0 ]] && record "$2" "$1" h2 "$(rate "$n")" "$(us_per $((t1 - t0)) "$n")"
  return 0
}
# Handshakes: a new TLS 1.3 connection per request, full (-new) or resumed
# (-reuse).
measure_hs() {
  local t0 t1 out n figure=full
  [[ $3 == -reuse ]] && figure=resumed
  t0=$(ticks "$1")
  out=$("${LOAD[@]}" openssl s_time -connect "127.0.0.1:${PORTS[$1]}" -www / -time "$DURATION" "$3" 2>&1 || true)
  t1=$(ticks "$1")
  n=$(awk '/connections in [0-9.]+ real seconds/ {print $1; exit}' <<<"$out")
  [[ -n $n ]] || n=0
  record "$2" "$1" "$figure" "$(rate "$n")" "$(us_per $((t1 - t0)) "$n")"
}

for ((r = 1; r <= REPEAT; r++)); do
  # The order rotates, so no proxy always runs first or last.
  order=("${PROXIES[@]:$(( (r - 1) % 3 ))}" "${PROXIES[@]:0:$(( (r - 1) % 3 ))}")
  for proxy in "${order[@]}"; do
    log "repeat $r/$REPEAT: $proxy"
    wait_quiet; measure_h1 "$proxy" "$r"
    wait_quiet; measure_h2 "$proxy" "$r"
    wait_quiet; measure_hs "$proxy" "$r" -new
    wait_quiet; measure_hs "$proxy" "$r" -reuse
  done
done

python3 - "$RAW" "$REPEAT" <<'PY'
import collections, statistics, sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
cells = collections.defaultdict(lambda: ([], []))
for _, proxy, figure, rate, cpu in rows:
    cells[(proxy, figure)][0].append(float(rate))
    if cpu != "-":
        cells[(proxy, figure)][1].append(float(cpu))
def med(xs):
    return statistics.median(xs) if xs else None
def cell(xs, fmt):
    if not xs:
        return "-"
    m = fmt % med(xs)
    return m if len(xs) == 1 else "%s (%s–%s)" % (m, fmt % min(xs), fmt % max(xs))
figures = [("h1", "HTTP/1.1 req/s", "µs/req"), ("h2", "HTTP/2 req/s", "µs/req"),
           ("full", "full handshakes/s", "µs/handshake"), ("resumed", "resumed handshakes/s", "µs/resumed")]
proxies = ["nginx", "haproxy", "hopgate"]
print(f"Medians of {sys.argv[2]} interleaved repeats (min–max); CPU is the proxy's user+system time.\n")
print("| proxy | " + " | ".join(f"{t} | CPU {u}" for _, t, u in figures) + " |")
print("| --- |" + " ---: | ---: |" * len(figures))
for p in proxies:
    print(f"| {p} | " + " | ".join(cell(cells[(p, f)][0], "%.0f") + " | " + cell(cells[(p, f)][1], "%.1f") for f, _, _ in figures) + " |")
print()
print("| hopgate ÷ | " + " | ".join(f"{t} | CPU {u}" for _, t, u in figures) + " |")
print("| --- |" + " ---: | ---: |" * len(figures))
for other in ["nginx", "haproxy"]:
    out = []
    for f, _, _ in figures:
        for i in (0, 1):
            a, b = med(cells[("hopgate", f)][i]), med(cells[(other, f)][i])
            out.append("%.2f" % (a / b) if a and b else "-")
    print(f"| {other} | " + " | ".join(out) + " |")
PY
