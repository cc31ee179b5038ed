#!/usr/bin/env bash
# bench/reload.sh — p99 latency of live traffic while the config is reloaded
# 10 times a second, against the same traffic with no reloads.
#
# Starts two `hopgate backend` origins and a hopgate gateway (release build)
# on free loopback ports, runs `wrk --latency` for D seconds without reloads,
# then again while a loop PUTs two alternating configs (each a valid change:
# a route moves between the origins) to the admin API every 100 ms. Repeats
# R times, interleaved, and prints the medians. Kills only what it started.
#
# Usage: bash bench/reload.sh [--duration S] [--repeat N] [--rules N]
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION=10
REPEAT=3
RULES=1000
while (($#)); do
  case "$1" in
    --duration) DURATION=$2; shift 2 ;;
    --repeat) REPEAT=$2; shift 2 ;;
    --rules) RULES=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
BIN=${HOPGATE_BIN:-target/release/hopgate}
[ -x "$BIN" ] || cargo build --release -p hopgate
command -v wrk >/dev/null || { echo "wrk missing (apt-get install wrk)" >&2; exit 1; }

TMP=$(mktemp -d)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$TMP"; }
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
O1=$(free_port); O2=$(free_port); GW=$(free_port); ADMIN=$(free_port)
HOPGATE_WORKER_THREADS=1 taskset -c 1 "$BIN" backend --id o1 --listen 127.0.0.1:$O1 >/dev/null 2>&1 & PIDS+=($!)
HOPGATE_WORKER_THREADS=1 taskset -c 1 "$BIN" backend --id o2 --listen 127.0.0.1:$O2 >/dev/null 2>&1 & PIDS+=($!)

# A config of $RULES rules as JSON (the admin API takes JSON or YAML; JSON
# parses several times faster, see docs/BENCHMARKS.md); variant a or b
# sends /moving to a different origin.
config() {
  python3 - "$1" "$RULES" "$GW" "$ADMIN" "$O1" "$O2" > "$TMP/$1.json" <<'PY'
import json, sys
target, rules, gw, admin, o1, o2 = sys.argv[1], int(sys.argv[2]), *sys.argv[3:]
routes = [{"id": "moving", "match": {"path_prefix": "/moving"}, "service": target}]
routes += [{"id": f"r{i}", "match": {"host": f"h{i % 100}.example.com", "path_prefix": f"/p/{i}"}, "service": "a"} for i in range(1, rules + 1)]
routes.append({"id": "all", "match": {"path_prefix": "/"}, "service": "a"})
print(json.dumps({
    "listeners": [{"name": "public", "address": f"127.0.0.1:{gw}"}],
    "admin": {"address": f"127.0.0.1:{admin}"},
    "services": [{"name": "a", "nodes": [{"id": "o1", "address": f"127.0.0.1:{o1}"}]},
                 {"name": "b", "nodes": [{"id": "o2", "address": f"127.0.0.1:{o2}"}]}],
    "routes": routes,
}))
PY
}
config a; config b
RUST_LOG="warn" HOPGATE_WORKER_THREADS=1 taskset -c 1 "$BIN" run --config "$TMP/a.json" > "$TMP/gw.out" 2> "$TMP/gw.err" & PIDS+=($!)
for _ in $(seq 100); do grep -q "admin listening" "$TMP/gw.out" 2>/dev/null && break; sleep 0.1; done
# Warm up.
taskset -c 0 wrk -t1 -c16 -d2s "http://127.0.0.1:$GW/" >/dev/null

p99() { awk '/^ +99%/ {print $2}' "$1"; }
to_us() { python3 -c "import sys; v=sys.argv[1]; u={'us':1,'ms':1000,'s':1e6}; import re; m=re.match(r'([0-9.]+)(us|ms|s)',v); print(round(float(m.group(1))*u[m.group(2)]))" "$1"; }
rps() { awk '/^Requests\/sec/ {print $2}' "$1"; }

reloader() {
  local n=0
  while :; do
    n=$((n + 1))
    local f=$TMP/a.json; ((n % 2)) && f=$TMP/b.json
    curl -s -o /dev/null -X PUT -H 'content-type: application/json' --data-binary @"$f" "http://127.0.0.1:$ADMIN/admin/v1/config" || true
    sleep 0.1
  done
}

STEADY=(); RELOAD=(); SR=(); RR=()
for r in $(seq 1 "$REPEAT"); do
  taskset -c 0 wrk -t1 -c16 -d"${DURATION}s" --latency "http://127.0.0.1:$GW/moving" > "$TMP/steady.txt"
  STEADY+=("$(to_us "$(p99 "$TMP/steady.txt")")"); SR+=("$(rps "$TMP/steady.txt")")
  reloader & RL=$!
  taskset -c 0 wrk -t1 -c16 -d"${DURATION}s" --latency "http://127.0.0.1:$GW/moving" > "$TMP/reload.txt"
  kill $RL 2>/dev/null || true; wait $RL 2>/dev/null || true
  RELOAD+=("$(to_us "$(p99 "$TMP/reload.txt")")"); RR+=("$(rps "$TMP/reload.txt")")
  grep -E "Non-2xx|Socket errors" "$TMP/reload.txt" || true
done
VERSIONS=$(curl -s "http://127.0.0.1:$ADMIN/admin/v1/config/versions" | python3 -c 'import sys,json; d=json.load(sys.stdin); print(d["current"], d["reload_failures"])')
median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
MS=$(median "${STEADY[@]}"); MR=$(median "${RELOAD[@]}")
echo
echo "reload benchmark: $RULES rules, ${DURATION}s x $REPEAT, 16 connections, 10 reloads/s (JSON via the admin API)"
echo "| traffic | p99 µs (median) | req/s (median) | all p99 µs |"
echo "|---|---:|---:|---|"
echo "| steady | $MS | $(median "${SR[@]}") | ${STEADY[*]} |"
echo "| 10 reloads/s | $MR | $(median "${RR[@]}") | ${RELOAD[*]} |"
python3 -c "print(f'p99 under reloads / steady = {$MR/$MS:.2f}')"
echo "config version at the end / reload failures: $VERSIONS"
