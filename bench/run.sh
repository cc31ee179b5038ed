#!/usr/bin/env bash
# bench/run.sh — hopgate load benchmark beside NGINX and HAProxy.
#
# One command runs a side-by-side comparison on this machine and stops by
# itself:  direct-to-origin, the L4 floor (HAProxy in mode tcp), nginx,
# haproxy and hopgate, each proxying round-robin to two local nginx origins,
# with the same worker/thread count (1), upstream keep-alive, no access logs,
# and the same CPU pinning (load generator on one CPU, proxy + origins on
# the other). CPU per request is split into user and system time.
#
# It only talks to 127.0.0.1, picks free ports below the ephemeral range,
# tracks the PID of everything it starts and kills only those on exit.
#
# Usage: bash bench/run.sh [options]
#   --quick             smoke run: 1 repeat, 2 s, 2-point matrix, no restart
#                       scenario unless --scenario asks for it (< 60 s once
#                       hopgate is built)
#   --repeat N          repeats per matrix point (default 3)
#   --duration S        seconds per run (default 5)
#   --only a,b          targets: direct,floor,floor-hdr,nginx,haproxy,hopgate,
#                       hopgate-log,hopgate-pgo,hopgate-base (default: all
#                       but floor-hdr, hopgate-log, hopgate-pgo and
#                       hopgate-base; floor = HAProxy in mode tcp, a pure L4
#                       forward; floor-hdr = the same floor, with the load
#                       generator sending the six lines hopgate adds to
#                       every upstream request, so the origins parse what
#                       they parse behind hopgate; hopgate-log =
#                       hopgate with its access log on, written to a file;
#                       hopgate-pgo = the profile-guided build of
#                       scripts/build-pgo.sh, HOPGATE_PGO_BIN; hopgate-base =
#                       any other hopgate build, HOPGATE_BASE_BIN, e.g. an
#                       older commit's, for a before/after in the same run)
#   --scenario S        matrix | restart | all | https (default all; --quick:
#                       matrix). https: TLS termination beside nginx and
#                       haproxy (bench/https.sh; takes --duration, --repeat,
#                       --wait-quiet, --no-build,
#                       --keep)
#   --no-build          do not run `cargo build --release -p hopgate`
#   --strict            exit 1 when a requested target cannot run
#                       (default: warn and skip it, e.g. hopgate not built yet)
#   --wait-quiet S      before each repeat of a matrix point (and each restart
#                       run), wait up to S seconds for the
#                       machine to be quiet (< QUIET_PCT % busy, default 15,
#                       over 1 s) — for shared, noisy machines (default 0)
#   --retry-noisy P     redo a matrix run (up to 2 more times, after waiting
#                       for quiet) when other processes used more than P % of
#                       the machine during it; the least noisy try is kept
#   --points LIST       matrix points instead of the default set, comma-separated
#                       PROTO-SIZE-CONNS, e.g. h1-0-1,h1-0-16,h2c-4k-16
#                       (PROTO h1|h2c|grpc, SIZE 0|4k|64k). grpc: unary
#                       calls (h2load POSTs a 16-byte message with
#                       content-type application/grpc and TE: trailers) to
#                       two nghttpd origins that answer a SIZE message and
#                       the trailer grpc-status: 0, each proxy speaking
#                       HTTP/2 upstream (nginx grpc_pass, HAProxy proto h2,
#                       hopgate protocol: http2)
#   --keep              keep the temporary directory (configs, raw logs)
#   --out DIR           where latest.md / results go (default bench/out)
#   -h, --help
# Environment: HOPGATE_BIN (default target/release/hopgate),
#   HOPGATE_PGO_BIN (default target/pgo/hopgate), HOPGATE_BASE_BIN (no
#   default; a build that takes the same configuration file),
#   LOADGEN_CPU (default 0), PROXY_CPU (default 1).
set -euo pipefail

BENCH_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_DIR="$(cd "$BENCH_DIR/.." && pwd)"
ORIG_ARGS="$*"

REPEAT=3
DURATION=5
QUICK=0
ONLY="direct,floor,nginx,haproxy,hopgate"
SCENARIO=""
NO_BUILD=0
STRICT=0
KEEP=0
WAIT_QUIET=0
RETRY_NOISY=""
QUIET_PCT="${QUIET_PCT:-15}"
OUT_DIR="$BENCH_DIR/out"
POINTS=""
repeat_set=0
duration_set=0

usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d' | sed 's/^# \{0,1\}//'; }

while [[ $# -gt 0 ]]; do
  case "$1" in
    --quick) QUICK=1 ;;
    --repeat) REPEAT="$2"; repeat_set=1; shift ;;
    --repeat=*) REPEAT="${1#*=}"; repeat_set=1 ;;
    --duration) DURATION="$2"; duration_set=1; shift ;;
    --duration=*) DURATION="${1#*=}"; duration_set=1 ;;
    --only) ONLY="$2"; shift ;;
    --only=*) ONLY="${1#*=}" ;;
    --scenario) SCENARIO="$2"; shift ;;
    --scenario=*) SCENARIO="${1#*=}" ;;
    --no-build) NO_BUILD=1 ;;
    --strict) STRICT=1 ;;
    --keep) KEEP=1 ;;
    --retry-noisy) RETRY_NOISY="$2"; shift ;;
    --retry-noisy=*) RETRY_NOISY="${1#*=}" ;;
    --wait-quiet) WAIT_QUIET="$2"; shift ;;
    --wait-quiet=*) WAIT_QUIET="${1#*=}" ;;
    --points) POINTS="$2"; shift ;;
    --points=*) POINTS="${1#*=}" ;;
    --out) OUT_DIR="$2"; shift ;;
    --out=*) OUT_DIR="${1#*=}" ;;
    -h|--help) usage; exit 0 ;;
    *) echo "run.sh: unknown option: $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done

if [[ $QUICK == 1 ]]; then
  [[ $repeat_set == 1 ]] || REPEAT=1
  [[ $duration_set == 1 ]] || DURATION=2
  [[ -n $SCENARIO ]] || SCENARIO=matrix
fi
[[ -n $SCENARIO ]] || SCENARIO=all
if [[ $SCENARIO == https ]]; then
  https_args=(--duration "$DURATION" --repeat "$REPEAT" --wait-quiet "$WAIT_QUIET")
  [[ $NO_BUILD == 1 ]] && https_args+=(--no-build)
  [[ $KEEP == 1 ]] && https_args+=(--keep)
  exec bash "$BENCH_DIR/https.sh" "${https_args[@]}"
fi
case "$SCENARIO" in matrix|restart|all) ;; *) echo "run.sh: --scenario must be matrix, restart, all or https" >&2; exit 2 ;; esac
[[ $REPEAT =~ ^[1-9][0-9]*$ ]] || { echo "run.sh: --repeat must be a positive integer" >&2; exit 2; }
[[ -z $RETRY_NOISY || $RETRY_NOISY =~ ^[0-9]+$ ]] || { echo "run.sh: --retry-noisy must be a whole percentage" >&2; exit 2; }
[[ $WAIT_QUIET =~ ^[0-9]+$ ]] || { echo "run.sh: --wait-quiet must be whole seconds" >&2; exit 2; }
[[ $DURATION =~ ^[1-9][0-9]*$ ]] || { echo "run.sh: --duration must be whole seconds >= 1" >&2; exit 2; }

# The matrix points, as "PROTO SIZE CONNS".
POINT_LIST=()
if [[ -n $POINTS ]]; then
  IFS=',' read -r -a _pts <<<"$POINTS"
  for x in "${_pts[@]}"; do
    [[ $x =~ ^(h1|h2c|grpc)-(0|4k|64k)-[1-9][0-9]*$ ]] || { echo "run.sh: --points: '$x' is not PROTO-SIZE-CONNS (h1|h2c|grpc, 0|4k|64k, connections)" >&2; exit 2; }
    POINT_LIST+=("${x//-/ }")
  done
elif [[ $QUICK == 1 ]]; then
  POINT_LIST=("h1 0 16" "h2c 4k 16" "grpc 0 16")
else
  # h1 0 B with 1 connection: the added-latency point (no queueing)
  POINT_LIST=("h1 0 1" "h1 0 16" "h1 0 128" "h1 4k 16" "h1 4k 128" "h1 64k 16" "h1 64k 128" "h2c 0 16" "h2c 4k 16" "grpc 0 16")
fi
NEED_GRPC=0
for x in "${POINT_LIST[@]}"; do [[ $x == grpc* ]] && NEED_GRPC=1; done
[[ $SCENARIO == restart ]] && NEED_GRPC=0

TARGETS=()
IFS=',' read -r -a _req <<<"$ONLY"
ALL_TARGETS=(direct floor floor-hdr nginx haproxy hopgate hopgate-log hopgate-pgo hopgate-base)
for t in "${ALL_TARGETS[@]}"; do                 # canonical order
  for r in "${_req[@]}"; do [[ $r == "$t" ]] && TARGETS+=("$t"); done
done
for r in "${_req[@]}"; do
  case "$r" in direct|floor|floor-hdr|nginx|haproxy|hopgate|hopgate-log|hopgate-pgo|hopgate-base) ;; *) echo "run.sh: unknown target '$r' (${ALL_TARGETS[*]})" >&2; exit 2 ;; esac
done
[[ ${#TARGETS[@]} -gt 0 ]] || { echo "run.sh: --only selected no target" >&2; exit 2; }

log()  { printf '[bench %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
warn() { printf '[bench %s] WARNING: %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die()  { printf '[bench] ERROR: %s\n' "$*" >&2; exit 1; }
has()  { local x; for x in "${TARGETS[@]}"; do [[ $x == "$1" ]] && return 0; done; return 1; }
drop_target() {
  local keep=() x
  for x in "${TARGETS[@]}"; do [[ $x == "$1" ]] || keep+=("$x"); done
  TARGETS=("${keep[@]}")
}
skip_target() {          # skip_target NAME REASON
  SKIPPED+=("$1: $2")
  if [[ $STRICT == 1 ]]; then die "$1 cannot run: $2"; fi
  warn "skipping $1: $2"
  drop_target "$1"
}
SKIPPED=()

# ---------------------------------------------------------------- tools ----
ensure_tools() {
  local missing=()
  command -v wrk >/dev/null || missing+=(wrk)
  command -v taskset >/dev/null || missing+=(util-linux)
  command -v python3 >/dev/null || missing+=(python3)
  command -v nginx >/dev/null || [[ -x /usr/sbin/nginx ]] || missing+=(nginx-light)   # the origins
  if has haproxy || has floor; then
    command -v haproxy >/dev/null || [[ -x /usr/sbin/haproxy ]] || missing+=(haproxy)
  fi
  if [[ $SCENARIO != restart ]]; then
    command -v h2load >/dev/null || missing+=(nghttp2-client)
  fi
  if [[ $NEED_GRPC == 1 ]]; then   # the gRPC origins
    command -v nghttpd >/dev/null || [[ -x /usr/sbin/nghttpd ]] || missing+=(nghttp2-server)
  fi
  [[ ${#missing[@]} -eq 0 ]] && return 0
  command -v apt-get >/dev/null || die "missing tools (${missing[*]}) and no apt-get to install them"
  log "installing: ${missing[*]} (waiting for any running apt/dpkg to finish first)"
  local apt=(apt-get -o DPkg::Lock::Timeout=900 -y -q)
  export DEBIAN_FRONTEND=noninteractive
  if ! "${apt[@]}" install "${missing[@]}" >/dev/null 2>&1; then
    "${apt[@]}" update >/dev/null 2>&1 || warn "apt-get update failed"
    local pkgs=("${missing[@]}")
    if ! "${apt[@]}" install "${pkgs[@]}" >/dev/null 2>&1; then
      # nginx-light is not in every Debian release: fall back to nginx.
      pkgs=("${pkgs[@]/nginx-light/nginx}")
      "${apt[@]}" install "${pkgs[@]}" >/dev/null 2>&1 || die "apt-get install ${pkgs[*]} failed"
    fi
  fi
}
ensure_tools
export PATH="$PATH:/usr/sbin:/sbin"
NGINX_BIN="$(command -v nginx)"
NGHTTPD_BIN="$(command -v nghttpd || true)"
HAPROXY_BIN="$(command -v haproxy || true)"
CLK_TCK="$(getconf CLK_TCK)"

NCPU="$(nproc)"
LOADGEN_CPU="${LOADGEN_CPU:-0}"
PROXY_CPU="${PROXY_CPU:-1}"
if [[ $NCPU -lt 2 ]]; then
  warn "only $NCPU CPU: load generator and proxies share CPU 0"
  LOADGEN_CPU=0; PROXY_CPU=0
fi
ON_LOAD=(taskset -c "$LOADGEN_CPU")
ON_PROXY=(taskset -c "$PROXY_CPU")

# ----------------------------------------------------- process tracking ----
TMP="$(mktemp -d /tmp/hopgate-bench.XXXXXX)"
chmod 755 "$TMP"             # nginx workers run as nobody and read files here
TRACKED=()                   # "pid:starttime" of everything we started

starttime() { local s; s="$(cat "/proc/$1/stat" 2>/dev/null)" || return 1; s="${s##*) }"; set -- $s; echo "${20}"; }
alive() {                    # alive PID STARTTIME: same process still running (not zombie)
  local want=$2 s; s="$(cat "/proc/$1/stat" 2>/dev/null)" || return 1
  s="${s##*) }"; set -- $s
  [[ $1 != Z && $1 != X && ${20} == "$want" ]]
}
track() { local st; st="$(starttime "$1")" && TRACKED+=("$1:$st"); return 0; }
children_of() { ps -o pid= --ppid "$1" 2>/dev/null | tr -d ' ' || true; }
track_tree() { local c; track "$1"; for c in $(children_of "$1"); do track "$c"; done; }

stop_pid() {                 # stop_pid PID [SIGNAL]: signal, wait up to 5 s, then KILL
  local pid=$1 sig=${2:-TERM} st e i
  st=""
  for e in "${TRACKED[@]}"; do [[ ${e%%:*} == "$pid" ]] && st=${e#*:}; done
  [[ -n $st ]] || return 0
  local kids; kids="$(children_of "$pid")"
  alive "$pid" "$st" && kill "-$sig" "$pid" 2>/dev/null || true
  for ((i = 0; i < 50; i++)); do alive "$pid" "$st" || break; sleep 0.1; done
  if alive "$pid" "$st"; then kill -KILL "$pid" 2>/dev/null || true; fi
  wait "$pid" 2>/dev/null || true
  for e in "${TRACKED[@]}"; do       # orphaned workers we tracked, if any
    local p=${e%%:*}
    for k in $kids; do [[ $p == "$k" ]] && alive "$p" "${e#*:}" && kill -KILL "$p" 2>/dev/null; done
  done
  return 0
}

cleanup() {
  local rc=$? e pid st i any
  trap - EXIT INT TERM
  for e in "${TRACKED[@]}"; do
    pid=${e%%:*}; st=${e#*:}
    alive "$pid" "$st" && kill -TERM "$pid" 2>/dev/null || true
  done
  for ((i = 0; i < 30; i++)); do
    any=0
    for e in "${TRACKED[@]}"; do alive "${e%%:*}" "${e#*:}" && any=1; done
    [[ $any == 0 ]] && break
    sleep 0.1
  done
  for e in "${TRACKED[@]}"; do
    alive "${e%%:*}" "${e#*:}" && kill -KILL "${e%%:*}" 2>/dev/null || true
  done
  if [[ $KEEP == 1 ]]; then log "kept $TMP"; else rm -rf "$TMP"; fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ------------------------------------------------------------------ ports ----
# Free ports below the kernel's ephemeral range, so no outgoing connection
# (wrk -> proxy -> origin) can be holding one when a server (re)binds it.
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
wait_port() {                # wait_port PORT PID [SECONDS]
  local port=$1 pid=$2 secs=${3:-10} i
  for ((i = 0; i < secs * 20; i++)); do
    port_open "$port" && return 0
    [[ -d /proc/$pid ]] && [[ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" != Z ]] || return 1
    sleep 0.05
  done
  return 1
}

# ---------------------------------------------------------------- origins ----
ORIGIN_FILES="$TMP/www"
mkdir -p "$ORIGIN_FILES"
head -c 4096 /dev/zero | tr '\0' 'a' >"$ORIGIN_FILES/4k"
head -c 65536 /dev/zero | tr '\0' 'a' >"$ORIGIN_FILES/64k"
chmod 755 "$ORIGIN_FILES"; chmod 644 "$ORIGIN_FILES"/*

# The gRPC points' message files, origins and check (bench/grpc.sh).
source "$BENCH_DIR/grpc.sh"

nginx_common() {             # nginx_common PREFIX: main-context + http-context preamble
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

# start_origin NAME PORT [H2PORT] -> sets ORIGIN_PID[NAME]
declare -A ORIGIN_PID ORIGIN_PORT ORIGIN_H2PORT
write_origin_conf() {
  local name=$1 port=$2 h2port=${3:-} dir="$TMP/$1"
  mkdir -p "$dir"; chmod 755 "$dir"
  {
    nginx_common "$dir"
    cat <<EOF
    server {
        listen 127.0.0.1:$port backlog=4096;
$( [[ -n $h2port ]] && echo "        listen 127.0.0.1:$h2port backlog=4096 http2;" )
        root $ORIGIN_FILES;
        location = /0 { return 200 ""; }
        location / { }
    }
}
EOF
  } >"$dir/nginx.conf"
}
start_origin() {
  local name=$1 dir="$TMP/$1" pid
  "${ON_PROXY[@]}" "$NGINX_BIN" -p "$dir" -c "$dir/nginx.conf" -e "$dir/error.log" >>"$dir/stdout.log" 2>&1 &
  pid=$!
  track "$pid"
  wait_port "${ORIGIN_PORT[$name]}" "$pid" 10 || { cat "$dir/error.log" "$dir/stdout.log" >&2 2>/dev/null; die "origin $name did not start"; }
  [[ -z ${ORIGIN_H2PORT[$name]:-} ]] || wait_port "${ORIGIN_H2PORT[$name]}" "$pid" 10 || die "origin $name h2 port did not open"
  track_tree "$pid"
  ORIGIN_PID[$name]=$pid
}
# graceful quit (SIGQUIT = nginx -s quit) and wait for the master to exit
quit_origin() {
  local name=$1 pid=${ORIGIN_PID[$1]} st="" e i
  for e in "${TRACKED[@]}"; do [[ ${e%%:*} == "$pid" ]] && st=${e#*:}; done
  alive "$pid" "$st" && kill -QUIT "$pid" 2>/dev/null
  for ((i = 0; i < 100; i++)); do alive "$pid" "$st" || break; sleep 0.05; done
  alive "$pid" "$st" && { warn "origin $name slow to quit, sending TERM"; stop_pid "$pid" TERM; }
  wait "$pid" 2>/dev/null || true
}

# ---------------------------------------------------------------- proxies ----
declare -A H1PORT H2PORT GRPCPORT PROXY_PID
GRPC_ORIGINS=()              # the gRPC origins' names while the matrix runs
# Their configurations and start-up (bench/proxies.sh).
source "$BENCH_DIR/proxies.sh"

# ----------------------------------------------------------- measurement ----
ticks() {                    # ticks PID... -> "utime stime" summed over those processes
  local u=0 k=0 p s
  for p in "$@"; do
    s="$(cat "/proc/$p/stat" 2>/dev/null)" || continue
    s="${s##*) }"; set -- $s
    u=$((u + ${12})); k=$((k + ${13}))
  done
  echo "$u $k"
}
sum2() { echo $(( $1 + $2 )); }
source "$BENCH_DIR/lib/quiet.sh"
self_child_ticks() {         # cutime+cstime of this shell: CPU of waited-for children (wrk/h2load)
  local s; s="$(cat /proc/$$/stat)"; s="${s##*) }"; set -- $s; echo $(( ${14} + ${15} ))
}
pids_of() {                  # pids_of MAINPID -> main pid + direct children
  echo "$1"; children_of "$1"
}
proxy_pids() { [[ $1 == direct ]] && return 0; pids_of "${PROXY_PID[$1]}"; }
origin_pids() { local o; for o in "$@"; do pids_of "${ORIGIN_PID[$o]}"; done; }

RESULTS="$TMP/results.tsv"
: >"$RESULTS"
REPORT=(python3 "$BENCH_DIR/report.py")
RUN_SEQ=0

# run_one TARGET SCENARIO-LABEL PROTO SIZE CONNS REP: one measured run,
# redone (at most twice) when --retry-noisy is set and the run was noisy.
NOISY_REDONE=0
run_one() {
  local try best="" best_other=1000000 row other
  for try in 1 2 3; do
    : >"$TMP/try.tsv"
    run_once "$TMP/try.tsv" "$@"
    row="$(tail -n 1 "$TMP/try.tsv")"
    other="$(printf '%s' "$row" | awk -F'\t' '{o=$NF; if (o=="nan") o=0; printf "%d", o}')"
    [[ $other =~ ^[0-9]+$ ]] || other=0
    if [[ -z $best || $other -lt $best_other ]]; then best=$row; best_other=$other; fi
    [[ -n $RETRY_NOISY && $best_other -gt $RETRY_NOISY && $try -lt 3 ]] || break
    NOISY_REDONE=$((NOISY_REDONE + 1))
    log "  other processes used ${other}% of the machine during that run: redoing it"
    wait_quiet
  done
  printf '%s\n' "$best" >>"$RESULTS"
}
# run_once RESULTS-FILE TARGET SCENARIO-LABEL PROTO SIZE CONNS REP
run_once() {
  local results=$1; shift
  local target=$1 label=$2 proto=$3 size=$4 conns=$5 rep=$6
  local port out pids opids c0 c1 o0 o1 hlog=""
  RUN_SEQ=$((RUN_SEQ + 1))
  out="$TMP/run-$RUN_SEQ-$target.out"
  local url origins=(o1 o2) h2args=()
  case "$proto" in
    h1) url="http://127.0.0.1:${H1PORT[$target]}/$size" ;;
    h2c) url="http://127.0.0.1:${H2PORT[$target]}/$size" ;;
    grpc)
      url="http://127.0.0.1:${GRPCPORT[$target]}/bench.Echo/$size"
      origins=("${GRPC_ORIGINS[@]}")
      h2args=(-d "$GRPC_REQ" -H 'content-type: application/grpc' -H 'te: trailers') ;;
  esac
  [[ $target == direct ]] && origins=("${origins[0]}")
  local added=()
  [[ $target == floor-hdr ]] && added=("${ADDED_LINES[@]}")
  opids="$(origin_pids "${origins[@]}")"
  pids="$(proxy_pids "$target")"
  c0=$(ticks $pids); o0=$(sum2 $(ticks $opids))
  local s0 s1 w0 w1
  s0="$(sys_ticks)"; w0=$(self_child_ticks)
  if [[ $proto == h1 ]]; then
    "${ON_LOAD[@]}" wrk -t1 -c"$conns" -d"${DURATION}s" -s "$BENCH_DIR/wrk-stats.lua" "${added[@]}" "$url" >"$out" 2>&1 || true
  else
    hlog="$TMP/run-$RUN_SEQ-$target.h2log"
    "${ON_LOAD[@]}" h2load -t1 -c"$conns" -m10 -D "$DURATION" --log-file="$hlog" "${h2args[@]}" "${added[@]}" "$url" >"$out" 2>&1 || true
  fi
  w1=$(self_child_ticks); s1="$(sys_ticks)"
  c1=$(ticks $pids); o1=$(sum2 $(ticks $opids))
  "${REPORT[@]}" record --sys-ticks $s0 $s1 --loadgen-ticks "$w0" "$w1" --results "$results" --kind matrix --target "$target" --scenario "$label" \
    --rep "$rep" --tool "$([[ $proto == h1 ]] && echo wrk || echo h2load)" --output "$out" \
    ${hlog:+--h2log "$hlog"} --ticks $(sum2 $c0) $(sum2 $c1) --user-sys-ticks $c0 $c1 \
    --origin-ticks "$o0" "$o1" --clk "$CLK_TCK" \
    $([[ $target == direct ]] && echo --no-proxy)
  [[ -n $hlog ]] && rm -f "$hlog"
  return 0
}

# ------------------------------------------------------------------- meta ----
mkdir -p "$OUT_DIR"
META="$TMP/meta.txt"
{
  echo "date=$(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "command=bash bench/run.sh${ORIG_ARGS:+ $ORIG_ARGS}"
  echo "cpus=$NCPU"
  echo "cpu_model=$(lscpu 2>/dev/null | sed -n 's/^Model name:[[:space:]]*//p' | head -n1)"
  echo "kernel=$(uname -sr)"
  echo "nginx=$("$NGINX_BIN" -v 2>&1 | sed 's/.*version: //')"
  [[ -n $HAPROXY_BIN ]] && echo "haproxy=$("$HAPROXY_BIN" -v 2>/dev/null | head -n1 | awk '{print $3}')"
  echo "wrk=$(wrk -v 2>&1 | head -n1 | awk '{print $2}')"
  command -v h2load >/dev/null && echo "h2load=$(h2load --version 2>/dev/null | head -n1)"
  echo "git=$(cd "$REPO_DIR" && git rev-parse --short HEAD 2>/dev/null || echo '?')"
  if [[ -n $HOPGATE_BASE_BIN ]] && has hopgate-base; then
    echo "hopgate_base=$HOPGATE_BASE_BIN ($("$HOPGATE_BASE_BIN" --version 2>/dev/null | head -n1 || echo '?'))"
  fi
  echo "loadavg_start=$(cut -d' ' -f1-3 /proc/loadavg)"
  echo "pinning=load generator on CPU $LOADGEN_CPU, proxy + origins on CPU $PROXY_CPU"
  echo "repeat=$REPEAT"
  echo "duration=$DURATION"
  echo "wait_quiet=$WAIT_QUIET"
  echo "retry_noisy=$RETRY_NOISY"
} >"$META"

if has hopgate || has hopgate-log || has hopgate-pgo || has hopgate-base; then prepare_hopgate; fi
if [[ -z $HAPROXY_BIN ]] && has haproxy; then skip_target haproxy "haproxy not installed"; fi
if [[ -z $HAPROXY_BIN ]] && has floor; then skip_target floor "haproxy not installed"; fi
if [[ -z $HAPROXY_BIN ]] && has floor-hdr; then skip_target floor-hdr "haproxy not installed"; fi

# ----------------------------------------------------------------- matrix ----
run_matrix() {
  local ports
  read -r -a ports <<<"$(free_ports 21)"
  ORIGIN_PORT[o1]=${ports[0]}; ORIGIN_H2PORT[o1]=${ports[1]}; ORIGIN_PORT[o2]=${ports[2]}
  H1PORT[direct]=${ports[0]}; H2PORT[direct]=${ports[1]}
  H1PORT[nginx]=${ports[3]}; H2PORT[nginx]=${ports[4]}
  H1PORT[haproxy]=${ports[5]}; H2PORT[haproxy]=${ports[6]}
  H1PORT[hopgate]=${ports[7]}; H2PORT[hopgate]=${ports[7]}   # h1 + h2c on one port
  local hop_admin=${ports[8]}
  H1PORT[floor]=${ports[9]}; H2PORT[floor]=${ports[10]}
  H1PORT[floor-hdr]=${ports[9]}; H2PORT[floor-hdr]=${ports[10]}   # the floor's own process
  H1PORT[hopgate-log]=${ports[11]}; H2PORT[hopgate-log]=${ports[11]}
  local hoplog_admin=${ports[12]}
  H1PORT[hopgate-pgo]=${ports[14]}; H2PORT[hopgate-pgo]=${ports[14]}
  local hoppgo_admin=${ports[15]}
  H1PORT[hopgate-base]=${ports[16]}; H2PORT[hopgate-base]=${ports[16]}
  local hopbase_admin=${ports[17]}
  local t
  for t in nginx haproxy hopgate hopgate-log hopgate-pgo hopgate-base; do GRPCPORT[$t]=${H2PORT[$t]}; done
  GRPCPORT[floor]=${ports[18]}; GRPCPORT[floor-hdr]=${ports[18]}
  GRPC_ORIGINS=()
  if [[ $NEED_GRPC == 1 ]]; then
    GRPC_ORIGINS=(g1 g2)
    start_grpc_origin g1 "${ports[19]}"; start_grpc_origin g2 "${ports[20]}"
    GRPCPORT[direct]=${ports[19]}
    log "gRPC origins (nghttpd): g1=127.0.0.1:${ORIGIN_PORT[g1]}, g2=127.0.0.1:${ORIGIN_PORT[g2]}"
  fi

  write_origin_conf o1 "${ORIGIN_PORT[o1]}" "${ORIGIN_H2PORT[o1]}"
  write_origin_conf o2 "${ORIGIN_PORT[o2]}"
  start_origin o1; start_origin o2
  # What hopgate adds to every upstream request by default (as captured at
  # a listening socket; the values' lengths are hopgate's), for floor-hdr.
  ADDED_LINES=(-H 'x-request-id: 7fde45a87339afde0000000000000000' -H 'x-forwarded-for: 127.0.0.1'
    -H 'x-forwarded-proto: http' -H 'x-route-rule-id: all'
    -H 'traceparent: 00-e6d8c650905e3ed4b7043231f90aacb0-3abe9445ab2be872-00'
    -H "x-upstream-addr: 127.0.0.1:${ORIGIN_PORT[o1]}")
  log "origins: o1=127.0.0.1:${ORIGIN_PORT[o1]} (h2c ${ORIGIN_H2PORT[o1]}), o2=127.0.0.1:${ORIGIN_PORT[o2]}"

  if has nginx; then
    write_nginx_proxy "$TMP/nginx" "${H1PORT[nginx]}" "${H2PORT[nginx]}" 0 o1 o2
    start_nginx_proxy "$TMP/nginx" "${H1PORT[nginx]}"; PROXY_PID[nginx]=$STARTED_PID
    log "nginx: h1 ${H1PORT[nginx]}, h2c ${H2PORT[nginx]}"
  fi
  if has floor || has floor-hdr; then
    write_haproxy_tcp "$TMP/floor" "${H1PORT[floor]}" "${H2PORT[floor]}" o1 o2
    start_haproxy "$TMP/floor" "${H1PORT[floor]}"; PROXY_PID[floor]=$STARTED_PID
    PROXY_PID[floor-hdr]=$STARTED_PID
    log "floor (haproxy mode tcp): h1 ${H1PORT[floor]}, h2c ${H2PORT[floor]}"
  fi
  if has haproxy; then
    write_haproxy "$TMP/haproxy" "${H1PORT[haproxy]}" "${H2PORT[haproxy]}" 0 o1 o2
    start_haproxy "$TMP/haproxy" "${H1PORT[haproxy]}"; PROXY_PID[haproxy]=$STARTED_PID
    log "haproxy: h1 ${H1PORT[haproxy]}, h2c ${H2PORT[haproxy]}"
  fi
  run_hopgate hopgate "$hop_admin" "" "hopgate: h1+h2c ${H1PORT[hopgate]}"
  run_hopgate hopgate-log "$hoplog_admin" log \
    "hopgate with its access log on: h1+h2c ${H1PORT[hopgate-log]}"
  run_hopgate hopgate-pgo "$hoppgo_admin" pgo \
    "hopgate, profile-guided build: h1+h2c ${H1PORT[hopgate-pgo]}"
  run_hopgate hopgate-base "$hopbase_admin" base \
    "hopgate, base build $HOPGATE_BASE_BIN: h1+h2c ${H1PORT[hopgate-base]}"

  # every target must answer 200 before measuring
  local code
  for t in "${TARGETS[@]}"; do
    code="$(python3 - "${H1PORT[$t]}" <<'EOF'
import http.client, sys
try:
    c = http.client.HTTPConnection("127.0.0.1", int(sys.argv[1]), timeout=5)
    c.request("GET", "/4k"); r = c.getresponse(); b = r.read()
    print(r.status if len(b) == 4096 else f"{r.status}/len={len(b)}")
except Exception as e:
    print(f"error:{e}")
EOF
)"
    if [[ $code != 200 ]]; then
      [[ $t == hopgate* ]] && { skip_target "$t" "GET /4k answered $code"; continue; }
      die "$t: GET /4k answered $code"
    fi
    # and gRPC calls, when measured: 200 with the trailer grpc-status: 0
    [[ $NEED_GRPC == 1 ]] || continue
    if ! code="$(grpc_check "${GRPCPORT[$t]}")"; then
      [[ $t == hopgate* ]] && { skip_target "$t" "gRPC call: $code"; continue; }
      die "$t: gRPC call: $code"
    fi
  done

  [[ ${#TARGETS[@]} -gt 0 ]] || die "no target left to measure"
  local points=("${POINT_LIST[@]}")
  local total=$(( ${#points[@]} * REPEAT * ${#TARGETS[@]} ))
  log "matrix: ${#points[@]} points x $REPEAT repeats x ${#TARGETS[@]} targets (${TARGETS[*]}) x ${DURATION}s ≈ $(( total * DURATION + ${#TARGETS[@]} ))s"

  # warm-up: fill upstream keep-alive pools, fault in pages (not recorded)
  for t in "${TARGETS[@]}"; do
    "${ON_LOAD[@]}" wrk -t1 -c128 -d1s "http://127.0.0.1:${H1PORT[$t]}/4k" >/dev/null 2>&1 || true
  done

  local p proto size conns label rep i n=${#TARGETS[@]}
  for p in "${points[@]}"; do
    read -r proto size conns <<<"$p"
    case "$size" in 0) label="0B" ;; 4k) label="4KiB" ;; 64k) label="64KiB" ;; esac
    if [[ $proto == h1 ]]; then label="h1 $label c$conns"; else label="$proto $label c${conns}x10"; fi
    for ((rep = 1; rep <= REPEAT; rep++)); do
      wait_quiet
      for ((i = 0; i < n; i++)); do   # interleave; rotate the order each repeat
        t=${TARGETS[$(( (i + rep - 1) % n ))]}
        run_one "$t" "$label" "$proto" "$size" "$conns" "$rep"
      done
    done
  done

  # stop the matrix proxies and origins
  for t in floor nginx haproxy hopgate hopgate-log hopgate-pgo hopgate-base; do [[ -n ${PROXY_PID[$t]:-} ]] && stop_pid "${PROXY_PID[$t]}"; done
  stop_pid "${ORIGIN_PID[o1]}"; stop_pid "${ORIGIN_PID[o2]}"
  for t in "${GRPC_ORIGINS[@]}"; do stop_pid "${ORIGIN_PID[$t]}"; done
  PROXY_PID=()
  GRPC_ORIGINS=()
  return 0
}

# ---------------------------------------------------------------- restart ----
run_restart() {
  local proxies=() t
  for t in nginx haproxy hopgate; do has "$t" && proxies+=("$t"); done
  [[ ${#proxies[@]} -gt 0 ]] || { warn "restart scenario: no proxy selected"; return 0; }
  local ports; read -r -a ports <<<"$(free_ports 6)"
  ORIGIN_PORT[r1]=${ports[0]}; ORIGIN_PORT[r2]=${ports[1]}; ORIGIN_PORT[r3]=${ports[2]}
  ORIGIN_H2PORT[r1]=""; ORIGIN_H2PORT[r2]=""; ORIGIN_H2PORT[r3]=""
  local pport=${ports[3]} admin=${ports[4]} o
  for o in r1 r2 r3; do write_origin_conf "$o" "${ORIGIN_PORT[$o]}"; start_origin "$o"; done
  log "restart scenario: origins ${ORIGIN_PORT[r1]} ${ORIGIN_PORT[r2]} ${ORIGIN_PORT[r3]}; proxies: ${proxies[*]}"

  for t in "${proxies[@]}"; do
    local dir="$TMP/restart-$t" ppid
    case "$t" in
      nginx) write_nginx_proxy "$dir" "$pport" "" 1 r1 r2 r3; start_nginx_proxy "$dir" "$pport"; ppid=$STARTED_PID ;;
      haproxy) write_haproxy "$dir" "$pport" "" 1 r1 r2 r3; start_haproxy "$dir" "$pport"; ppid=$STARTED_PID ;;
      hopgate)
        write_hopgate "$dir" "$pport" "$admin" r1 r2 r3
        if ! start_hopgate "$dir" "$pport"; then
          SKIPPED+=("hopgate (restart): ${HOPGATE_FAIL:-did not start}")
          [[ $STRICT == 1 ]] && die "hopgate did not start for the restart scenario"
          warn "restart scenario: hopgate did not start, skipped"; continue
        fi
        ppid=$STARTED_PID ;;
    esac
    wait_quiet
    "${ON_LOAD[@]}" wrk -t1 -c16 -d1s "http://127.0.0.1:$pport/4k" >/dev/null 2>&1 || true   # warm-up
    local out="$TMP/restart-$t.out" wpid wst
    "${ON_LOAD[@]}" wrk -t1 -c16 -d120s -s "$BENCH_DIR/wrk-status.lua" "http://127.0.0.1:$pport/4k" >"$out" 2>&1 &
    wpid=$!; track "$wpid"; wst="$(starttime "$wpid" || echo x)"
    sleep 1
    for o in r1 r2 r3; do
      log "  $t: restarting origin $o (graceful quit, 1 s down)"
      quit_origin "$o"
      sleep 1
      start_origin "$o"
      sleep 1
    done
    sleep 1
    alive "$wpid" "$wst" && kill -INT "$wpid" 2>/dev/null || true
    wait "$wpid" 2>/dev/null || true
    "${REPORT[@]}" record --results "$RESULTS" --kind restart --target "$t" --scenario "rolling restart" \
      --rep 1 --tool wrk --output "$out" --ticks 0 0 --origin-ticks 0 0 --clk "$CLK_TCK" --no-proxy
    stop_pid "$ppid"
    for ((i = 0; i < 40; i++)); do port_open "$pport" || break; sleep 0.05; done
  done
  for o in r1 r2 r3; do stop_pid "${ORIGIN_PID[$o]}"; done
  return 0
}

START_TS=$(date +%s)
if [[ $SCENARIO == matrix || $SCENARIO == all ]]; then run_matrix; fi
if [[ $SCENARIO == restart || $SCENARIO == all ]]; then run_restart; fi
echo "loadavg_end=$(cut -d' ' -f1-3 /proc/loadavg)" >>"$META"
echo "elapsed_s=$(( $(date +%s) - START_TS ))" >>"$META"
echo "noisy_redone=$NOISY_REDONE" >>"$META"
for s in "${SKIPPED[@]}"; do echo "skipped=$s" >>"$META"; done

cp "$RESULTS" "$OUT_DIR/latest.tsv"
"${REPORT[@]}" table --results "$RESULTS" --meta "$META" --md "$OUT_DIR/latest.md"
log "wrote $OUT_DIR/latest.md (raw runs: $OUT_DIR/latest.tsv)"
