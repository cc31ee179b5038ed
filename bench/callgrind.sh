#!/usr/bin/env bash
# bench/callgrind.sh BIN LABEL: instructions per proxied request under
# callgrind (the recipe of docs/BENCHMARKS.md): one worker thread, two nginx
# origins, wrk -t1 -c4: 2 s of warm-up, counters zeroed, 6 s measured.
# Environment:
#   CG_THREADS=1 (default) sets HOPGATE_WORKER_THREADS/TOKIO_WORKER_THREADS;
#     CG_THREADS=default sets neither and pins hopgate to one CPU (taskset
#     -c ${PROXY_CPU:-1}), as the load benchmark does: the default settings.
#   CG_CONNS=N runs wrk with N connections instead of 4 (CG_CONNS=1: every
#     request pays a whole turn of the event loop).
#   CG_ACCESS_LOG=on turns the access log on (written to a file), default off.
#   CG_OTLP=on exports every request's spans (tracing.otlp, sample_ratio 1)
#     to a local OTLP/HTTP sink that answers 200; CG_OTLP=unsampled turns
#     export on with sample_ratio 0 (no request is recorded); default off.
#   CG_PROXY=nginx or CG_PROXY=haproxy counts that proxy instead (BIN is
#     then ignored; pass any word): the same origins, wrk load and recipe,
#     configured as bench/run.sh configures it (one worker/thread, upstream
#     keep-alive, no access log), so its instructions per request stand
#     beside hopgate's.
#   CG_CACHE=on adds callgrind's cache simulation (--cache-sim=yes, the
#     host's L1 sizes) and prints instruction-cache (I1mr) and data-cache
#     (D1mr, D1mw) misses per request beside the instructions: a request
#     path that executes as many instructions but touches more distinct
#     code costs more cycles (each I1 miss is an L2 access).
#   CG_INSTR=on keeps counts per instruction (--dump-instr=yes), for
#     bench/cg_breadth.py: how much distinct code a request runs.
#   CG_RATE_LIMIT=on puts the route under a local rate limit keyed by the
#     client address (rate_limits[], a rate no request reaches: every
#     request pays the check and passes); CG_RATE_LIMIT=in_flight adds
#     max_in_flight (the per-key count and its guard); CG_RATE_LIMIT=fleet
#     makes the same policy scope: fleet, with a redis-server started for
#     it (store.kind: redis; one replica, so the key's share is the whole
#     rate); default off.
#   CG_FILTERS=on requests /f/0 on a route with route filters: three
#     request header edits (set, add, remove) and a prefix rewrite back to
#     /0 (routes[].filters), the cost of a route that uses them.
#   CG_JWT=on (or rs256, es256, hs256) puts the route behind a JWT check
#     (routes[].auth.jwt with issuer, audiences and one claim copied to a
#     header) against a JWKS file of one key made by PyJWT, and sends wrk's
#     requests with a good token of that algorithm (on: RS256).
#   CG_HEADER="Name: value" adds a header to every wrk request.
#   CG_PATH=4k (or 64k) requests a 4 KiB (64 KiB) static file from the
#     origins (sendfile, as bench/run.sh's origins serve it) instead of
#     the empty answer at /0.
#   CG_H2=on drives the listener over h2c with h2load (-t1, CG_CONNS
#     connections, default 4, CG_STREAMS streams each, default 10) instead
#     of wrk: the client-facing HTTP/2 server, HTTP/1.1 upstream (the
#     h2c point of bench/run.sh). CG_H2=grpc makes unary gRPC calls as
#     bench/run.sh's grpc point does (a 16-byte message, content-type
#     application/grpc, TE: trailers) to two nghttpd origins over h2c
#     (protocol: http2 upstream), which answer /bench.Echo/CG_PATH with a
#     message of that size (0, 4k or 64k) and grpc-status: 0. CG_H2=on
#     works with CG_PROXY=nginx and haproxy too (their h2c listeners as
#     bench/proxies.sh sets them up); CG_H2=grpc is hopgate only.
#   CG_DIRECT=on answers every request at the proxy itself (200, empty
#     body: hopgate a route whose filters end in direct_response, nginx
#     `return 200`, HAProxy `http-request return status 200`), no origin
#     involved: the cost of the proxy's HTTP server alone, the floor its
#     proxying stands on (with CG_H2=on: its HTTP/2 server's).
set -uo pipefail
BIN=$1; LABEL=$2
VG_OPTS=(--tool=callgrind)
[[ ${CG_CACHE:-off} == on ]] && VG_OPTS+=(--cache-sim=yes)
[[ ${CG_INSTR:-off} == on ]] && VG_OPTS+=(--dump-instr=yes)
D=${TMPDIR:-/tmp}/hopgate-cg/$LABEL; rm -rf "$D"; mkdir -p "$D/www"; chmod 755 "$D" "$D/www"
head -c 4096 /dev/zero | tr '\0' 'a' >"$D/www/4k"
head -c 65536 /dev/zero | tr '\0' 'a' >"$D/www/64k"
chmod 644 "$D/www/4k" "$D/www/64k"
URL_PATH=${CG_PATH:-0}
read P1 P2 PG PA PO < <(python3 -c '
import socket
ss=[socket.socket() for _ in range(5)]
for s in ss: s.bind(("127.0.0.1",0))
print(*[s.getsockname()[1] for s in ss])')
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done; sleep 0.5; for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null; done; }
trap cleanup EXIT
H2=${CG_H2:-off}
case $H2 in off|on|grpc) ;; *) echo "callgrind.sh: CG_H2 must be off, on or grpc" >&2; exit 2 ;; esac
if [[ $H2 == grpc ]]; then
  # Length-prefixed gRPC messages: 1 byte "not compressed", 4 bytes length.
  grpc_message() {
    printf '\x00'; printf "$(printf '\\x%02x\\x%02x\\x%02x\\x%02x' \
      $(( $1 >> 24 & 255 )) $(( $1 >> 16 & 255 )) $(( $1 >> 8 & 255 )) $(( $1 & 255 )))"
    head -c "$1" /dev/zero | tr '\0' 'a'
  }
  mkdir -p "$D/grpc/bench.Echo"
  grpc_message 0 >"$D/grpc/bench.Echo/0"
  grpc_message 4096 >"$D/grpc/bench.Echo/4k"
  grpc_message 65536 >"$D/grpc/bench.Echo/64k"
  grpc_message 16 >"$D/grpc-request"
  URL_PATH=bench.Echo/$URL_PATH
fi
for o in 1 2; do
  port=$([[ $o == 1 ]] && echo $P1 || echo $P2)
  if [[ $H2 == grpc ]]; then
    nghttpd --no-tls -a 127.0.0.1 -d "$D/grpc" --trailer 'grpc-status: 0' "$port" >"$D/nghttpd$o.log" 2>&1 &
    PIDS+=($!)
    continue
  fi
  mkdir -p "$D/o$o"; chmod 755 "$D/o$o"
  cat > "$D/o$o/nginx.conf" <<NG
worker_processes 1;
daemon off;
master_process off;
pid $D/o$o/nginx.pid;
error_log $D/o$o/error.log warn;
events { worker_connections 8192; }
http {
    access_log off;
    client_body_temp_path $D/o$o/cb; proxy_temp_path $D/o$o/px; fastcgi_temp_path $D/o$o/fc; uwsgi_temp_path $D/o$o/uw; scgi_temp_path $D/o$o/sc;
    keepalive_requests 10000000; keepalive_timeout 75s;
    sendfile on; tcp_nopush on; default_type application/octet-stream;
    server { listen 127.0.0.1:$port backlog=4096; root $D/www; location = /0 { return 200 ""; } }
}
NG
  nginx -p "$D/o$o" -c "$D/o$o/nginx.conf" -e "$D/o$o/error.log" >"$D/o$o/out.log" 2>&1 &
  PIDS+=($!)
done
cat > "$D/hopgate.yaml" <<Y
listeners:
  - { name: public, address: 127.0.0.1:$PG }
admin: { address: 127.0.0.1:$PA }
services:
  - name: origin
    lb: wrr_ring$([[ $H2 == grpc ]] && printf '\n    protocol: http2')
    nodes:
      - { id: o1, address: 127.0.0.1:$P1 }
      - { id: o2, address: 127.0.0.1:$P2 }
routes:
  - { id: all, match: { path_prefix: / }, service: origin$([[ ${CG_RATE_LIMIT:-off} != off ]] && echo ", rate_limit: bench") }
Y
DIRECT=${CG_DIRECT:-off}
case $DIRECT in off|on) ;; *) echo "callgrind.sh: CG_DIRECT must be off or on" >&2; exit 2 ;; esac
if [[ $DIRECT == on ]]; then
  [[ $H2 == grpc ]] && { echo "callgrind.sh: CG_DIRECT=on does not go with CG_H2=grpc" >&2; exit 2; }
  sed -i 's|^  - { id: all, match: { path_prefix: / }, service: origin }$|  - { id: all, match: { path_prefix: / }, filters: [ { direct_response: { status: 200 } } ] }|' "$D/hopgate.yaml"
fi
case ${CG_RATE_LIMIT:-off} in
  on) printf 'rate_limits:\n  - { name: bench, key: [client_ip], rate: 1000000/s, burst: 1000000 }\n' >> "$D/hopgate.yaml" ;;
  in_flight) printf 'rate_limits:\n  - { name: bench, key: [client_ip], rate: 1000000/s, burst: 1000000, max_in_flight: 1000 }\n' >> "$D/hopgate.yaml" ;;
  fleet)
    PR=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    redis-server --port "$PR" --bind 127.0.0.1 --save "" --appendonly no --dir "$D" >"$D/redis.log" 2>&1 &
    PIDS+=($!)
    printf 'rate_limits:\n  - { name: bench, key: [client_ip], rate: 1000000/s, burst: 1000000, scope: fleet }\nstore: { kind: redis, url: "redis://127.0.0.1:%s/0" }\n' "$PR" >> "$D/hopgate.yaml" ;;
esac
if [[ ${CG_FILTERS:-off} == on ]]; then
  cat >> "$D/hopgate.yaml" <<'Y'
  - id: filtered
    match: { path_prefix: /f }
    service: origin
    filters:
      - request_headers: { set: { X-A: "1" }, add: { X-B: "${route_id}" }, remove: [X-C] }
      - url_rewrite: { path: { replace_prefix: / } }
Y
  URL_PATH=f/$URL_PATH
fi
WRK_H=()
[[ -n ${CG_HEADER:-} ]] && WRK_H+=(-H "$CG_HEADER")
case ${CG_JWT:-off} in
  off) ;;
  on|rs256|es256|hs256)
    ALG=$(echo "${CG_JWT/on/rs256}" | tr a-z A-Z)
    # One key and a token valid for an hour, by PyJWT (pip install pyjwt cryptography).
    TOKEN=$(python3 - "$ALG" "$D/keys.json" <<'PY'
import json, secrets, sys, time
import jwt
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from jwt.algorithms import ECAlgorithm, RSAAlgorithm
alg, out = sys.argv[1], sys.argv[2]
if alg == "RS256":
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    jwk = json.loads(RSAAlgorithm.to_jwk(key.public_key()))
elif alg == "ES256":
    key = ec.generate_private_key(ec.SECP256R1())
    jwk = json.loads(ECAlgorithm.to_jwk(key.public_key()))
else:
    key = secrets.token_bytes(32)
    jwk = {"kty": "oct", "k": jwt.utils.base64url_encode(key).decode()}
jwk.update({"kid": "k1", "alg": alg})
json.dump({"keys": [jwk]}, open(out, "w"))
claims = {"sub": "bench", "iss": "https://id.example.com", "aud": "api", "exp": int(time.time()) + 3600}
print(jwt.encode(claims, key, algorithm=alg, headers={"kid": "k1"}))
PY
) || { echo "callgrind.sh: CG_JWT needs PyJWT (pip install pyjwt cryptography)" >&2; exit 2; }
    sed -i 's|^  - { id: all, match: { path_prefix: / }, service: origin }$|  - { id: all, match: { path_prefix: / }, service: origin, auth: { jwt: { jwks_file: keys.json, issuer: "https://id.example.com", audiences: [api], claims_to_headers: { sub: X-User } } } }|' "$D/hopgate.yaml"
    WRK_H+=(-H "Authorization: Bearer $TOKEN")
    ;;
  *) echo "callgrind.sh: CG_JWT must be off, on, rs256, es256 or hs256" >&2; exit 2 ;;
esac
case ${CG_OTLP:-off} in
  on|unsampled)
    RATIO=1; [[ $CG_OTLP == unsampled ]] && RATIO=0
    printf 'tracing:\n  otlp: { enabled: true, endpoint: "http://127.0.0.1:%s/v1/traces", sample_ratio: %s }\n' "$PO" "$RATIO" >> "$D/hopgate.yaml"
    # The sink: reads each export and answers 200 (an empty response message).
    python3 -c '
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
class H(BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.send_response(200); self.send_header("Content-Length", "0"); self.end_headers()
    def log_message(self, *a): pass
ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()' "$PO" >"$D/sink.log" 2>&1 &
    PIDS+=($!)
    ;;
esac
FILTER="info,hopgate::access=off"; [[ ${CG_ACCESS_LOG:-off} == on ]] && FILTER=info
if [[ ${CG_THREADS:-1} == default ]]; then
  RUN=(env -u TOKIO_WORKER_THREADS -u HOPGATE_WORKER_THREADS taskset -c "${PROXY_CPU:-1}")
else
  RUN=(env TOKIO_WORKER_THREADS="${CG_THREADS:-1}" HOPGATE_WORKER_THREADS="${CG_THREADS:-1}")
fi
case ${CG_PROXY:-hopgate} in
  hopgate)
    RUST_LOG="$FILTER" "${RUN[@]}" \
      valgrind "${VG_OPTS[@]}" --callgrind-out-file="$D/cg.out" "$BIN" run --config "$D/hopgate.yaml" >"$D/hopgate.log" 2>&1 &
    ;;
  nginx)
    mkdir -p "$D/px"; chmod 755 "$D/px"
    cat > "$D/px/nginx.conf" <<NG
worker_processes 1;
daemon off;
master_process off;
pid $D/px/nginx.pid;
error_log $D/px/error.log warn;
events { worker_connections 8192; }
http {
    access_log off;
    client_body_temp_path $D/px/cb; proxy_temp_path $D/px/px; fastcgi_temp_path $D/px/fc; uwsgi_temp_path $D/px/uw; scgi_temp_path $D/px/sc;
    keepalive_requests 10000000; keepalive_timeout 75s;
    upstream origin {
        server 127.0.0.1:$P1;
        server 127.0.0.1:$P2;
        keepalive 64;
        keepalive_requests 10000000;
    }
    server {
        listen 127.0.0.1:$PG backlog=4096$([[ $H2 == on ]] && echo " http2");
        location / {
$([[ $DIRECT == on ]] && echo '            return 200 "";')
            proxy_pass http://origin;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_max_temp_file_size 0;
        }
    }
}
NG
    taskset -c "${PROXY_CPU:-1}" valgrind "${VG_OPTS[@]}" --callgrind-out-file="$D/cg.out" \
      nginx -p "$D/px" -c "$D/px/nginx.conf" -e "$D/px/error.log" >"$D/hopgate.log" 2>&1 &
    ;;
  haproxy)
    cat > "$D/haproxy.cfg" <<HA
global
    nbthread 1
    maxconn 4096
defaults
    mode http
    option http-keep-alive
    timeout connect 5s
    timeout client 30s
    timeout server 30s
    timeout http-keep-alive 75s
frontend fe
    bind 127.0.0.1:$PG$([[ $H2 == on ]] && echo " proto h2")
$([[ $DIRECT == on ]] && echo '    http-request return status 200')
    default_backend be
backend be
    balance roundrobin
    http-reuse always
    server o1 127.0.0.1:$P1
    server o2 127.0.0.1:$P2
HA
    taskset -c "${PROXY_CPU:-1}" valgrind "${VG_OPTS[@]}" --callgrind-out-file="$D/cg.out" \
      "$(command -v haproxy || echo /usr/sbin/haproxy)" -db -f "$D/haproxy.cfg" >"$D/hopgate.log" 2>&1 &
    ;;
  *) echo "callgrind.sh: CG_PROXY must be hopgate, nginx or haproxy" >&2; exit 2 ;;
esac
VG=$!; PIDS+=($VG)
# Ready when it answers (over h2c with prior knowledge under CG_H2=on: the
# h2c listeners of nginx and HAProxy speak nothing else).
CURL_H2=(); [[ $H2 == on ]] && CURL_H2=(--http2-prior-knowledge)
for i in $(seq 1 120); do curl -s "${CURL_H2[@]}" -o /dev/null "http://127.0.0.1:$PG/0" && break; sleep 0.5; done
load() {   # load SECONDS OUT: wrk, or h2load under CG_H2
  if [[ $H2 == off ]]; then
    wrk -t1 -c"${CG_CONNS:-4}" -d"$1"s "${WRK_H[@]}" "http://127.0.0.1:$PG/$URL_PATH" > "$2" 2>&1
  else
    local args=()
    [[ $H2 == grpc ]] && args=(-d "$D/grpc-request" -H 'content-type: application/grpc' -H 'te: trailers')
    [[ -n ${CG_HEADER:-} ]] && args+=(-H "$CG_HEADER")
    h2load -t1 -c"${CG_CONNS:-4}" -m"${CG_STREAMS:-10}" -D "$1" "${args[@]}" "http://127.0.0.1:$PG/$URL_PATH" > "$2" 2>&1
  fi
}
load 2 "$D/warm.txt"
callgrind_control -z $VG >/dev/null
load 6 "$D/wrk.txt"
callgrind_control -d $VG >/dev/null
sleep 1
if [[ $H2 == off ]]; then
  REQS=$(grep -oE '^ *[0-9]+ requests' "$D/wrk.txt" | awk '{print $1}')
else
  # h2load: "requests: N total, N started, N done, N succeeded, ..."
  REQS=$(grep -m1 -oE '[0-9]+ succeeded' "$D/wrk.txt" | awk '{print $1}')
fi
F=$(ls -t "$D"/cg.out* | grep -v '^$' | head -1)
IR=$(grep -E '^(summary|totals):' "$F" | head -1 | awk '{print $2}')
echo "$LABEL proxy=${CG_PROXY:-hopgate} path=/$URL_PATH conns=${CG_CONNS:-4} threads=${CG_THREADS:-1} access_log=${CG_ACCESS_LOG:-off} otlp=${CG_OTLP:-off} rate_limit=${CG_RATE_LIMIT:-off} filters=${CG_FILTERS:-off} jwt=${CG_JWT:-off} h2=$H2 direct=$DIRECT file=$F requests=$REQS Ir=$IR per_request=$(python3 -c "print(round($IR/$REQS))")"
if [[ ${CG_CACHE:-off} == on ]]; then
  python3 - "$F" "$REQS" <<'PY'
import sys
f, n = sys.argv[1], int(sys.argv[2])
names = vals = None
for line in open(f):
    if line.startswith("events:"):
        names = line.split()[1:]
    elif line.startswith(("summary:", "totals:")) and vals is None:
        vals = [int(v) for v in line.split()[1:]]
per = {k: v / n for k, v in zip(names, vals)}
print("per request: " + " ".join(f"{k}={per[k]:.0f}" for k in ("Ir", "I1mr", "D1mr", "D1mw", "ILmr") if k in per))
PY
fi
grep -m1 -o 'runtime: .*' "$D/hopgate.log" || true
grep -E 'Non-2xx|Socket errors|^status codes|^requests:' "$D/wrk.txt"
