#!/usr/bin/env bash
# Installs the Debian packages the test suite and the benchmark smoke need,
# when they are missing. Safe to run again; does nothing when all are there.
set -euo pipefail

need=()
command -v curl    >/dev/null 2>&1 || need+=(curl)
command -v nginx   >/dev/null 2>&1 || need+=(nginx-light)
command -v haproxy >/dev/null 2>&1 || need+=(haproxy)
command -v wrk     >/dev/null 2>&1 || need+=(wrk)
command -v h2load  >/dev/null 2>&1 || need+=(nghttp2-client)
command -v ss      >/dev/null 2>&1 || need+=(iproute2)
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)

if ((${#need[@]})); then
  echo "deps: installing ${need[*]}"
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
echo "deps: ok"
