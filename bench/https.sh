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
# interleaved: each repeat measures every proxy once per figure, figure by
# figure (the proxies' order rotates between repeats), each measurement
# after an optional wait for a quiet machine. The table shows each figure's median over the repeats with its
# spread (min–max), and the ratios of hopgate's medians to the others'.
# Every single measurement is kept in results.tsv (with --keep).
# For HTTP/1.1 and HTTP/2 it also keeps, per request, the TCP segments the
# whole machine sent (/proc/net/snmp OutSegs) and the proxy's context
# switches (all its threads: all, and the involuntary ones, i.e.
# preemptions), how busy the load generator's CPU and the proxy's CPU
# were (% of the run, all processes: the proxy shares its CPU with the
# origin) and the steal time of each (% of the run the hypervisor ran
# something else on that virtual CPU), and prints their medians: a slow run
# with an idle proxy CPU was held up elsewhere, and one with steal time ran
# on a busy host (its CPU per request rises too). With --strace S it then attaches `strace -c -f` to each proxy
# for an S-second HTTP/1.1 (and HTTP/2) run and prints its system calls per
# request by name; with --perf DIR it samples each hopgate under HTTP/1.1
# load (`perf record -e cpu-clock -g`) and writes `perf report` to DIR.
# Talks to 127.0.0.1 only; kills only the processes it started.
#
# Usage: bash bench/https.sh [--duration S] [--repeat N] [--wait-quiet S]
#                            [--only LIST] [--figures LIST] [--strace S]
#                            [--perf DIR] [--no-build] [--keep]
#   --repeat N       measurements per proxy and figure (default 3)
#   --wait-quiet S   before each measurement wait up to S s for the machine
#                    to be < QUIET_PCT % busy (default 15) over 1 s (default 0)
#   --only LIST      proxies: nginx,haproxy,hopgate,hopgate-base (default
#                    nginx,haproxy,hopgate; hopgate-base = HOPGATE_BASE_BIN,
#                    for an interleaved before/after of two builds)
#   --figures LIST   h1,h2,full,resumed (default all four)
# Environment: HOPGATE_BIN (default target/release/hopgate), HOPGATE_BASE_BIN,
#   HOPGATE_ENV (extra VAR=VALUE words for hopgate, e.g. an experiment switch),
#   HOPGATE_BASE_ENV (the same for hopgate-base),
#   LOADGEN_CPU (default 0), PROXY_CPU (default 1), CONNS (default 16),
#   ORIGIN_SCHED=batch (the origin under SCHED_BATCH: woken by a request,
#   it does not preempt the proxy it shares the CPU with).
set -euo pipefail

BENCH_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_DIR="$(cd "$BENCH_DIR/.." && pwd)"
DURATION=5
REPEAT=3
WAIT_QUIET=0
QUIET_PCT="${QUIET_PCT:-15}"
NO_BUILD=0
KEEP=0
ONLY="nginx,haproxy,hopgate"
FIGURES="h1,h2,full,resumed"
STRACE=0
PERF_DIR=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --duration) DURATION="$2"; shift ;;
    --duration=*) DURATION="${1#*=}" ;;
    --repeat) REPEAT="$2"; shift ;;
    --repeat=*) REPEAT="${1#*=}" ;;
    --wait-quiet) WAIT_QUIET="$2"; shift ;;
    --wait-quiet=*) WAIT_QUIET="${1#*=}" ;;
    --only) ONLY="$2"; shift ;;
    --figures) FIGURES="$2"; shift ;;
    --strace) STRACE="$2"; shift ;;
    --perf) PERF_DIR="$2"; shift ;;
    --no-build) NO_BUILD=1 ;;
    --keep) KEEP=1 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "https.sh: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
[[ $REPEAT =~ ^[1-9][0-9]*$ ]] || { echo "https.sh: --repeat must be a positive integer" >&2; exit 2; }
[[ $WAIT_QUIET =~ ^[0-9]+$ ]] || { echo "https.sh: --wait-quiet must be whole seconds" >&2; exit 2; }
[[ $STRACE =~ ^[0-9]+$ ]] || { echo "https.sh: --strace must be whole seconds" >&2; exit 2; }
IFS=',' read -r -a PROXIES <<<"$ONLY"
for p in "${PROXIES[@]}"; do
  case "$p" in nginx|haproxy|hopgate|hopgate-base) ;; *) echo "https.sh: unknown proxy '$p'" >&2; exit 2 ;; esac
done
has_fig() { [[ ",$FIGURES," == *",$1,"* ]]; }
if [[ $STRACE -gt 0 ]]; then command -v strace >/dev/null || { echo "https.sh: strace is missing" >&2; exit 1; }; fi
if [[ -n $PERF_DIR ]]; then
  command -v perf >/dev/null || { echo "https.sh: perf is missing" >&2; exit 1; }
  mkdir -p "$PERF_DIR"; PERF_DIR="$(cd "$PERF_DIR" && pwd)"
fi
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
HOPGATE_BASE_BIN="${HOPGATE_BASE_BIN:-}"
if [[ ",$ONLY," == *",hopgate-base,"* && ! -x $HOPGATE_BASE_BIN ]]; then
  echo "https.sh: hopgate-base needs HOPGATE_BASE_BIN" >&2; exit 1
fi

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

read -r P_ORIGIN P_NGINX P_HAPROXY P_HOPGATE P_ADMIN P_BASE P_BASE_ADMIN < <(python3 - <<'EOF'
import socket
socks = [socket.socket() for _ in range(7)]
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
sed -e "s/127.0.0.1:$P_HOPGATE\$/127.0.0.1:$P_BASE/" -e "s/127.0.0.1:$P_ADMIN }/127.0.0.1:$P_BASE_ADMIN }/" \
  "$TMP/hopgate.yaml" >"$TMP/hopgate-base.yaml"

# ORIGIN_SCHED=batch runs the origin under SCHED_BATCH: woken by a
# request, it no longer preempts the proxy it shares the CPU with.
ORIGIN=("${ON_PROXY[@]}")
[[ ${ORIGIN_SCHED:-} == batch ]] && ORIGIN=(chrt -b 0 "${ON_PROXY[@]}")
"${ORIGIN[@]}" "$NGINX_BIN" -p "$TMP/origin" -c "$TMP/origin/nginx.conf" -e "$TMP/origin/error.log" &
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
      # shellcheck disable=SC2086
      env HOPGATE_WORKER_THREADS=1 RUST_LOG=warn ${HOPGATE_ENV:-} "${ON_PROXY[@]}" "$HOPGATE_BIN" run --config "$TMP/hopgate.yaml" >"$TMP/hopgate.out" 2>"$TMP/hopgate.err" &
      pids=($!); PIDS+=($!); port=$P_HOPGATE ;;
    hopgate-base)
      # shellcheck disable=SC2086
      env HOPGATE_WORKER_THREADS=1 RUST_LOG=warn ${HOPGATE_BASE_ENV:-} "${ON_PROXY[@]}" "$HOPGATE_BASE_BIN" run --config "$TMP/hopgate-base.yaml" >"$TMP/hopgate-base.out" 2>"$TMP/hopgate-base.err" &
      pids=($!); PIDS+=($!); port=$P_BASE ;;
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
for proxy in "${PROXIES[@]}"; do start "$proxy"; done
# One line per measurement: repeat, proxy, figure, per second, CPU µs each,
# and for h1/h2 what measure_end prints ("-" elsewhere).
RAW="$TMP/results.tsv"
: >"$RAW"
record() {
  local a=("$@")
  while ((${#a[@]} < 12)); do a+=(-); done
  (IFS=$'\t'; echo "${a[*]}") >>"$RAW"
}
rate() { python3 -c "print(round($1/$DURATION))"; }
switches() {                 # "all involuntary" switches, all threads of the proxy
  local p
  for p in ${PROXY_PIDS[$1]}; do cat /proc/"$p"/task/*/status 2>/dev/null; done |
    awk '/^voluntary_ctxt_switches/ {v += $2} /^nonvoluntary_ctxt_switches/ {n += $2} END {print v + n, n + 0}'
}
cpu_ticks() {                # "busy steal total" ticks of CPU $1
  awk -v c="cpu$1" '$1 == c {b = $2 + $3 + $4 + $7 + $8; print b, $9, b + $9 + $5 + $6}' /proc/stat
}
# cpu_pct "B0 S0 T0" "B1 S1 T1": "busy% steal%" between two cpu_ticks
cpu_pct() {
  python3 -c "import sys; a=list(map(int,sys.argv[1].split())); b=list(map(int,sys.argv[2].split())); t=max(b[2]-a[2],1); print(round(100*(b[0]-a[0])/t), round(100*(b[1]-a[1])/t))" "$1" "$2"
}
# measure_start / measure_end PROXY: the counters around one run; the end
# prints "segs/req csw/req involuntary/req loadgen-busy% loadgen-steal%
# proxy-cpu-busy% proxy-cpu-steal%".
measure_start() { M0=($(switches "$1") $(out_segs) $(cpu_ticks "$LOADGEN_CPU") $(cpu_ticks "$PROXY_CPU")); }
measure_end() {
  local m1=($(switches "$1") $(out_segs) $(cpu_ticks "$LOADGEN_CPU") $(cpu_ticks "$PROXY_CPU"))
  echo "$(per $((m1[2] - M0[2])) "$2") $(per $((m1[0] - M0[0])) "$2") $(per $((m1[1] - M0[1])) "$2")" \
    "$(cpu_pct "${M0[*]:3:3}" "${m1[*]:3:3}") $(cpu_pct "${M0[*]:6:3}" "${m1[*]:6:3}")"
}
out_segs() { awk '/^Tcp:/ { if (!h) { for (i = 1; i <= NF; i++) if ($i == "OutSegs") c = i; h = 1 } else print $c }' /proc/net/snmp; }
per() { python3 -c "import sys; a,n=map(float,sys.argv[1:]); print('%.2f' % (a/n) if n else '-')" "$1" "$2"; }

# HTTP/1.1 over TLS, keep-alive, after a 1 s warm-up.
measure_h1() {
  local url="https://127.0.0.1:${PORTS[$1]}/" t0 t1 out n
  "${LOAD[@]}" wrk -t1 -c"$CONNS" -d1 "$url" >/dev/null 2>&1 || true
  t0=$(ticks "$1"); measure_start "$1"
  out=$("${LOAD[@]}" wrk -t1 -c"$CONNS" -d"$DURATION" "$url")
  t1=$(ticks "$1")
  n=$(awk '/requests in/ {print $1}' <<<"$out")
  # shellcheck disable=SC2046
  record "$2" "$1" h1 "$(rate "$n")" "$(us_per $((t1 - t0)) "$n")" $(measure_end "$1" "$n")
}
# HTTP/2 over TLS (h2load, 10 streams per connection).
measure_h2() {
  command -v h2load >/dev/null || return 0
  local url="https://127.0.0.1:${PORTS[$1]}/" t0 t1 out n
  t0=$(ticks "$1"); measure_start "$1"
  out=$("${LOAD[@]}" h2load -D "$DURATION" -c "$CONNS" -m 10 -t 1 "$url" 2>&1 || true)
  t1=$(ticks "$1")
  n=$(awk '/^requests:/ {print $8}' <<<"$out")
  # shellcheck disable=SC2046
  [[ -n $n && $n != 0 ]] && record "$2" "$1" h2 "$(rate "$n")" "$(us_per $((t1 - t0)) "$n")" $(measure_end "$1" "$n")
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
  k=$(( (r - 1) % ${#PROXIES[@]} ))
  order=("${PROXIES[@]:$k}" "${PROXIES[@]:0:$k}")
  # Figure by figure, every proxy in turn: the proxies' measurements of
  # one figure are next to each other in time, so a slow spell of the
  # machine (tens of seconds on this VM) falls on all of them alike rather
  # than on whichever proxy's four figures it happened to cover.
  for f in h1 h2 full resumed; do
    has_fig "$f" || continue
    for proxy in "${order[@]}"; do
      log "repeat $r/$REPEAT: $f $proxy"
      wait_quiet
      case $f in
        h1) measure_h1 "$proxy" "$r" ;;
        h2) measure_h2 "$proxy" "$r" ;;
        full) measure_hs "$proxy" "$r" -new ;;
        resumed) measure_hs "$proxy" "$r" -reuse ;;
      esac
    done
  done
done

# strace_run PROXY FIGURE: the proxy's system calls during an S-second run.
STRACED="$TMP/strace.tsv"    # proxy figure requests name calls
: >"$STRACED"
strace_run() {
  local args=() p spid so="$TMP/strace-$1-$2.txt" out n i url="https://127.0.0.1:${PORTS[$1]}/"
  for p in ${PROXY_PIDS[$1]}; do args+=(-p "$p"); done
  timeout -s INT $((STRACE + 10)) strace -c -f -q -o "$so" "${args[@]}" 2>/dev/null &
  spid=$!; PIDS+=("$spid")
  sleep 0.5
  if [[ $2 == h1 ]]; then
    out=$("${LOAD[@]}" wrk -t1 -c"$CONNS" -d"$STRACE" "$url" 2>&1 || true)
    n=$(awk '/requests in/ {print $1}' <<<"$out")
  else
    out=$("${LOAD[@]}" h2load -D "$STRACE" -c "$CONNS" -m 10 -t 1 "$url" 2>&1 || true)
    n=$(awk '/^requests:/ {print $8}' <<<"$out")
  fi
  kill -INT "$spid" 2>/dev/null || true
  for ((i = 0; i < 50; i++)); do [[ -s $so ]] && ! kill -0 "$spid" 2>/dev/null && break; sleep 0.1; done
  wait "$spid" 2>/dev/null || true
  [[ -n $n && $n != 0 && -s $so ]] || { log "$1 $2: no strace count"; return 0; }
  awk -v t="$1" -v f="$2" -v n="$n" '/^-/ || /^% time/ || NF < 5 { next } { print t "\t" f "\t" n "\t" $NF "\t" $4 }' "$so" >>"$STRACED"
}
if [[ $STRACE -gt 0 ]]; then
  for proxy in "${PROXIES[@]}"; do
    for f in h1 h2; do
      has_fig "$f" || continue
      [[ $f == h2 ]] && ! command -v h2load >/dev/null && continue
      log "strace $proxy $f"; strace_run "$proxy" "$f"
    done
  done
fi
# A profile of each hopgate under HTTP/1.1 load.
if [[ -n $PERF_DIR ]]; then
  for proxy in "${PROXIES[@]}"; do
    [[ $proxy == hopgate* ]] || continue
    log "perf $proxy"
    timeout -s INT $((DURATION + 10)) perf record -q -e cpu-clock -g -p "$(echo "${PROXY_PIDS[$proxy]}" | tr ' ' ,)" \
      -o "$PERF_DIR/perf-$proxy.data" -- sleep "$DURATION" 2>/dev/null &
    pl=$!; PIDS+=("$pl")
    "${LOAD[@]}" wrk -t1 -c"$CONNS" -d"$DURATION" "https://127.0.0.1:${PORTS[$proxy]}/" >/dev/null 2>&1 || true
    wait "$pl" 2>/dev/null || true
    perf report -i "$PERF_DIR/perf-$proxy.data" --no-children --sort sym --stdio 2>/dev/null |
      grep -v '^$' | head -n 80 >"$PERF_DIR/perf-$proxy.txt" || true
  done
fi

python3 - "$RAW" "$REPEAT" "$ONLY" "$STRACED" <<'PY'
import collections, statistics, sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
cells = collections.defaultdict(lambda: [[] for _ in range(9)])
for _, proxy, figure, rate, cpu, *more in rows:
    cells[(proxy, figure)][0].append(float(rate))
    for i, v in enumerate([cpu] + more, 1):
        if v != "-":
            cells[(proxy, figure)][i].append(float(v))
def med(xs):
    return statistics.median(xs) if xs else None
def cell(xs, fmt):
    if not xs:
        return "-"
    m = fmt % med(xs)
    return m if len(xs) == 1 else "%s (%s–%s)" % (m, fmt % min(xs), fmt % max(xs))
figures = [("h1", "HTTP/1.1 req/s", "µs/req"), ("h2", "HTTP/2 req/s", "µs/req"),
           ("full", "full handshakes/s", "µs/handshake"), ("resumed", "resumed handshakes/s", "µs/resumed")]
proxies = sys.argv[3].split(",")
print(f"Medians of {sys.argv[2]} interleaved repeats (min–max); CPU is the proxy's user+system time.\n")
print("| proxy | " + " | ".join(f"{t} | CPU {u}" for _, t, u in figures) + " |")
print("| --- |" + " ---: | ---: |" * len(figures))
for p in proxies:
    print(f"| {p} | " + " | ".join(cell(cells[(p, f)][0], "%.0f") + " | " + cell(cells[(p, f)][1], "%.1f") for f, _, _ in figures) + " |")
print()
print("\nPer request: TCP segments sent on the machine, proxy context switches (all;")
print("involuntary); busy and steal % of the load generator's CPU and of the proxy's CPU.\n")
print("| proxy | figure | segs/req | csw/req | invol./req | loadgen CPU busy % | steal % | proxy CPU busy % | steal % |")
print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
for p in proxies:
    for f in ("h1", "h2"):
        if cells[(p, f)][2]:
            print(f"| {p} | {f} | " + " | ".join(cell(cells[(p, f)][i], "%.2f" if i < 5 else "%.0f") for i in (2, 3, 4, 5, 6, 7, 8)) + " |")
straced = collections.defaultdict(dict)
for l in open(sys.argv[4]):
    t, f, n, name, calls = l.rstrip("\n").split("\t")
    straced[(t, f)][name] = int(calls) / int(n)
if straced:
    print("\nSystem calls per request (strace -c -f, one window each):\n")
    print("| proxy | figure | total | by name |")
    print("| --- | --- | ---: | --- |")
    for (t, f), d in straced.items():
        tot = d.pop("total", sum(d.values()))
        names = ", ".join(f"{k} {v:.2f}" for k, v in sorted(d.items(), key=lambda kv: -kv[1]) if v >= 0.01)
        print(f"| {t} | {f} | {tot:.2f} | {names} |")
print()
print("| hopgate ÷ | " + " | ".join(f"{t} | CPU {u}" for _, t, u in figures) + " |")
print("| --- |" + " ---: | ---: |" * len(figures))
for other in [p for p in ["nginx", "haproxy", "hopgate-base"] if p in proxies]:
    out = []
    for f, _, _ in figures:
        for i in (0, 1):
            a, b = med(cells[("hopgate", f)][i]), med(cells[(other, f)][i])
            out.append("%.2f" % (a / b) if a and b else "-")
    print(f"| {other} | " + " | ".join(out) + " |")
PY
