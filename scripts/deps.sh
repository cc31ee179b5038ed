#!/usr/bin/env bash
# Installs the Debian packages the test suite and the benchmark smoke need,
# when they are missing. Safe to run again; does nothing when all are there.
#   bash scripts/deps.sh           everything the tests and benchmarks use
#   bash scripts/deps.sh --build   only what building hopgate needs: protoc
#                                  and the well-known .proto files (the etcd
#                                  client's build script compiles etcd's API)
set -euo pipefail

apt_install() {   # apt_install PACKAGE... (apt-get, through sudo when not root)
  echo "deps: installing $*"
  local sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

need=()
command -v protoc  >/dev/null 2>&1 || need+=(protobuf-compiler)
[ -f /usr/include/google/protobuf/descriptor.proto ] || need+=(libprotobuf-dev)
if [ "${1:-}" = --build ]; then
  if ((${#need[@]})); then apt_install "${need[@]}"; fi
  exit 0
fi
command -v curl    >/dev/null 2>&1 || need+=(curl)
# TLS tests: certificates made with the openssl command; the system roots
# (services[].tls without ca) read from /etc/ssl/certs.
command -v openssl >/dev/null 2>&1 || need+=(openssl)
[ -f /etc/ssl/certs/ca-certificates.crt ] || need+=(ca-certificates)
command -v nginx   >/dev/null 2>&1 || need+=(nginx-light)
command -v haproxy >/dev/null 2>&1 || need+=(haproxy)
command -v wrk     >/dev/null 2>&1 || need+=(wrk)
command -v h2load  >/dev/null 2>&1 || need+=(nghttp2-client)
# The load benchmark's gRPC origins (bench/run.sh).
command -v nghttpd >/dev/null 2>&1 || [ -x /usr/sbin/nghttpd ] || need+=(nghttp2-server)
command -v ss      >/dev/null 2>&1 || need+=(iproute2)
# Instructions per request in CI (bench/callgrind-check.sh): callgrind,
# callgrind_control.
command -v valgrind >/dev/null 2>&1 || need+=(valgrind)
# Fleet mode: a real etcd in the tests.
command -v etcd    >/dev/null 2>&1 || need+=(etcd-server)
command -v etcdctl >/dev/null 2>&1 || need+=(etcd-client)
# The Redis session store: a real redis-server in the tests.
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
# Redis Sentinel and Cluster tests (tests/it/redis_ha.rs): redis-cli
# creates the cluster and drives failovers; sentinels run as
# `redis-server FILE --sentinel`, so redis-sentinel is not needed.
command -v redis-cli >/dev/null 2>&1 || need+=(redis-tools)
# Basic auth: htpasswd files made by Apache's htpasswd -B (tests/it/auth.rs).
command -v htpasswd >/dev/null 2>&1 || need+=(apache2-utils)
# promtool checks the /metrics exposition in the observability tests and
# the shipped alerting rules; a real prometheus scrapes a gateway
# (tests/it/prometheus.rs). One package holds both.
if ! command -v promtool >/dev/null 2>&1 || ! command -v prometheus >/dev/null 2>&1; then
  need+=(prometheus)
fi
# The dashboard in a real browser (tests/it/dashboard_browser.rs).
command -v chromium >/dev/null 2>&1 || need+=(chromium)

if ((${#need[@]})); then apt_install "${need[@]}"; fi
# Third-party protocol peers for the interop tests: gRPC C-core (grpcio),
# and the python h2 stack for the HTTP/2 abuse cases.
if ! python3 -c "import grpc, h2, hpack, hyperframe" >/dev/null 2>&1; then
  echo "deps: installing grpcio h2 (pip)"
  python3 -m pip install -q --disable-pip-version-check grpcio h2 >/dev/null
fi
# The JSON Schema test validates the examples with a third-party validator.
if ! python3 -c "import jsonschema, yaml" >/dev/null 2>&1; then
  echo "deps: installing jsonschema pyyaml (pip)"
  python3 -m pip install -q --disable-pip-version-check jsonschema pyyaml >/dev/null
fi
# The span-export tests decode what hopgate sends with the official
# OpenTelemetry protobuf bindings (tests/it/py/otlp_receiver.py).
if ! python3 -c "import opentelemetry.proto.collector.trace.v1.trace_service_pb2" >/dev/null 2>&1; then
  echo "deps: installing opentelemetry-proto (pip)"
  python3 -m pip install -q --disable-pip-version-check opentelemetry-proto >/dev/null
fi
# DNS discovery's tests run a small DNS server on dnslib's wire format
# (tests/it/py/dns_server.py).
if ! python3 -c "import dnslib" >/dev/null 2>&1; then
  echo "deps: installing dnslib (pip)"
  python3 -m pip install -q --disable-pip-version-check dnslib >/dev/null
fi
if ! command -v kubernetes-validate >/dev/null 2>&1; then
  echo "deps: installing kubernetes-validate (pip)"
  python3 -m pip install -q --disable-pip-version-check kubernetes-validate >/dev/null
fi
# JWT auth: keys and tokens made by PyJWT (tests/it/py/jwt_tool.py, and
# bench/callgrind.sh with CG_JWT).
if ! python3 -c "import jwt, cryptography" >/dev/null 2>&1; then
  echo "deps: installing pyjwt cryptography (pip)"
  python3 -m pip install -q --disable-pip-version-check pyjwt cryptography >/dev/null
fi
echo "deps: ok"
