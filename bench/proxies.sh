# bench/proxies.sh — the proxies of bench/run.sh, sourced by it: the
# configuration each one gets (nginx, HAProxy in HTTP mode, the L4 floor in
# mode tcp, hopgate) and how each is started and checked. Uses run.sh's
# TMP, ON_PROXY, the *_BIN paths, track/track_tree, wait_port, stop_pid,
# has/skip_target and the ORIGIN_PORT / H1PORT / H2PORT / GRPCPORT /
# PROXY_PID maps.

# write_nginx_proxy DIR H1 H2 RETRY ORIGIN_NAMES...
write_nginx_proxy() {
  local dir=$1 h1=$2 h2=$3 retry=$4; shift 4
  local servers="" o extra="" loc_extra=""
  [[ $retry == 1 ]] && extra=" max_fails=1 fail_timeout=2s"
  for o in "$@"; do servers+="        server 127.0.0.1:${ORIGIN_PORT[$o]}$extra;"$'\n'; done
  [[ $retry == 1 ]] && loc_extra="proxy_next_upstream error timeout http_502 http_503; proxy_next_upstream_tries 3;"
  local grpc_up="" grpc_loc=""
  if [[ ${#GRPC_ORIGINS[@]} -gt 0 && -n $h2 ]]; then
    grpc_up="    upstream grpc_origin {"$'\n'
    for o in "${GRPC_ORIGINS[@]}"; do grpc_up+="        server 127.0.0.1:${ORIGIN_PORT[$o]};"$'\n'; done
    # nginx runs one call per upstream connection: room for every call
    # in flight (16 connections x 10 streams) to keep its connection
    grpc_up+="        keepalive 512;"$'\n'"        keepalive_requests 10000000;"$'\n'"    }"
    grpc_loc="        location /bench.Echo/ { grpc_pass grpc://grpc_origin; }"
  fi
  mkdir -p "$dir"; chmod 755 "$dir"
  # keepalive: nginx's cache of idle upstream connections, one for all the
  # upstream's servers. It must hold every request in flight (128
  # connections; 16 x 10 h2c streams), or each one past it closes its
  # connection and the next request dials a new one (hopgate keeps 256
  # per node by default, HAProxy has no cap).
  {
    nginx_common "$dir"
    cat <<EOF
    upstream origin {
$servers        keepalive 512;
        keepalive_requests 10000000;
    }
$grpc_up
    server {
        listen 127.0.0.1:$h1 backlog=4096;
$( [[ -n $h2 ]] && echo "        listen 127.0.0.1:$h2 backlog=4096 http2;" )
        location / {
            proxy_pass http://origin;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_max_temp_file_size 0;
            $loc_extra
        }
$grpc_loc
    }
}
EOF
  } >"$dir/nginx.conf"
}
start_nginx_proxy() {        # start_nginx_proxy DIR PORT -> echo pid
  local dir=$1 pid
  "${ON_PROXY[@]}" "$NGINX_BIN" -p "$dir" -c "$dir/nginx.conf" -e "$dir/error.log" >>"$dir/stdout.log" 2>&1 &
  pid=$!
  track "$pid"
  if ! wait_port "$2" "$pid" 10; then cat "$dir/error.log" >&2 2>/dev/null; die "nginx proxy did not start"; fi
  track_tree "$pid"
  STARTED_PID=$pid
}

# write_haproxy DIR H1 H2 RETRY ORIGIN_NAMES...
write_haproxy() {
  local dir=$1 h1=$2 h2=$3 retry=$4; shift 4
  local servers="" o i=0 chk="" be_extra=""
  if [[ $retry == 1 ]]; then
    chk=" check inter 500ms"
    be_extra=$'    retry-on all-retryable-errors\n    retries 3\n    option redispatch\n'
  fi
  for o in "$@"; do i=$((i + 1)); servers+="    server o$i 127.0.0.1:${ORIGIN_PORT[$o]}$chk"$'\n'; done
  local grpc_use="" grpc_be=""
  if [[ ${#GRPC_ORIGINS[@]} -gt 0 && -n $h2 ]]; then
    grpc_use="    use_backend grpc if { path_beg /bench.Echo/ }"
    grpc_be="backend grpc"$'\n'"    balance roundrobin"$'\n'"    http-reuse always"$'\n'
    for o in "${GRPC_ORIGINS[@]}"; do grpc_be+="    server $o 127.0.0.1:${ORIGIN_PORT[$o]} proto h2"$'\n'; done
  fi
  mkdir -p "$dir"
  cat >"$dir/haproxy.cfg" <<EOF
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
    bind 127.0.0.1:$h1
$( [[ -n $h2 ]] && echo "    bind 127.0.0.1:$h2 proto h2" )
$grpc_use
    default_backend be
backend be
    balance roundrobin
    http-reuse always
$be_extra$servers
$grpc_be
EOF
}
# write_haproxy_tcp DIR H1 H2 ORIGIN_NAMES...: the L4 floor. mode tcp, one
# upstream connection per client connection (round robin), no HTTP parsing:
# what forwarding the bytes costs in the kernel plus an event loop. h2c goes
# to origin 1's h2c port (the only one), like the direct h2c rows; gRPC
# (its own port, GRPCPORT[floor]) round-robins over the gRPC origins.
write_haproxy_tcp() {
  local dir=$1 h1=$2 h2=$3 servers="" o i=0; shift 3
  for o in "$@"; do i=$((i + 1)); servers+="    server o$i 127.0.0.1:${ORIGIN_PORT[$o]}"$'\n'; done
  mkdir -p "$dir"
  {
    cat <<EOF
global
    nbthread 1
    maxconn 4096
defaults
    mode tcp
    timeout connect 5s
    timeout client 75s
    timeout server 75s
frontend fe
    bind 127.0.0.1:$h1
    default_backend be
backend be
    balance roundrobin
$servers
EOF
    if [[ -n $h2 ]]; then
      printf 'frontend fe2\n    bind 127.0.0.1:%s\n    default_backend be2\nbackend be2\n    server o1 127.0.0.1:%s\n' \
        "$h2" "${ORIGIN_H2PORT[o1]}"
    fi
    if [[ ${#GRPC_ORIGINS[@]} -gt 0 ]]; then
      printf 'frontend fe3\n    bind 127.0.0.1:%s\n    default_backend be3\nbackend be3\n    balance roundrobin\n' \
        "${GRPCPORT[floor]}"
      for o in "${GRPC_ORIGINS[@]}"; do printf '    server %s 127.0.0.1:%s\n' "$o" "${ORIGIN_PORT[$o]}"; done
    fi
  } >"$dir/haproxy.cfg"
}
start_haproxy() {            # start_haproxy DIR PORT
  local dir=$1 pid
  "${ON_PROXY[@]}" "$HAPROXY_BIN" -db -f "$dir/haproxy.cfg" >"$dir/haproxy.log" 2>&1 &
  pid=$!
  track "$pid"
  if ! wait_port "$2" "$pid" 10; then cat "$dir/haproxy.log" >&2; die "haproxy did not start"; fi
  track_tree "$pid"
  STARTED_PID=$pid
}

HOPGATE_BIN_SET=""
if [[ -n ${HOPGATE_BIN:-} ]]; then HOPGATE_BIN_SET=1; else HOPGATE_BIN="$REPO_DIR/target/release/hopgate"; fi
HOPGATE_PGO_BIN="${HOPGATE_PGO_BIN:-$REPO_DIR/target/pgo/hopgate}"
HOPGATE_BASE_BIN="${HOPGATE_BASE_BIN:-}"
# write_hopgate DIR PORT ADMINPORT ORIGIN_NAMES...
write_hopgate() {
  local dir=$1 port=$2 admin=$3 o i=0; shift 3
  mkdir -p "$dir"
  {
    echo "listeners:"
    echo "  - { name: public, address: 127.0.0.1:$port }"
    echo "admin: { address: 127.0.0.1:$admin }"
    echo "services:"
    echo "  - name: origin"
    echo "    lb: wrr_ring"
    echo "    nodes:"
    for o in "$@"; do i=$((i + 1)); echo "      - { id: o$i, address: 127.0.0.1:${ORIGIN_PORT[$o]} }"; done
    if [[ ${#GRPC_ORIGINS[@]} -gt 0 ]]; then
      echo "  - name: grpc"
      echo "    lb: wrr_ring"
      echo "    protocol: http2"
      echo "    nodes:"
      for o in "${GRPC_ORIGINS[@]}"; do echo "      - { id: $o, address: 127.0.0.1:${ORIGIN_PORT[$o]} }"; done
    fi
    echo "routes:"
    echo "  - { id: all, match: { path_prefix: / }, service: origin }"
    [[ ${#GRPC_ORIGINS[@]} -eq 0 ]] || echo "  - { id: grpc, match: { path_prefix: /bench.Echo/ }, service: grpc }"
  } >"$dir/hopgate.yaml"
}
start_hopgate() {            # start_hopgate DIR PORT [log|pgo|base] -> 0 ok / 1 failed (no die)
  local dir=$1 pid filter="info,hopgate::access=off" bin=$HOPGATE_BIN
  # Default settings: pinned to one CPU, hopgate picks a current-thread
  # runtime by itself (no worker-thread variable). Access log off (like
  # `access_log off` / no `log` in HAProxy): the per-request line is the
  # `hopgate::access` tracing target; with `log` it is on (the default),
  # written to the log file.
  [[ ${3:-} == log ]] && filter="info"
  [[ ${3:-} == pgo ]] && bin=$HOPGATE_PGO_BIN
  [[ ${3:-} == base ]] && bin=$HOPGATE_BASE_BIN
  env -u TOKIO_WORKER_THREADS -u HOPGATE_WORKER_THREADS RUST_LOG="$filter" \
    "${ON_PROXY[@]}" "$bin" run --config "$dir/hopgate.yaml" >"$dir/hopgate.log" 2>&1 &
  pid=$!
  track "$pid"
  if ! wait_port "$2" "$pid" 20; then
    local st=""; st="$(starttime "$pid" || true)"
    if [[ -n $st ]] && alive "$pid" "$st"; then HOPGATE_FAIL="not listening on port $2 after 20 s"
    else HOPGATE_FAIL="exited before listening"; fi
    HOPGATE_FAIL+="; log: $(tail -n 5 "$dir/hopgate.log" 2>/dev/null | tr '\n' ' ')"
    stop_pid "$pid"
    return 1
  fi
  track_tree "$pid"
  STARTED_PID=$pid
}

run_hopgate() {              # run_hopgate TARGET ADMIN_PORT [log|pgo|base|""] MESSAGE
  local t=$1
  has "$t" || return 0
  write_hopgate "$TMP/$t" "${H1PORT[$t]}" "$2" o1 o2
  if start_hopgate "$TMP/$t" "${H1PORT[$t]}" "$3"; then
    PROXY_PID[$t]=$STARTED_PID
    log "$4"
  else
    skip_target "$t" "${HOPGATE_FAIL:-did not start}"
  fi
}

prepare_hopgate() {
  if [[ $NO_BUILD == 0 && -z $HOPGATE_BIN_SET ]] && command -v cargo >/dev/null; then
    log "cargo build --release -p hopgate (no-op when up to date)"
    if ! (cd "$REPO_DIR" && cargo build --release -p hopgate) >"$TMP/cargo-build.log" 2>&1; then
      warn "cargo build failed: $(tail -n 3 "$TMP/cargo-build.log" | tr '\n' ' ')"
    fi
  fi
  if [[ ! -x $HOPGATE_BIN ]]; then
    has hopgate && skip_target hopgate "no binary at $HOPGATE_BIN"
    has hopgate-log && skip_target hopgate-log "no binary at $HOPGATE_BIN"
  fi
  if [[ ! -x $HOPGATE_PGO_BIN ]]; then
    has hopgate-pgo && skip_target hopgate-pgo "no binary at $HOPGATE_PGO_BIN (bash scripts/build-pgo.sh builds it)"
  fi
  if [[ -z $HOPGATE_BASE_BIN || ! -x $HOPGATE_BASE_BIN ]]; then
    has hopgate-base && skip_target hopgate-base "no binary at '$HOPGATE_BASE_BIN' (set HOPGATE_BASE_BIN)"
  fi
  return 0
}
