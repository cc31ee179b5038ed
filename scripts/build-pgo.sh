#!/usr/bin/env bash
# scripts/build-pgo.sh — a profile-guided (PGO) release build of hopgate.
#
#   bash scripts/build-pgo.sh            # → target/pgo/hopgate
#
# Three steps, like rustc's own release builds:
#   1. an instrumented build (`-Cprofile-generate`, fat LTO as the release
#      profile), into target/pgo-gen;
#   2. training: that binary proxies a bounded mix of real traffic on
#      loopback for about a minute — HTTP/1.1 at 1, 16 and 128 connections,
#      bodies (Content-Length, chunked, trailers, uploads, 64 KiB answers),
#      HEAD and 404s, h2c, TLS (HTTP/1.1 and h2) when openssl is there,
#      WebSocket echoes, and gateway sessions with a node drained and
#      put back (sessions minted, known, hopping, with context) — to two
#      `hopgate backend` processes (whose own counts are thrown away);
#   3. the optimised build (`-Cprofile-use`), into target/pgo-use, copied
#      to target/pgo/hopgate.
# The compiler then knows which branches and functions the request path
# takes: it lays the taken code out together and moves the rest away,
# which is what the instruction cache sees (docs/BENCHMARKS.md: ~20 %
# fewer instructions and ~60 % fewer instruction-cache misses per proxied
# request). Code the training never ran is optimised for size instead of
# speed; every protocol hopgate serves is in the mix for that reason.
#
# Needs: cargo with the llvm-tools component (`rustup component add
# llvm-tools`; added here when rustup is there), curl, python3; wrk,
# h2load and openssl are used when present. Takes two release builds
# (~12 minutes on two cores) and the training. Talks only to 127.0.0.1.
#
# Options: --gateway-only (the gateway without the demo and test backend,
# as `cargo build --no-default-features`, in both builds; the training's
# backends then come from a third, uninstrumented build), --out PATH (default target/pgo/hopgate), --keep (keep the
# raw profiles and the training logs in target/pgo-work), --train-with
# BIN (no build: only run the training mix through BIN, any hopgate
# build with the demo backend, and fail when any of its answers is not
# the expected one — CI's check that the mix still works).
set -euo pipefail
OUT=""
KEEP=0
FEATURES=()
TRAIN_BIN=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --out) OUT=$(realpath -m "$2"); shift ;;
    --out=*) OUT=$(realpath -m "${1#*=}") ;;
    --keep) KEEP=1 ;;
    --gateway-only) FEATURES=(--no-default-features) ;;
    --train-with) TRAIN_BIN=$(realpath "$2"); shift ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) echo "build-pgo.sh: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
# Paths given are the caller's; from here on, the repository's root.
cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=${OUT:-$ROOT/target/pgo/hopgate}

log() { printf '[pgo %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { printf '[pgo] ERROR: %s\n' "$*" >&2; exit 1; }

for t in cargo rustc curl python3; do command -v "$t" >/dev/null || die "$t is needed"; done
HOST=$(rustc -vV | sed -n 's/^host: //p')
PROFDATA="$(rustc --print sysroot)/lib/rustlib/$HOST/bin/llvm-profdata"
if [[ -z $TRAIN_BIN && ! -x $PROFDATA ]]; then
  command -v rustup >/dev/null || die "no llvm-profdata at $PROFDATA: install the llvm-tools component of this toolchain"
  log "rustup component add llvm-tools (llvm-profdata, matching this rustc's LLVM)"
  rustup component add llvm-tools >&2
  [[ -x $PROFDATA ]] || die "still no llvm-profdata at $PROFDATA"
fi

WORK=$ROOT/target/pgo-work
rm -rf "$WORK"
mkdir -p "$WORK/profiles" "$WORK/discard" "$(dirname "$OUT")"
# --target keeps build scripts and proc-macros out of the instrumentation
# (RUSTFLAGS then applies to the target's crates only).
build() {   # build TARGET_DIR RUSTFLAGS [CARGO_ARGS...]
  local dir=$1 flags=$2
  shift 2
  RUSTFLAGS="${RUSTFLAGS:-} $flags" cargo build --locked --release -p hopgate \
    --target "$HOST" --target-dir "$dir" "$@" >&2
}

# GEN is the gateway the training runs; BACKEND serves it (`hopgate
# backend`, the demo feature). The instrumented gateway is built with the
# final build's features: a feature changes the features of dependencies
# (and so every crate's symbol hashes), and a profile only applies to
# functions whose names match. With --gateway-only the backends therefore
# come from a separate, uninstrumented build (the `quick` profile).
if [[ -n $TRAIN_BIN ]]; then
  [[ -x $TRAIN_BIN ]] || die "no binary at $TRAIN_BIN"
  GEN=$TRAIN_BIN
  BACKEND=$TRAIN_BIN
else
  log "1/3 instrumented build (target/pgo-gen)"
  build "$ROOT/target/pgo-gen" "-Cprofile-generate=$WORK/profiles" "${FEATURES[@]}"
  GEN=$ROOT/target/pgo-gen/$HOST/release/hopgate
  BACKEND=$GEN
  if ((${#FEATURES[@]})); then
    log "the training backends (cargo build --profile quick, not instrumented)"
    cargo build --locked --profile quick -p hopgate >&2
    BACKEND=$ROOT/target/quick/hopgate
  fi
fi

# ---------------------------------------------------------------- training --
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  [[ $KEEP == 1 ]] || rm -rf "$WORK/discard"
}
trap cleanup EXIT

# The backends run the same instrumented binary; their counts go to a
# directory that is thrown away, so only the gateway's shape the profile.
start_backend() {   # start_backend ID -> its port in PORT
  local out=$WORK/backend-$1.out
  LLVM_PROFILE_FILE="$WORK/discard/%p.profraw" RUST_LOG=warn \
    "$BACKEND" backend --id "$1" >"$out" 2>"$WORK/backend-$1.err" &
  PIDS+=($!)
  for _ in $(seq 1 100); do
    grep -q 'listening on' "$out" 2>/dev/null && break
    sleep 0.1
  done
  PORT=$(grep -oE '127\.0\.0\.1:[0-9]+' "$out" | head -1 | cut -d: -f2)
  [[ -n $PORT ]] || die "training backend $1 did not start (see $WORK/backend-$1.err)"
}
free_ports() {
  python3 -c '
import socket, sys
ss = [socket.socket() for _ in range(int(sys.argv[1]))]
for s in ss: s.bind(("127.0.0.1", 0))
print(*[s.getsockname()[1] for s in ss])' "$1"
}

log "2/3 training"
start_backend o1; B1=$PORT
start_backend o2; B2=$PORT
TLS=0
if command -v openssl >/dev/null; then
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
    -subj /CN=localhost -addext subjectAltName=DNS:localhost,IP:127.0.0.1 \
    -keyout "$WORK/key.pem" -out "$WORK/cert.pem" 2>/dev/null && TLS=1
fi
# start_gateway NAME [CPU] [sessions]: a gateway on the instrumented
# binary, pinned to CPU when given (one CPU: hopgate's current-thread
# runtime; unpinned on a bigger machine: the multi-thread one — both are
# trained); `sessions` turns gateway sessions on (with a migrating drain).
# Sets HP (cleartext port), TP (TLS port), AP (admin port) and GW (its pid).
start_gateway() {
  local dir=$WORK/$1
  mkdir -p "$dir"
  read -r HP TP AP < <(free_ports 3)
  {
    echo "listeners:"
    echo "  - { name: public, address: 127.0.0.1:$HP }"
    if [[ $TLS == 1 ]]; then
      echo "  - name: https"
      echo "    address: 127.0.0.1:$TP"
      echo "    tls: { certificates: [ { cert: $WORK/cert.pem, key: $WORK/key.pem } ] }"
    fi
    echo "admin: { address: 127.0.0.1:$AP }"
    echo "limits: { max_connections: 2048 }"   # within a low descriptor limit
    echo "services:"
    echo "  - name: origin"
    echo "    lb: wrr_ring"
    [[ ${3:-} == sessions ]] && echo "    drain: { mode: migrate, deadline: 30s }"
    echo "    nodes:"
    echo "      - { id: o1, address: 127.0.0.1:$B1 }"
    echo "      - { id: o2, address: 127.0.0.1:$B2 }"
    echo "routes:"
    echo "  - { id: all, match: { path_prefix: / }, service: origin }"
    [[ ${3:-} == sessions ]] && echo "sessions: { enabled: true, context_max: 4KiB }"
  } >"$dir/hopgate.yaml"
  local pin=()
  [[ -n ${2:-} ]] && command -v taskset >/dev/null && pin=(taskset -c "$2")
  # The access log off, as in the load benchmark; the event log on.
  env -u TOKIO_WORKER_THREADS -u HOPGATE_WORKER_THREADS \
    LLVM_PROFILE_FILE="$WORK/profiles/gateway-%p.profraw" RUST_LOG="info,hopgate::access=off" \
    "${pin[@]}" "$GEN" run --config "$dir/hopgate.yaml" >"$dir/gateway.log" 2>&1 &
  GW=$!
  PIDS+=($GW)
  for _ in $(seq 1 100); do curl -s -o /dev/null "http://127.0.0.1:$HP/" && break; sleep 0.1; done
  curl -s -o /dev/null "http://127.0.0.1:$HP/" || die "the instrumented gateway did not answer (see $dir/gateway.log)"
}
# A graceful stop writes the gateway's profile.
stop_gateway() { kill -TERM "$GW"; wait "$GW" 2>/dev/null || true; }
# many STATUS CURL_ARGS...: globbed URLs, bodies thrown away; every answer
# must have STATUS (a training mix that silently failed would train the
# error paths instead).
many() {
  local want=$1 codes=$WORK/codes
  shift
  curl -s -w '%{stderr}%{http_code}\n' "$@" >/dev/null 2>"$codes" || true
  local bad
  bad=$(grep -cv "^$want\$" "$codes" || true)
  [[ $bad == 0 && -s $codes ]] || die "training: $bad of $(wc -l <"$codes") answers were not $want: curl $*"
}
# checked_h2load H2LOAD_ARGS...: h2load whose every request succeeds.
checked_h2load() {
  h2load "$@" >"$WORK/h2load.out" 2>&1 || true
  grep -q ' 0 failed, 0 errored' "$WORK/h2load.out" \
    || die "training: h2load $* saw failures: $(grep -E '^requests:' "$WORK/h2load.out")"
}
# checked_wrk WRK_ARGS...: wrk that must see no error and no non-2xx answer.
checked_wrk() {
  local out
  out=$(wrk "$@")
  if grep -qE 'Non-2xx|Socket errors' <<<"$out"; then
    die "training: wrk $* saw errors: $(grep -E 'Non-2xx|Socket errors' <<<"$out" | tr '\n' ' ')"
  fi
}

drive() {   # the traffic mix, against the gateway at HP / TP
  local U=http://127.0.0.1:$HP
  if command -v wrk >/dev/null; then
    checked_wrk -t1 -c1 -d3s "$U/0"
    checked_wrk -t1 -c16 -d4s "$U/0"
    checked_wrk -t1 -c128 -d3s "$U/0"
    checked_wrk -t1 -c16 -d3s "$U/k?bytes=4096"
    checked_wrk -t1 -c128 -d2s "$U/k?bytes=4096"
  else
    many 200 "$U/0?i=[1-20000]"
    many 200 -Z --parallel-max 16 "$U/0?i=[1-20000]"
  fi
  many 200 "$U/big?bytes=65536&i=[1-300]"
  many 200 "$U/chunked?chunked=1&bytes=8192&i=[1-300]"
  many 200 -H 'TE: trailers' "$U/trailers?trailers=1&bytes=100&i=[1-300]"
  many 200 -X POST --data-binary "@$WORK/upload" "$U/up?echo=1&i=[1-300]"
  many 200 -X POST -H 'Transfer-Encoding: chunked' --data-binary "@$WORK/upload" "$U/upc?i=[1-200]"
  many 200 -I "$U/head?i=[1-200]"
  many 404 "$U/missing?status=404&i=[1-200]"
  # h2c (curl 7.88 loses the requests it multiplexes on a reused
  # prior-knowledge connection, so curl sends one request per connection).
  if command -v h2load >/dev/null; then
    checked_h2load -n 20000 -c 4 -m 10 "$U/h2"
    checked_h2load -n 3000 -c 1 -m 1 "$U/h2one"
    [[ $TLS == 1 ]] && checked_h2load -n 3000 -c 2 -m 4 "https://127.0.0.1:$TP/h2tls"
  else
    for _ in $(seq 1 200); do many 200 --http2-prior-knowledge "$U/h2"; done
  fi
  if [[ $TLS == 1 ]]; then
    many 200 -k --http1.1 "https://127.0.0.1:$TP/tls1?i=[1-2000]"
    # A handshake each, HTTP/2 by ALPN.
    for _ in $(seq 1 50); do many 200 -k "https://127.0.0.1:$TP/hs"; done
  fi
  # WebSocket: an upgrade, ten masked text frames echoed, a close; 100 times.
  python3 - "$HP" <<'PY' || die "training: the WebSocket echoes failed"
import base64, os, socket, struct, sys
port = int(sys.argv[1])
def frame(op, payload):
    mask = os.urandom(4)
    body = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
    return bytes([0x80 | op, 0x80 | len(payload)]) + mask + body
def read_exact(s, n):
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise EOFError
        buf += chunk
    return buf
for _ in range(100):
    s = socket.create_connection(("127.0.0.1", port))
    key = base64.b64encode(os.urandom(16)).decode()
    s.sendall((f"GET /ws HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"
               f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
               f"Sec-WebSocket-Version: 13\r\n\r\n").encode())
    head = b""
    while b"\r\n\r\n" not in head:
        head += s.recv(4096)
    assert head.startswith(b"HTTP/1.1 101"), head[:40]
    for i in range(10):
        s.sendall(frame(1, b"hello %d" % i))
        h = read_exact(s, 2)
        read_exact(s, h[1] & 0x7F)
    s.sendall(frame(8, struct.pack("!H", 1000)))
    s.close()
PY
}

head -c 65536 /dev/zero >"$WORK/upload"
start_gateway one-cpu 0
drive
stop_gateway
start_gateway all-cpus
drive
stop_gateway
# Sessions, hops and drains: clients that keep their cookie (some with a
# context their backend asks the gateway to keep), new clients minted a
# session each, then a node drained (its sessions hop on their next
# request) and put back.
start_gateway sessions "" sessions
drive_sessions() {   # drive_sessions ROUND
  local c
  for c in $(seq 1 8); do
    many 200 -b "$WORK/jar$c" -c "$WORK/jar$c" "http://127.0.0.1:$HP/s$1?c=$c&i=[1-150]"
    many 200 -b "$WORK/jar$c" -c "$WORK/jar$c" "http://127.0.0.1:$HP/s$1?context=ctx$c&i=[1-10]"
  done
  many 200 "http://127.0.0.1:$HP/new$1?i=[1-1000]"
}
drive_sessions 1
many 200 -X POST "http://127.0.0.1:$AP/admin/v1/nodes/origin/o1/drain"
drive_sessions 2
many 200 -X POST "http://127.0.0.1:$AP/admin/v1/nodes/origin/o1/undrain"
drive_sessions 3
stop_gateway
if [[ -n $TRAIN_BIN ]]; then
  log "the training mix ran through $TRAIN_BIN: every answer as expected"
  exit 0
fi
ls "$WORK"/profiles/*.profraw >/dev/null 2>&1 || die "no profile was written"

log "merging $(ls "$WORK"/profiles/*.profraw | wc -l) profiles"
"$PROFDATA" merge -o "$WORK/merged.profdata" "$WORK"/profiles/*.profraw
# Named by its content: cargo does not look into the file RUSTFLAGS
# names, so a new profile under the same name would leave every crate
# built with the last one in place.
PROFILE=$WORK/hopgate-$(sha256sum "$WORK/merged.profdata" | cut -c1-16).profdata
mv "$WORK/merged.profdata" "$PROFILE"

log "3/3 optimised build (target/pgo-use)"
build "$ROOT/target/pgo-use" "-Cprofile-use=$PROFILE" "${FEATURES[@]}"
cp "$ROOT/target/pgo-use/$HOST/release/hopgate" "$OUT"
[[ $KEEP == 1 ]] || rm -rf "$WORK/profiles"
log "built $OUT ($("$OUT" --version 2>/dev/null || echo hopgate))"
