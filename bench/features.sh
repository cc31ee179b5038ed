#!/usr/bin/env bash
# bench/features.sh [BIN]: requests per second and CPU per request of one
# hopgate (default target/release/hopgate) on four routes of one config,
# interleaved in one run: a plain route, the same route under a local rate
# limit, under a fleet rate limit (a local redis-server), and behind a JWT
# check (RS256, a good token on every request). The limits' rates are out
# of reach: every request pays the check and passes. Two nginx origins
# (empty answers), wrk -t1 -c16 pinned to CPU 0, hopgate pinned to CPU 1
# with its default threads, access log off.
# Environment: ROUNDS (default 3), SECS per point (default 4).
# Prints one line per route: the median req/s and CPU µs per request
# (user+system ticks of the hopgate process over the run ÷ requests).
set -euo pipefail
BIN=$(realpath "${1:-target/release/hopgate}")
ROUNDS=${ROUNDS:-3}; SECS=${SECS:-4}
D=$(mktemp -d /tmp/hopgate-features.XXXXXX); chmod 755 "$D"
read P1 P2 PG PA PR < <(python3 -c '
import socket
ss=[socket.socket() for _ in range(5)]
for s in ss: s.bind(("127.0.0.1",0))
print(*[s.getsockname()[1] for s in ss])')
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; sleep 0.5; rm -rf "$D"; }
trap cleanup EXIT
for port in $P1 $P2; do
  mkdir -p "$D/o$port"
  cat > "$D/o$port/nginx.conf" <<NG
worker_processes 1; daemon off; master_process off; pid $D/o$port/nginx.pid;
error_log $D/o$port/error.log warn;
events { worker_connections 8192; }
http { access_log off; keepalive_requests 10000000;
  client_body_temp_path $D/o$port/cb; proxy_temp_path $D/o$port/px; fastcgi_temp_path $D/o$port/fc; uwsgi_temp_path $D/o$port/uw; scgi_temp_path $D/o$port/sc;
  server { listen 127.0.0.1:$port; location / { return 200 ""; } } }
NG
  taskset -c 1 nginx -c "$D/o$port/nginx.conf" >/dev/null 2>&1 &
  PIDS+=($!)
done
redis-server --port "$PR" --bind 127.0.0.1 --save "" --appendonly no --dir "$D" >"$D/redis.log" 2>&1 &
PIDS+=($!)
TOKEN=$(python3 - "$D/keys.json" <<'PY'
import json, sys, time
import jwt
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm
key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
jwk = json.loads(RSAAlgorithm.to_jwk(key.public_key()))
jwk.update({"kid": "k1", "alg": "RS256"})
json.dump({"keys": [jwk]}, open(sys.argv[1], "w"))
claims = {"sub": "bench", "iss": "https://id.example.com", "aud": "api", "exp": int(time.time()) + 3600}
print(jwt.encode(claims, key, algorithm="RS256", headers={"kid": "k1"}))
PY
)
cat > "$D/hopgate.yaml" <<YAML
listeners:
  - { name: public, address: "127.0.0.1:$PG" }
admin: { address: "127.0.0.1:$PA" }
access_log: { enabled: false }
store: { kind: redis, url: "redis://127.0.0.1:$PR/0" }
services:
  - name: origin
    nodes:
      - { id: o1, address: "127.0.0.1:$P1" }
      - { id: o2, address: "127.0.0.1:$P2" }
rate_limits:
  - { name: local, key: [client_ip], rate: 1000000/s, burst: 1000000 }
  - { name: fleet, key: [client_ip], rate: 1000000/s, burst: 1000000, scope: fleet }
routes:
  - { id: local, match: { path_prefix: /local }, service: origin, rate_limit: local }
  - { id: fleet, match: { path_prefix: /fleet }, service: origin, rate_limit: fleet }
  - { id: jwt, match: { path_prefix: /jwt }, service: origin, auth: { jwt: { jwks_file: keys.json, issuer: "https://id.example.com", audiences: [api], claims_to_headers: { sub: X-User } } } }
  - { id: plain, match: { path_prefix: / }, service: origin }
YAML
HOPGATE_SESSION_SECRET=features-bench-secret-0123456789abcdef taskset -c 1 "$BIN" run --config "$D/hopgate.yaml" >"$D/out.log" 2>"$D/err.log" &
GW=$!; PIDS+=($GW)
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$PA/readyz" >/dev/null && break; sleep 0.1; done
ticks() { awk '{print $14 + $15}' "/proc/$GW/stat"; }
declare -A RPS CPU
run_point() {   # name path [header]
  local before after out reqs
  before=$(ticks)
  if [[ -n ${3:-} ]]; then
    out=$(taskset -c 0 wrk -t1 -c16 -d"${SECS}s" -H "$3" "http://127.0.0.1:$PG$2")
  else
    out=$(taskset -c 0 wrk -t1 -c16 -d"${SECS}s" "http://127.0.0.1:$PG$2")
  fi
  after=$(ticks)
  reqs=$(echo "$out" | awk '/requests in/ {print $1}')
  if echo "$out" | grep -q "Non-2xx"; then echo "features.sh: $1 got non-2xx answers" >&2; echo "$out" >&2; exit 1; fi
  RPS[$1]+="$(echo "$out" | awk '/Requests\/sec/ {print $2}') "
  CPU[$1]+="$(python3 -c "print(($after-$before)*1e6/$(getconf CLK_TCK)/$reqs)") "
}
# Warm-up (connections, the JWT cache, the fleet share's first sync).
for p in /0 /local/0 /fleet/0; do taskset -c 0 wrk -t1 -c16 -d1s "http://127.0.0.1:$PG$p" >/dev/null; done
taskset -c 0 wrk -t1 -c16 -d1s -H "Authorization: Bearer $TOKEN" "http://127.0.0.1:$PG/jwt/0" >/dev/null
for _ in $(seq "$ROUNDS"); do
  run_point plain /0
  run_point local /local/0
  run_point fleet /fleet/0
  run_point jwt /jwt/0 "Authorization: Bearer $TOKEN"
done
median() { python3 -c "import statistics,sys; print(round(statistics.median(map(float,sys.argv[1:])),1))" $1; }
echo "route   req/s (median of $ROUNDS × ${SECS}s)   CPU µs/req   runs"
for r in plain local fleet jwt; do
  printf '%-7s %10s %22s   %s\n' "$r" "$(median "${RPS[$r]}")" "$(median "${CPU[$r]}")" "${RPS[$r]}"
done
