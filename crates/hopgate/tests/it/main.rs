//! Integration tests: real `hopgate` processes (gateway and backends) on
//! 127.0.0.1:0, driven by real clients. One test binary, one module per
//! capability; the harness lives in `it/harness.rs`.

#![allow(unreachable_pub)]

mod etcd_server;
mod harness;
mod redis_server;

mod access_log_bytes;
mod admin;
mod auth;
mod backpressure;
mod canary;
mod canary_fleet;
mod dashboard;
mod dashboard_browser;
mod defaults;
mod demo;
mod dns;
mod errors;
mod etcd_ha;
mod events_resume;
mod filters;
mod fleet_etcd;
mod fleet_redis;
mod fleet_three;
mod forward_auth;
mod grpc;
mod grpcio;
mod h1_differential;
mod h2_conformance;
mod hardening;
mod interop_nginx;
mod maintenance;
mod maintenance_guard;
mod metrics_format;
mod mirror;
mod observability;
mod otlp;
mod prometheus;
mod proxy_protocol;
mod rate_limits;
mod rate_limits_fleet;
mod redis_ha;
mod reload;
mod resilience;
mod retry_on_status;
mod route_policy;
mod routing;
mod sessions;
mod sessions_lazy;
mod shutdown;
mod slow_start;
mod tls;
mod tls_pki;
mod tls_upstream;
mod transparency;
mod upgrade;
mod validate_cli;
mod websocket;
