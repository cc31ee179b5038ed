#!/usr/bin/env bash
# Runs every cargo-fuzz target under fuzz/ for a bounded time each
# (default 15 s; `bash scripts/fuzz.sh 600` for ten minutes each, or
# `bash scripts/fuzz.sh 60 route` for one target). Installs cargo-fuzz when
# missing. libFuzzer's sanitizer flags are nightly-only; RUSTC_BOOTSTRAP
# lets the stable toolchain take them, so no second toolchain is needed.
# Every target in fuzz/Cargo.toml runs (config, route, token, headers,
# maintenance, h1: the HTTP/1.1 head parsers and the chunked decoder,
# traceparent: the W3C trace context parser; filters: header value
# templates, path rewrites and redirect locations; proxy_protocol: the
# PROXY v1/v2 header reader and the headers written to nodes).
set -euo pipefail
cd "$(dirname "$0")/../fuzz"

secs=${1:-15}
shift || true
export RUSTC_BOOTSTRAP=1

if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "fuzz: installing cargo-fuzz"
  cargo install --quiet --locked cargo-fuzz
fi

targets=("$@")
if ((${#targets[@]} == 0)); then
  mapfile -t targets < <(cargo fuzz list)
fi
cargo fuzz build -O
for t in "${targets[@]}"; do
  echo "fuzz: $t for ${secs}s"
  cargo fuzz run -O "$t" -- -max_total_time="$secs" -print_final_stats=0 2>&1 | grep -E '^(Done|==|SUMMARY|thread)' || true
  if [ -d "artifacts/$t" ] && [ -n "$(ls -A "artifacts/$t" 2>/dev/null)" ]; then
    echo "fuzz: $t found a crash: fuzz/artifacts/$t/"
    exit 1
  fi
done
echo "fuzz: no crash"
