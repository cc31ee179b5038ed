#!/usr/bin/env bash
# bench/scrape.sh — the cost of one `GET /metrics` scrape of a gateway with
# many routes and nodes, and the list of sample names it exposes.
#
# Starts one `hopgate backend` origin and a hopgate gateway (release build)
# on free loopback ports with S services of N nodes each (the first node of
# every service is the origin, the others ports nothing listens on) and R
# routes, sends one request through every route (so every histogram and
# pool has data), then times K scrapes over one kept-alive connection with
# curl and prints the median and mean time per scrape and the body size.
# Kills only what it started.
#
# Usage: bash bench/scrape.sh [--services S] [--nodes N] [--routes R]
#                             [--scrapes K] [--accept TYPE] [--names FILE]
#   --accept TYPE  the Accept header of the scrapes (default: none, that is
#                  Prometheus text 0.0.4; `application/openmetrics-text` asks
#                  for OpenMetrics)
#   --names FILE   also write the sorted set of sample names to FILE
#   --body FILE    also keep one scrape's body in FILE
set -euo pipefail
cd "$(dirname "$0")/.."
SERVICES=100
NODES=10
ROUTES=500
SCRAPES=200
ACCEPT=""
NAMES=""
BODY=""
while (($#)); do
  case "$1" in
    --services) SERVICES=$2; shift 2 ;;
    --nodes) NODES=$2; shift 2 ;;
    --routes) ROUTES=$2; shift 2 ;;
    --scrapes) SCRAPES=$2; shift 2 ;;
    --accept) ACCEPT=$2; shift 2 ;;
    --names) NAMES=$2; shift 2 ;;
    --body) BODY=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
BIN=${HOPGATE_BIN:-target/release/hopgate}
[ -x "$BIN" ] || cargo build --release -p hopgate

TMP=$(mktemp -d)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$TMP"; }
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
O1=$(free_port); GW=$(free_port); ADMIN=$(free_port)
"$BIN" backend --id o1 --listen 127.0.0.1:$O1 >/dev/null 2>&1 & PIDS+=($!)

python3 - "$SERVICES" "$NODES" "$ROUTES" "$GW" "$ADMIN" "$O1" > "$TMP/gw.json" <<'PY'
import json, socket, sys
services, nodes, routes, gw, admin, o1 = (int(a) for a in sys.argv[1:])
def dead():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p
svcs = [{"name": f"s{i}",
         "nodes": [{"id": f"n{j}", "address": f"127.0.0.1:{o1 if j == 0 else dead()}"}
                   for j in range(nodes)]} for i in range(services)]
print(json.dumps({
    "listeners": [{"name": "public", "address": f"127.0.0.1:{gw}"}],
    "admin": {"address": f"127.0.0.1:{admin}"},
    "services": svcs,
    "routes": [{"id": f"r{i}", "match": {"path_prefix": f"/r{i}/"}, "service": f"s{i % services}"}
               for i in range(routes)],
    "sessions": {"enabled": True},
}))
PY
RUST_LOG="warn" "$BIN" run --config "$TMP/gw.json" > "$TMP/gw.out" 2> "$TMP/gw.err" & PIDS+=($!)
for _ in $(seq 300); do curl -sf -o /dev/null "http://127.0.0.1:$ADMIN/livez" && break; sleep 0.1; done
curl -sf -o /dev/null "http://127.0.0.1:$ADMIN/livez" || { cat "$TMP/gw.err" >&2; exit 1; }

# One request per route (the origin answers; the dead nodes are never
# picked first by every route, so some requests retry: all counted).
URLS=()
for i in $(seq 0 $((ROUTES - 1))); do URLS+=(-o /dev/null "http://127.0.0.1:$GW/r$i/"); done
curl -s "${URLS[@]}" || true

HDR=()
[ -n "$ACCEPT" ] && HDR=(-H "Accept: $ACCEPT")
M="http://127.0.0.1:$ADMIN/metrics"
curl -s "${HDR[@]}" -D "$TMP/head" -o "$TMP/body" "$M"
[ -z "$BODY" ] || cp "$TMP/body" "$BODY"
if [ -n "$NAMES" ]; then
  grep -v '^#' "$TMP/body" | sed -E 's/[{ ].*//' | sort -u > "$NAMES"
fi
# Warm-up, then K scrapes over one connection.
SCRAPE_URLS=()
for _ in $(seq "$SCRAPES"); do SCRAPE_URLS+=(-o /dev/null "$M"); done
WARM=()
for _ in $(seq 20); do WARM+=(-o /dev/null "$M"); done
curl -s "${HDR[@]}" "${WARM[@]}"
curl -s "${HDR[@]}" -w '%{time_total}\n' "${SCRAPE_URLS[@]}" > "$TMP/times"
python3 - "$TMP/times" "$TMP/body" "$TMP/head" "$SERVICES" "$NODES" "$ROUTES" <<'PY'
import statistics, sys
times = [float(l) * 1000 for l in open(sys.argv[1]) if l.strip()]
body = open(sys.argv[2], "rb").read()
ctype = next((l.split(":", 1)[1].strip() for l in open(sys.argv[3]) if l.lower().startswith("content-type:")), "?")
samples = sum(1 for l in body.decode().splitlines() if l and not l.startswith("#"))
print(f"{sys.argv[4]} services x {sys.argv[5]} nodes, {sys.argv[6]} routes: "
      f"{len(body)} bytes, {samples} samples, {ctype}")
print(f"scrape: median {statistics.median(times):.2f} ms, mean {statistics.mean(times):.2f} ms, "
      f"min {min(times):.2f} ms over {len(times)} scrapes")
PY
