#!/usr/bin/env bash
# bench/sessions.sh — throughput and p99 with sessions on, every request a
# known session: the memory store beside the Redis store, in one run.
#
# Starts a local redis-server (no persistence), two `hopgate backend`
# origins and two gateways (release build) with the same config except the
# store: one `kind: memory`, one `kind: redis`. Mints S sessions on each
# gateway (curl), then runs wrk (bench/wrk-sessions.lua: every request
# carries one of those Hop-Session tokens, round-robin) against each
# gateway in turn, R times, alternating which goes first, and prints the
# medians. Then it counts the Redis commands the redis gateway sends: per
# request while wrk runs known sessions, and per second while idle
# (`redis-cli INFO commandstats`, before and after, the stats reset first).
#
# Pinning as bench/run.sh: wrk on CPU 0; gateways, origins and redis-server
# on CPU 1; one worker thread per gateway. Talks to 127.0.0.1 only, kills
# only the processes it started.
#
# Usage: bash bench/sessions.sh [--duration S] [--repeat N] [--conns C]
#                               [--sessions N] [--idle S]
#   defaults: 5 s, 5 repeats, 16 connections, 64 sessions, 10 s idle count
# Environment: HOPGATE_BIN (default target/release/hopgate).
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION=5
REPEAT=5
CONNS=16
SESSIONS=64
IDLE=10
while (($#)); do
  case "$1" in
    --duration) DURATION=$2; shift 2 ;;
    --repeat) REPEAT=$2; shift 2 ;;
    --conns) CONNS=$2; shift 2 ;;
    --sessions) SESSIONS=$2; shift 2 ;;
    --idle) IDLE=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
BIN=${HOPGATE_BIN:-target/release/hopgate}
[ -x "$BIN" ] || cargo build --release -p hopgate
for tool in wrk redis-server redis-cli curl python3; do
  command -v "$tool" >/dev/null || { echo "$tool missing (apt-get install wrk redis-server redis-tools curl)" >&2; exit 1; }
done

TMP=$(mktemp -d)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$TMP"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
O1=$(free_port); O2=$(free_port); REDIS=$(free_port)
GWM=$(free_port); ADM=$(free_port); GWR=$(free_port); ADR=$(free_port)
export HOPGATE_SESSION_SECRET=bench-sessions-secret-0123456789abcdef
rcli() { redis-cli -p "$REDIS" "$@"; }

taskset -c 1 redis-server --port "$REDIS" --bind 127.0.0.1 --dir "$TMP" --save "" --appendonly no \
  > "$TMP/redis.log" 2>&1 & PIDS+=($!)
HOPGATE_WORKER_THREADS=1 taskset -c 1 "$BIN" backend --id o1 --listen 127.0.0.1:$O1 >/dev/null 2>&1 & PIDS+=($!)
HOPGATE_WORKER_THREADS=1 taskset -c 1 "$BIN" backend --id o2 --listen 127.0.0.1:$O2 >/dev/null 2>&1 & PIDS+=($!)
for _ in $(seq 100); do rcli PING >/dev/null 2>&1 && break; sleep 0.1; done

# The same config for both gateways; only the store differs.
config() { # name port admin store
  cat > "$TMP/$1.yaml" <<EOF
listeners:
  - { name: public, address: 127.0.0.1:$2 }
admin: { address: 127.0.0.1:$3 }
services:
  - name: api
    nodes:
      - { id: o1, address: 127.0.0.1:$O1 }
      - { id: o2, address: 127.0.0.1:$O2 }
routes:
  - { id: all, match: { path_prefix: / }, service: api }
sessions: { ttl: 1h }
store: $4
EOF
}
config mem "$GWM" "$ADM" "{ kind: memory }"
config redis "$GWR" "$ADR" "{ kind: redis, url: \"redis://127.0.0.1:$REDIS/0\" }"
for g in mem redis; do
  RUST_LOG=warn HOPGATE_WORKER_THREADS=1 taskset -c 1 "$BIN" run --config "$TMP/$g.yaml" \
    > "$TMP/$g.out" 2> "$TMP/$g.err" & PIDS+=($!)
done
for g in mem redis; do
  for _ in $(seq 100); do grep -q "admin listening" "$TMP/$g.out" 2>/dev/null && break; sleep 0.1; done
  grep -q "admin listening" "$TMP/$g.out" || { echo "gateway $g did not start:" >&2; cat "$TMP/$g.err" >&2; exit 1; }
done
[ "$(curl -s "http://127.0.0.1:$ADR/admin/v1/fleet" | python3 -c 'import sys,json; print(json.load(sys.stdin)["redis"]["state"])')" = connected ] \
  || { echo "the redis gateway is not connected to Redis" >&2; exit 1; }

# S sessions minted (and bound) on each gateway.
mint() { # port file
  : > "$2"
  for _ in $(seq "$SESSIONS"); do
    curl -s -o /dev/null -D - "http://127.0.0.1:$1/" | tr -d '\r' | awk -F': ' 'tolower($1)=="hop-session" {print $2}' >> "$2"
  done
  [ "$(wc -l < "$2")" -eq "$SESSIONS" ] || { echo "minting sessions on :$1 failed" >&2; exit 1; }
}
mint "$GWM" "$TMP/mem.tokens"
mint "$GWR" "$TMP/redis.tokens"
queued() { curl -s "http://127.0.0.1:$ADR/admin/v1/fleet" | python3 -c 'import sys,json; print(json.load(sys.stdin)["redis"]["queued"])'; }
for _ in $(seq 100); do [ "$(queued)" = 0 ] && break; sleep 0.05; done
BOUND=$(rcli --scan --pattern 'hopgate:s:*' | wc -l)

load() { # name seconds -> BENCH line
  local port=$GWM; [ "$1" = redis ] && port=$GWR
  taskset -c 0 wrk -t1 -c"$CONNS" -d"${2}s" -s bench/wrk-sessions.lua \
    "http://127.0.0.1:$port/" -- "$TMP/$1.tokens" | grep '^BENCH'
}
field() { sed -n "s/.* $1=\([0-9]*\).*/\1/p" <<<"$2"; }
errors() { local s=0; for k in err_connect err_read err_write err_status err_timeout; do s=$((s + $(field $k "$1"))); done; echo $s; }

# Warm-up (pools, caches), not recorded.
load mem 2 >/dev/null; load redis 2 >/dev/null

declare -A RPS P99 P50 ERR
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
for r in $(seq 1 "$REPEAT"); do
  order="mem redis"; ((r % 2)) || order="redis mem"
  for g in $order; do
    line=$(load "$g" "$DURATION")
    req=$(field requests "$line"); dur=$(field duration_us "$line")
    RPS[$g]+="$(python3 -c "print(round($req / ($dur / 1e6)))") "
    P99[$g]+="$(field p99_us "$line") "
    P50[$g]+="$(field p50_us "$line") "
    ERR[$g]=$(( ${ERR[$g]:-0} + $(errors "$line") ))
  done
done
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)
median() { printf '%s\n' $@ | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

# Redis commands: per request under known-session load, then per second idle.
commandstats() { # -> "cmd calls" lines, the stats' own INFO/CONFIG calls left out
  rcli INFO commandstats | tr -d '\r' | sed -n 's/^cmdstat_\([^:]*\):calls=\([0-9]*\),.*/\1 \2/p' \
    | { grep -v -E '^(info|config\|resetstat|config) ' || true; }
}
rcli CONFIG RESETSTAT >/dev/null
line=$(load redis "$DURATION")
LOAD_REQ=$(field requests "$line"); LOAD_SECS=$(python3 -c "print($(field duration_us "$line") / 1e6)")
commandstats > "$TMP/load.stats"
rcli CONFIG RESETSTAT >/dev/null
sleep "$IDLE"
commandstats > "$TMP/idle.stats"
BOUND_AFTER=$(rcli --scan --pattern 'hopgate:s:*' | wc -l)

echo
echo "sessions benchmark: $SESSIONS known sessions, wrk -t1 -c$CONNS, ${DURATION}s x $REPEAT per store (alternating order), GET / (origin JSON echo)"
echo "load average before / after: $LOAD_BEFORE / $LOAD_AFTER"
echo "| store | req/s (median) | p50 µs (median) | p99 µs (median) | errors | all req/s | all p99 µs |"
echo "|---|---:|---:|---:|---:|---|---|"
for g in mem redis; do
  echo "| $g | $(median ${RPS[$g]}) | $(median ${P50[$g]}) | $(median ${P99[$g]}) | ${ERR[$g]} | ${RPS[$g]% } | ${P99[$g]% } |"
done
python3 -c "print(f'redis / memory req/s = {$(median ${RPS[redis]}) / $(median ${RPS[mem]}):.3f}; p99 = {$(median ${P99[redis]}) / $(median ${P99[mem]}):.3f}')"
echo
echo "Redis commands from the redis gateway: $LOAD_REQ known-session requests in ${LOAD_SECS}s, then ${IDLE}s idle"
echo "| command | calls under load | per request | calls idle | per second idle |"
echo "|---|---:|---:|---:|---:|"
join -a1 -a2 -e0 -o 0,1.2,2.2 <(sort "$TMP/load.stats") <(sort "$TMP/idle.stats") | while read -r cmd l i; do
  python3 -c "print(f'| $cmd | $l | {$l / $LOAD_REQ:.6f} | $i | {$i / $IDLE:.2f} |')"
done
TOTAL=$(awk '{s+=$2} END {print s+0}' "$TMP/load.stats")
python3 -c "print(f'all commands under load: $TOTAL, {$TOTAL / $LOAD_REQ:.6f} per request, {$TOTAL / $LOAD_SECS:.2f} per second')"
echo "bindings in Redis: $BOUND after minting, $BOUND_AFTER at the end (known sessions write nothing)"
