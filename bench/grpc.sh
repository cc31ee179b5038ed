# bench/grpc.sh — the gRPC points of bench/run.sh, sourced by it: the
# message files, the nghttpd origins that answer them, and the one-call
# check every target passes before it is measured. Uses run.sh's TMP,
# NEED_GRPC, ON_PROXY, NGHTTPD_BIN, track, wait_port, die and the
# ORIGIN_PORT / ORIGIN_PID maps; defines GRPC_FILES and GRPC_REQ.

# gRPC: length-prefixed messages (1 byte "not compressed", 4 bytes length,
# the message). The origins answer /bench.Echo/SIZE with a SIZE message
# (0 B, 4 KiB, 64 KiB); every call sends the same 16-byte one.
GRPC_FILES="$TMP/grpc-www"
GRPC_REQ="$TMP/grpc-request"
grpc_message() {             # grpc_message BYTES: one framed message of BYTES 'a's
  printf '\x00'; printf "$(printf '\\x%02x\\x%02x\\x%02x\\x%02x' \
    $(( $1 >> 24 & 255 )) $(( $1 >> 16 & 255 )) $(( $1 >> 8 & 255 )) $(( $1 & 255 )))"
  head -c "$1" /dev/zero | tr '\0' 'a'
}
if [[ $NEED_GRPC == 1 ]]; then
  mkdir -p "$GRPC_FILES/bench.Echo"
  grpc_message 0 >"$GRPC_FILES/bench.Echo/0"
  grpc_message 4096 >"$GRPC_FILES/bench.Echo/4k"
  grpc_message 65536 >"$GRPC_FILES/bench.Echo/64k"
  grpc_message 16 >"$GRPC_REQ"
fi

# start_grpc_origin NAME PORT: nghttpd (h2c, one thread) answering every
# call with its message and the trailer grpc-status: 0 -> ORIGIN_PID[NAME]
start_grpc_origin() {
  local name=$1 port=$2 pid
  mkdir -p "$TMP/$name"
  "${ON_PROXY[@]}" "$NGHTTPD_BIN" --no-tls -a 127.0.0.1 -d "$GRPC_FILES" \
    --trailer 'grpc-status: 0' "$port" >"$TMP/$name/nghttpd.log" 2>&1 &
  pid=$!
  track "$pid"
  wait_port "$port" "$pid" 10 || { cat "$TMP/$name/nghttpd.log" >&2; die "gRPC origin $name did not start"; }
  ORIGIN_PORT[$name]=$port
  ORIGIN_PID[$name]=$pid
}

# grpc_check PORT: one unary call through PORT with nghttp; prints "ok", or
# what was wrong (and fails)
grpc_check() {
  local out
  out="$(nghttp -v -t 5 -d "$GRPC_REQ" -H 'content-type: application/grpc' -H 'te: trailers' \
    "http://127.0.0.1:$1/bench.Echo/4k" 2>&1 | tr -c '[:print:]\n' '.')"
  grep -q ':status: 200' <<<"$out" || { echo "no 200: $(grep -m1 ':status' <<<"$out" || tail -n1 <<<"$out")"; return 1; }
  grep -q ') grpc-status: 0' <<<"$out" || { echo "no grpc-status: 0"; return 1; }
  echo ok
}
