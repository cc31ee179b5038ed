#!/usr/bin/env bash
# bench/syscalls.sh — what the kernel does per request for each proxy.
#
# For hopgate, NGINX, HAProxy and the L4 floor (HAProxy in mode tcp), each
# proxying round-robin to two local nginx origins with the settings of
# bench/run.sh (one worker/thread, upstream keep-alive, no access log, the
# load generator on one CPU, proxy + origins on the other), at 1 and 16
# connections (h1 with wrk, 0 B answers by default; --proto h2c: h2load
# -t1 -m10 over h2c, the proxies configured for h2c as bench/run.sh does,
# the floor forwarding to origin 1's h2c port), it prints per request:
#   - system calls of the proxy (`strace -c -f` attached to all its
#     processes for a separate, bounded window), in total and by name;
#   - TCP segments sent on the whole machine (/proc/net/snmp OutSegs
#     deltas, the counter `nstat` shows, ÷ requests: 4.00 is one segment
#     each way on each leg; other processes' traffic adds to it);
#   - the proxy's user and system µs (/proc/PID/stat ticks ÷ requests);
#   - the proxy's context switches (voluntary + involuntary, all its
#     threads) and the load generator's voluntary ones (how often wrk went
#     to sleep, so how often an answer had to wake it).
# With --sides, one more traced window per point and target (`strace -f
# -yy`: every call with its socket's addresses) splits the proxy's calls
# by side: client (the proxy's listening port), upstream (an origin's
# port), other (epoll, timers, ...), with the bytes per read and write.
# Tracing every call slows the proxy a lot, which changes how requests
# batch: read its counts for the pattern, not as exact figures.
# CPU, segments and switches are the medians of --repeat interleaved runs
# (the order of the targets rotates each repeat); strace runs once per
# point and target, after them (it slows the proxy; counts stay exact).
# With --perf DIR it also samples each proxy at the largest connection
# count (`perf record -e cpu-clock -g`, kernel symbols included) and writes
# `perf report --sort sym` per target to DIR (the perf.data files beside,
# for `perf report -i DIR/perf-TARGET-cN.data`).
#
# It only talks to 127.0.0.1, picks free ports below the ephemeral range,
# every wrk/strace/perf run is bounded in time, and it stops only the
# processes it started (by PID), removing its temporary directory.
#
# Usage: bash bench/syscalls.sh [options]
#   --duration S      seconds per CPU run (default 4)
#   --window S        seconds of each strace window and perf sample (default 3)
#   --repeat N        CPU runs per point and target (default 3)
#   --conns LIST      connection counts (default 1,16)
#   --proto P         h1 (wrk, default) or h2c (h2load -t1 -cN -m10)
#   --size S          answer size: 0 (default) or 4k
#   --sides           also the per-side split (see above)
#   --only LIST       targets: floor,nginx,haproxy,hopgate,hopgate-base
#                     (default floor,nginx,haproxy,hopgate; hopgate-base =
#                     the build at HOPGATE_BASE_BIN, for a before/after)
#   --no-strace       skip the strace windows
#   --perf-stat       count the calls of those windows with `perf stat`
#                     on the syscall tracepoints instead of strace -c (a
#                     few names; barely slows the proxy, so requests batch
#                     as in the CPU runs)
#   --perf DIR        also write perf profiles to DIR (see above)
#   --keep            keep the temporary directory
#   -h, --help
# Environment: HOPGATE_BIN (default target/release/hopgate), HOPGATE_BASE_BIN,
#   LOADGEN_CPU (default 0), PROXY_CPU (default 1).
set -euo pipefail

BENCH_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_DIR="$(cd "$BENCH_DIR/.." && pwd)"

DURATION=4
WINDOW=3
REPEAT=3
CONNS="1,16"
PROTO=h1
SIZE=0
SIDES=0
ONLY="floor,nginx,haproxy,hopgate"
STRACE=1
PERF_STAT=0
PERF_DIR=""
KEEP=0
usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d' | sed 's/^# \{0,1\}//'; }
while [[ $# -gt 0 ]]; do
  case "$1" in
    --duration) DURATION="$2"; shift ;;
    --window) WINDOW="$2"; shift ;;
    --repeat) REPEAT="$2"; shift ;;
    --conns) CONNS="$2"; shift ;;
    --proto) PROTO="$2"; shift ;;
    --size) SIZE="$2"; shift ;;
    --sides) SIDES=1 ;;
    --only) ONLY="$2"; shift ;;
    --no-strace) STRACE=0 ;;
    --perf-stat) PERF_STAT=1 ;;
    --perf) PERF_DIR="$2"; shift ;;
    --keep) KEEP=1 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "syscalls.sh: unknown option: $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done
for v in DURATION WINDOW REPEAT; do
  [[ ${!v} =~ ^[1-9][0-9]*$ ]] || { echo "syscalls.sh: --${v,,} must be a positive integer" >&2; exit 2; }
done
[[ $PROTO == h1 || $PROTO == h2c ]] || { echo "syscalls.sh: --proto must be h1 or h2c" >&2; exit 2; }
[[ $SIZE == 0 || $SIZE == 4k ]] || { echo "syscalls.sh: --size must be 0 or 4k" >&2; exit 2; }
[[ $CONNS =~ ^[1-9][0-9]*(,[1-9][0-9]*)*$ ]] || { echo "syscalls.sh: --conns must be a comma-separated list of counts" >&2; exit 2; }
IFS=',' read -r -a CONN_LIST <<<"$CONNS"
IFS=',' read -r -a TARGETS <<<"$ONLY"
for t in "${TARGETS[@]}"; do
  case "$t" in floor|nginx|haproxy|hopgate|hopgate-base) ;; *) echo "syscalls.sh: unknown target '$t'" >&2; exit 2 ;; esac
done

log() { printf '[syscalls %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { printf '[syscalls] ERROR: %s\n' "$*" >&2; exit 1; }
need=(wrk taskset python3 nginx haproxy)
[[ $PROTO == h2c ]] && need+=(h2load)
[[ $STRACE == 1 || $SIDES == 1 ]] && need+=(strace)
[[ -n $PERF_DIR || $PERF_STAT == 1 ]] && need+=(perf)
export PATH="$PATH:/usr/sbin:/sbin"
for c in "${need[@]}"; do command -v "$c" >/dev/null || die "$c is not installed (bench/run.sh installs the load tools; strace and perf: apt-get install strace linux-perf)"; done
NGINX_BIN="$(command -v nginx)"
HAPROXY_BIN="$(command -v haproxy)"
LOADGEN_CPU="${LOADGEN_CPU:-0}"
PROXY_CPU="${PROXY_CPU:-1}"
[[ $(nproc) -ge 2 ]] || { LOADGEN_CPU=0; PROXY_CPU=0; }
ON_LOAD=(taskset -c "$LOADGEN_CPU")
ON_PROXY=(taskset -c "$PROXY_CPU")

# ----------------------------------------------------- process tracking ----
TMP="$(mktemp -d /tmp/hopgate-syscalls.XXXXXX)"
chmod 755 "$TMP"
TRACKED=()
starttime() { local s; s="$(cat "/proc/$1/stat" 2>/dev/null)" || return 1; s="${s##*) }"; set -- $s; echo "${20}"; }
alive() {
  local want=$2 s; s="$(cat "/proc/$1/stat" 2>/dev/null)" || return 1
  s="${s##*) }"; set -- $s
  [[ $1 != Z && $1 != X && ${20} == "$want" ]]
}
track() { local st; st="$(starttime "$1")" && TRACKED+=("$1:$st"); return 0; }
children_of() { ps -o pid= --ppid "$1" 2>/dev/null | tr -d ' ' || true; }
track_tree() { local c; track "$1"; for c in $(children_of "$1"); do track "$c"; done; }
stop_pid() {
  local pid=$1 st="" e i
  for e in "${TRACKED[@]}"; do [[ ${e%%:*} == "$pid" ]] && st=${e#*:}; done
  [[ -n $st ]] || return 0
  alive "$pid" "$st" && kill -TERM "$pid" 2>/dev/null || true
  for ((i = 0; i < 50; i++)); do alive "$pid" "$st" || break; sleep 0.1; done
  alive "$pid" "$st" && kill -KILL "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}
cleanup() {
  local rc=$? e i any
  trap - EXIT INT TERM
  for e in "${TRACKED[@]}"; do alive "${e%%:*}" "${e#*:}" && kill -TERM "${e%%:*}" 2>/dev/null || true; done
  for ((i = 0; i < 30; i++)); do
    any=0
    for e in "${TRACKED[@]}"; do alive "${e%%:*}" "${e#*:}" && any=1; done
    [[ $any == 0 ]] && break
    sleep 0.1
  done
  for e in "${TRACKED[@]}"; do alive "${e%%:*}" "${e#*:}" && kill -KILL "${e%%:*}" 2>/dev/null || true; done
  if [[ $KEEP == 1 ]]; then log "kept $TMP"; else rm -rf "$TMP"; fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

free_ports() {
  python3 - "$1" <<'EOF'
import random, socket, sys
n = int(sys.argv[1])
try:
    lo = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
except Exception:
    lo = 32768
lo_pick, hi_pick = (20000, lo - 1) if lo > 21000 else (lo + 20000, 65000)
out = []
while len(out) < n:
    p = random.randint(lo_pick, hi_pick)
    if p in out:
        continue
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", p))
    except OSError:
        continue
    finally:
        s.close()
    out.append(p)
print(" ".join(map(str, out)))
EOF
}
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
wait_port() {
  local port=$1 pid=$2 secs=${3:-10} i
  for ((i = 0; i < secs * 20; i++)); do
    port_open "$port" && return 0
    [[ -d /proc/$pid ]] || return 1
    sleep 0.05
  done
  return 1
}

# ------------------------------------------------ origins and proxies ----
ORIGIN_FILES="$TMP/www"
mkdir -p "$ORIGIN_FILES"; chmod 755 "$ORIGIN_FILES"
head -c 4096 /dev/zero | tr '\0' 'a' >"$ORIGIN_FILES/4k"; chmod 644 "$ORIGIN_FILES/4k"
nginx_common() {             # the preamble of bench/run.sh's nginx configs
  cat <<EOF
worker_processes 1;
daemon off;
pid $1/nginx.pid;
error_log $1/error.log warn;
events { worker_connections 8192; }
http {
    access_log off;
    client_body_temp_path $1/client_body;
    proxy_temp_path $1/proxy;
    fastcgi_temp_path $1/fastcgi;
    uwsgi_temp_path $1/uwsgi;
    scgi_temp_path $1/scgi;
    keepalive_requests 10000000;
    keepalive_timeout 75s;
    sendfile on;
    tcp_nopush on;
    default_type application/octet-stream;
EOF
}
declare -A ORIGIN_PID ORIGIN_PORT ORIGIN_H2PORT H1PORT H2PORT GRPCPORT PROXY_PID
GRPC_ORIGINS=()
start_origin() {             # start_origin NAME PORT [H2PORT]
  local name=$1 dir="$TMP/$1" pid
  ORIGIN_PORT[$name]=$2; ORIGIN_H2PORT[$name]=${3:-}
  mkdir -p "$dir"; chmod 755 "$dir"
  { nginx_common "$dir"; cat <<EOF
    server {
        listen 127.0.0.1:$2 backlog=4096;
$( [[ -n ${3:-} ]] && echo "        listen 127.0.0.1:$3 backlog=4096 http2;" )
        root $ORIGIN_FILES;
        location = /0 { return 200 ""; }
        location / { }
    }
}
EOF
  } >"$dir/nginx.conf"
  "${ON_PROXY[@]}" "$NGINX_BIN" -p "$dir" -c "$dir/nginx.conf" -e "$dir/error.log" >>"$dir/stdout.log" 2>&1 &
  pid=$!; track "$pid"
  wait_port "$2" "$pid" 10 || die "origin $name did not start"
  track_tree "$pid"
  ORIGIN_PID[$name]=$pid
}
has() { local x; for x in "${TARGETS[@]}"; do [[ $x == "$1" ]] && return 0; done; return 1; }
skip_target() { die "$1 cannot run: $2"; }
# The proxies' configurations and start-up, as bench/run.sh has them.
source "$BENCH_DIR/proxies.sh"

# ----------------------------------------------------------- measurement ----
ticks() {                    # "utime stime minflt" summed over the PIDs
  local u=0 k=0 f=0 p s
  for p in "$@"; do
    s="$(cat "/proc/$p/stat" 2>/dev/null)" || continue
    s="${s##*) }"; set -- $s
    u=$((u + ${12})); k=$((k + ${13})); f=$((f + ${8}))
  done
  echo "$u $k $f"
}
switches() {                 # "voluntary involuntary" over all threads of the PIDs
  local p
  for p in "$@"; do cat /proc/"$p"/task/*/status 2>/dev/null; done |
    awk '/^voluntary_ctxt_switches/ {v += $2} /^nonvoluntary_ctxt_switches/ {n += $2} END {printf "%d %d\n", v, n}'
}
out_segs() { awk '/^Tcp:/ { if (!h) { for (i = 1; i <= NF; i++) if ($i == "OutSegs") c = i; h = 1 } else print $c }' /proc/net/snmp; }
requests_of() {             # wrk's "N requests in", h2load's "requests: N total, N started, N done"
  sed -n -e 's/^ *\([0-9][0-9]*\) requests in .*/\1/p' -e 's/^requests: .* \([0-9][0-9]*\) done,.*/\1/p' "$1" | head -n1
}
# load_argv TARGET CONNS SECS: the load generator's command line, in LOAD
load_argv() {
  if [[ $PROTO == h1 ]]; then
    LOAD=(wrk -t1 -c"$2" -d"${3}s" "http://127.0.0.1:${H1PORT[$1]}/$SIZE")
  else
    LOAD=(h2load -t1 -c"$2" -m10 -D "$3" "http://127.0.0.1:${H2PORT[$1]}/$SIZE")
  fi
}
proxy_pids() { echo "$1"; children_of "$1"; }
CLK_TCK="$(getconf CLK_TCK)"
RAW="$TMP/raw.tsv"           # target conns rep requests user_us sys_us segs csw_v csw_n wrk_vcsw minflt
: >"$RAW"

# cpu_run TARGET CONNS REP: one wrk/h2load run, its per-request figures to RAW
cpu_run() {
  local t=$1 c=$2 rep=$3 pids out a b s0 s1 x0 x1 wv n
  pids="$(proxy_pids "${PROXY_PID[$t]}")"
  out="$TMP/wrk-$t-$c-$rep.out"
  load_argv "$t" "$c" "$DURATION"
  read -r -a a <<<"$(ticks $pids)"; read -r -a x0 <<<"$(switches $pids)"; s0=$(out_segs)
  # wrk under a wrapper that prints its voluntary context switches (how
  # often it went to sleep waiting for an answer) once it has exited
  wv="$("${ON_LOAD[@]}" python3 -c '
import resource, subprocess, sys
with open(sys.argv[1], "w") as f:
    subprocess.run(sys.argv[2:], stdout=f, stderr=subprocess.STDOUT)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_nvcsw)
' "$out" "${LOAD[@]}")" || wv=0
  s1=$(out_segs); read -r -a b <<<"$(ticks $pids)"; read -r -a x1 <<<"$(switches $pids)"
  n="$(requests_of "$out")"
  [[ -n $n && $n -gt 0 ]] || { log "  $t c$c: ${LOAD[0]} made no request ($(tail -n 2 "$out" | tr '\n' ' '))"; return 0; }
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$t" "$c" "$rep" "$n" \
    "$(( (b[0] - a[0]) * 1000000 / CLK_TCK ))" "$(( (b[1] - a[1]) * 1000000 / CLK_TCK ))" \
    "$((s1 - s0))" "$((x1[0] - x0[0]))" "$((x1[1] - x0[1]))" "$wv" "$((b[2] - a[2]))" >>"$RAW"
}

# strace_run TARGET CONNS: syscalls of the proxy during a WINDOW-s wrk run
STRACED="$TMP/strace.tsv"    # target conns requests name calls (name "total" too)
: >"$STRACED"
strace_run() {
  local t=$1 c=$2 pids p args=() spid out="$TMP/strace-wrk-$1-$2.out" so="$TMP/strace-$1-$2.txt" n i
  pids="$(proxy_pids "${PROXY_PID[$t]}")"
  if [[ $PERF_STAT == 1 ]]; then perf_stat_run "$t" "$c" "$pids"; return 0; fi
  for p in $pids; do args+=(-p "$p"); done
  timeout -s INT $((WINDOW + 10)) strace -c -f -q -o "$so" "${args[@]}" 2>/dev/null &
  spid=$!; track "$spid"
  sleep 0.5                  # attached (strace -c prints nothing until it stops)
  load_argv "$t" "$c" "$WINDOW"
  "${ON_LOAD[@]}" "${LOAD[@]}" >"$out" 2>&1 || true
  kill -INT "$spid" 2>/dev/null || true
  for ((i = 0; i < 50; i++)); do [[ -s $so ]] && ! kill -0 "$spid" 2>/dev/null && break; sleep 0.1; done
  wait "$spid" 2>/dev/null || true
  n="$(requests_of "$out")"
  [[ -n $n && $n -gt 0 && -s $so ]] || { log "  $t c$c: no strace count"; return 0; }
  # strace -c: "% time seconds usecs/call calls [errors] syscall"; total last
  awk -v t="$t" -v c="$c" -v n="$n" '
    /^-/ || /^% time/ || NF < 5 { next }
    { print t "\t" c "\t" n "\t" $NF "\t" $4 }
  ' "$so" >>"$STRACED"
}

# perf_stat_run TARGET CONNS PIDS: the same window counted by perf stat
STAT_NAMES="read write readv writev recvfrom sendto recvmsg sendmsg epoll_wait epoll_pwait epoll_ctl futex accept4 close setsockopt madvise mmap munmap sched_yield timerfd_settime"
perf_stat_run() {
  local t=$1 c=$2 pids so="$TMP/perfstat-$1-$2.csv" out="$TMP/perfstat-load-$1-$2.out" ev="raw_syscalls:sys_enter" x pl n
  for x in $STAT_NAMES; do ev+=",syscalls:sys_enter_$x"; done
  timeout -s INT $((WINDOW + 10)) perf stat -x, -o "$so" -e "$ev" -p "$(echo $3 | tr ' ' ',')" -- sleep $((WINDOW + 1)) 2>/dev/null &
  pl=$!; track "$pl"
  sleep 0.5
  load_argv "$t" "$c" "$WINDOW"
  "${ON_LOAD[@]}" "${LOAD[@]}" >"$out" 2>&1 || true
  wait "$pl" 2>/dev/null || true
  n="$(requests_of "$out")"
  [[ -n $n && $n -gt 0 && -s $so ]] || { log "  $t c$c: no perf stat count"; return 0; }
  # the window is half a second longer than the load on each side: the
  # proxy is idle then (a few epoll/timer calls)
  awk -F, -v t="$t" -v c="$c" -v n="$n" '
    $3 == "raw_syscalls:sys_enter" { print t "\t" c "\t" n "\ttotal\t" $1; next }
    $3 ~ /^syscalls:sys_enter_/ && $1 > 0 { sub(/^syscalls:sys_enter_/, "", $3); print t "\t" c "\t" n "\t" $3 "\t" $1 }
  ' "$so" >>"$STRACED"
}

# sides_run TARGET CONNS: every call of the proxy for a WINDOW-s run, with
# its socket's addresses (strace -yy), split by side (see the header)
SIDED="$TMP/sides.tsv"       # target conns requests side name calls bytes
: >"$SIDED"
sides_run() {
  local t=$1 c=$2 pids p args=() spid out="$TMP/sides-load-$1-$2.out" so="$TMP/sides-$1-$2.txt" n i
  local listen="${H1PORT[$t]},${H2PORT[$t]}" origins="${ORIGIN_PORT[o1]},${ORIGIN_PORT[o2]},${ORIGIN_H2PORT[o1]}"
  pids="$(proxy_pids "${PROXY_PID[$t]}")"
  for p in $pids; do args+=(-p "$p"); done
  timeout -s INT $((WINDOW + 10)) strace -f -yy -qq -s 0 -o "$so" "${args[@]}" 2>/dev/null &
  spid=$!; track "$spid"
  sleep 0.5
  load_argv "$t" "$c" "$WINDOW"
  "${ON_LOAD[@]}" "${LOAD[@]}" >"$out" 2>&1 || true
  kill -INT "$spid" 2>/dev/null || true
  for ((i = 0; i < 50; i++)); do kill -0 "$spid" 2>/dev/null || break; sleep 0.1; done
  wait "$spid" 2>/dev/null || true
  n="$(requests_of "$out")"
  [[ -n $n && $n -gt 0 && -s $so ]] || { log "  $t c$c: no traced window"; return 0; }
  python3 - "$so" "$t" "$c" "$n" "$listen" "$origins" >>"$SIDED" <<'PY'
import collections, re, sys
path, t, c, n, listen, origins = sys.argv[1:]
listen = {int(x) for x in listen.split(",") if x}
origins = {int(x) for x in origins.split(",") if x}
io = ("read", "recvfrom", "recvmsg", "readv", "write", "sendto", "sendmsg", "writev")
call = re.compile(r"^(\d+)\s+(\w+)\((.*)$")
resumed = re.compile(r"^(\d+)\s+<\.\.\. (\w+) resumed>.*\)\s+=\s+(-?\d+)")
sock = re.compile(r"^\d+<TCP(?:v6)?:\[[^\]]*?:(\d+)->[^\]]*?:(\d+)\]>")
ret = re.compile(r"\)\s+=\s+(-?\d+)")
counts = collections.Counter()
nbytes = collections.Counter()
waiting = {}
def side_of(args):
    m = sock.match(args)
    if not m:
        return "other"
    local, peer = int(m.group(1)), int(m.group(2))
    if local in listen:
        return "client"
    if peer in origins:
        return "upstream"
    return "other"
def add(side, name, r):
    counts[(side, name)] += 1
    if name in io and r is not None and r > 0:
        nbytes[(side, name)] += r
for line in open(path, errors="replace"):
    m = resumed.match(line)
    if m:
        pid, name, r = m.group(1), m.group(2), int(m.group(3))
        side = waiting.pop(pid, "other")
        add(side, name, r)
        continue
    m = call.match(line)
    if not m:
        continue
    pid, name, rest = m.groups()
    side = side_of(rest)
    if rest.rstrip().endswith("<unfinished ...>"):
        waiting[pid] = side
        continue
    r = ret.search(rest)
    add(side, name, int(r.group(1)) if r else None)
for (side, name), k in counts.items():
    print(f"{t}\t{c}\t{n}\t{side}\t{name}\t{k}\t{nbytes[(side, name)]}")
PY
}

# perf_run TARGET CONNS: a kernel+user profile of the proxy under load
perf_run() {
  local t=$1 c=$2 pids pl out="$TMP/perf-wrk-$1.out" data="$PERF_DIR/perf-$1-c$2.data" n
  pids="$(proxy_pids "${PROXY_PID[$t]}" | paste -sd,)"
  timeout -s INT $((WINDOW + 10)) perf record -q -e cpu-clock -g -p "$pids" -o "$data" -- sleep "$WINDOW" 2>/dev/null &
  pl=$!; track "$pl"
  load_argv "$t" "$c" "$WINDOW"
  "${ON_LOAD[@]}" "${LOAD[@]}" >"$out" 2>&1 || true
  wait "$pl" 2>/dev/null || true
  n="$(requests_of "$out")"
  {
    echo "# $t, $c connections, ${WINDOW} s: $n requests"
    perf report -i "$data" --sort sym --no-children --stdio -g none 2>/dev/null | grep -v '^$' | head -n 60 || true
  } >"$PERF_DIR/perf-$t-c$c.txt"
}

# --------------------------------------------------------------- the run ----
read -r -a PORTS <<<"$(free_ports 14)"
start_origin o1 "${PORTS[0]}" "${PORTS[9]}"; start_origin o2 "${PORTS[1]}"
H1PORT[nginx]=${PORTS[2]}; H1PORT[haproxy]=${PORTS[3]}; H1PORT[floor]=${PORTS[4]}
H1PORT[hopgate]=${PORTS[5]}; H1PORT[hopgate-base]=${PORTS[7]}
# h2c: its own port on nginx, HAProxy and the floor; hopgate serves h1
# and h2c on one
H2PORT[nginx]=${PORTS[10]}; H2PORT[haproxy]=${PORTS[11]}; H2PORT[floor]=${PORTS[12]}
H2PORT[hopgate]=${PORTS[5]}; H2PORT[hopgate-base]=${PORTS[7]}
for t in "${TARGETS[@]}"; do
  case "$t" in
    nginx) write_nginx_proxy "$TMP/nginx" "${H1PORT[nginx]}" "${H2PORT[nginx]}" 0 o1 o2
           start_nginx_proxy "$TMP/nginx" "${H1PORT[nginx]}"; PROXY_PID[nginx]=$STARTED_PID ;;
    haproxy) write_haproxy "$TMP/haproxy" "${H1PORT[haproxy]}" "${H2PORT[haproxy]}" 0 o1 o2
             start_haproxy "$TMP/haproxy" "${H1PORT[haproxy]}"; PROXY_PID[haproxy]=$STARTED_PID ;;
    floor) write_haproxy_tcp "$TMP/floor" "${H1PORT[floor]}" "${H2PORT[floor]}" o1 o2
           start_haproxy "$TMP/floor" "${H1PORT[floor]}"; PROXY_PID[floor]=$STARTED_PID ;;
    hopgate|hopgate-base)
      bin_kind=""; admin=${PORTS[6]}
      if [[ $t == hopgate-base ]]; then
        [[ -n $HOPGATE_BASE_BIN && -x $HOPGATE_BASE_BIN ]] || die "hopgate-base: set HOPGATE_BASE_BIN to a hopgate binary"
        bin_kind=base; admin=${PORTS[8]}
      fi
      [[ -x $HOPGATE_BIN ]] || die "no hopgate binary at $HOPGATE_BIN (cargo build --release -p hopgate)"
      write_hopgate "$TMP/$t" "${H1PORT[$t]}" "$admin" o1 o2
      start_hopgate "$TMP/$t" "${H1PORT[$t]}" "$bin_kind" || die "$t: ${HOPGATE_FAIL:-did not start}"
      PROXY_PID[$t]=$STARTED_PID ;;
  esac
done
[[ -n $PERF_DIR ]] && mkdir -p "$PERF_DIR"
log "$PROTO, /$SIZE; targets: ${TARGETS[*]}; connections: ${CONN_LIST[*]}; $REPEAT x ${DURATION} s CPU runs, ${WINDOW} s strace windows"
for t in "${TARGETS[@]}"; do   # warm-up: upstream pools filled, pages faulted in
  load_argv "$t" 64 1
  "${ON_LOAD[@]}" "${LOAD[@]}" >/dev/null 2>&1 || true
done
n=${#TARGETS[@]}
for c in "${CONN_LIST[@]}"; do
  for ((rep = 1; rep <= REPEAT; rep++)); do
    for ((i = 0; i < n; i++)); do
      t=${TARGETS[$(( (i + rep - 1) % n ))]}
      cpu_run "$t" "$c" "$rep"
    done
  done
  if [[ $STRACE == 1 ]]; then for t in "${TARGETS[@]}"; do strace_run "$t" "$c"; done; fi
  if [[ $SIDES == 1 ]]; then for t in "${TARGETS[@]}"; do sides_run "$t" "$c"; done; fi
done
if [[ -n $PERF_DIR ]]; then
  c=${CONN_LIST[-1]}
  for t in "${TARGETS[@]}"; do perf_run "$t" "$c"; done
  log "profiles: $PERF_DIR/perf-TARGET-c$c.txt"
fi

python3 - "$RAW" "$STRACED" "$(cut -d' ' -f1-3 /proc/loadavg)" "$SIDED" <<'PY'
import collections, statistics, sys
raw, straced, load, sided = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
runs = collections.defaultdict(list)
for line in open(raw):
    t, c, rep, n, u, k, segs, cv, cn, wv, flt = line.rstrip("\n").split("\t")
    n = int(n)
    runs[(t, int(c))].append(dict(
        rps=n, user=int(u) / n, sys=int(k) / n, segs=int(segs) / n,
        csw=(int(cv) + int(cn)) / n, inv=int(cn) / n,
        wrk=(int(wv) / n) if wv.strip().isdigit() else float("nan"), flt=int(flt) / n))
calls = collections.defaultdict(dict)
reqs = {}
for line in open(straced):
    t, c, n, name, k = line.rstrip("\n").split("\t")
    reqs[(t, int(c))] = int(n)
    calls[(t, int(c))][name] = int(k)
med = lambda xs: statistics.median(xs)
print("| target | conns | syscalls/req | by name (per req) | TCP segs/req | user µs/req | sys µs/req | proxy csw/req (invol.) | loadgen sleeps/req | page faults/req | runs |")
print("|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|")
for key in sorted(runs, key=lambda k: (k[1], ["floor", "nginx", "haproxy", "hopgate", "hopgate-base"].index(k[0]))):
    r = runs[key]
    sc, by = "—", "—"
    if key in calls:
        n = reqs[key]
        tot = calls[key].get("total", sum(calls[key].values()))
        sc = f"{tot / n:.2f}"
        top = sorted(((k, v) for k, v in calls[key].items() if k != "total"), key=lambda kv: -kv[1])
        by = ", ".join(f"{k} {v / n:.2f}" for k, v in top if v / n >= 0.01)
    us = [x["sys"] for x in r]
    print(f"| {key[0]} | {key[1]} | {sc} | {by} | {med([x['segs'] for x in r]):.2f} | "
          f"{med([x['user'] for x in r]):.1f} | {med(us):.1f} ({min(us):.1f}–{max(us):.1f}) | "
          f"{med([x['csw'] for x in r]):.2f} ({med([x['inv'] for x in r]):.2f}) | "
          f"{med([x['wrk'] for x in r]):.2f} | {med([x['flt'] for x in r]):.3f} | {len(r)} |")
print(f"\nload average at the end: {load}; sys µs/req: median (min–max) of the runs")
print("\nsys µs/req of each run, in run order:")
for key in sorted(runs, key=lambda k: (k[1], k[0])):
    print(f"  {key[0]} c{key[1]}: " + " ".join(f"{x['sys']:.1f}" for x in runs[key]))
sides = collections.defaultdict(lambda: collections.defaultdict(dict))
for line in open(sided):
    t, c, n, side, name, k, b = line.rstrip("\n").split("\t")
    sides[(t, int(c))][side][name] = (int(k) / int(n), int(b), int(k))
if sides:
    print("\nper side (strace -f -yy window; calls per request, bytes per call of reads/writes):")
    print("| target | conns | side | calls/req | by name (per req; bytes per call) |")
    print("|---|---:|---|---:|---|")
    for key in sorted(sides, key=lambda k: (k[1], k[0])):
        for side in ("client", "upstream", "other"):
            by = sides[key].get(side, {})
            tot = sum(v[0] for v in by.values())
            parts = []
            for name, (per, b, k) in sorted(by.items(), key=lambda kv: -kv[1][0]):
                if per < 0.01:
                    continue
                parts.append(f"{name} {per:.2f}" + (f" ({b / k:.0f} B)" if b else ""))
            print(f"| {key[0]} | {key[1]} | {side} | {tot:.2f} | {', '.join(parts)} |")
PY

