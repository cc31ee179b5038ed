//! Nasty and random values never panic.

use super::*;

/// Nasty values for every text field: validation must report, never panic.
const NASTY: &[&str] = &[
    "",
    " ",
    "*",
    "*.",
    ".",
    ":",
    "::",
    "[",
    "]",
    "[::1",
    "[]:80",
    "[::1]:",
    "/",
    "//",
    "http://",
    "https://",
    "http:///",
    "localhost",
    "localhost:",
    "é",
    "ä:80",
    "\u{0}",
    "\u{7f}",
    "💥",
    "-",
    "--1",
    "+1",
    "1e3",
    "NaN",
    "inf",
    "-0",
    "0",
    "18446744073709551616",
    "-9223372036854775809",
    "99999999999999999999999999GiB",
    "1.5.5s",
    "0.0000000001s",
    "(",
    "[a-",
    "a{999999}",
    "10.0.0.0/",
    "/8",
    "10.0.0.0/8/8",
    "0.0.0.0:0",
    "1:2:3:4:5:6:7:8:9",
];

#[test]
fn nasty_values_never_panic() {
    for &s in NASTY {
        let t = || Some(Text(s.to_owned()));
        let raw = RawConfig {
            replica_id: Some(s.into()),
            listeners: vec![RawListener {
                name: s.into(),
                address: s.into(),
                debug_headers: true,
                normalize_path: Some(false),
                tls: Some(crate::config::raw::RawListenerTls {
                    certificates: vec![crate::config::raw::RawCertificate {
                        cert: s.into(),
                        key: s.into(),
                        sni: vec![s.into(), format!("*.{s}")],
                    }],
                }),
                http1: Some(s.into()),
                proxy_protocol: Some(crate::config::raw::RawListenerProxyProtocol {
                    versions: Some(vec![Text(s.into()), Text(s.into())]),
                    trusted_cidrs: vec![s.into()],
                    timeout: t(),
                }),
            }],
            admin: Some(RawAdmin {
                address: s.into(),
                token_env: Some(s.into()),
            }),
            services: vec![RawService {
                name: s.into(),
                lb: Some(s.into()),
                hash_on: Some(RawHashOn {
                    header: Some(s.into()),
                    cookie: Some(s.into()),
                    source_ip: Some(true),
                }),
                protocol: Some(s.into()),
                pool: Some(RawPool {
                    max_idle: t(),
                    idle_timeout: t(),
                    max_connections: t(),
                    max_pending: t(),
                    queue_timeout: t(),
                }),
                health: Some(RawHealth {
                    path: Some(s.into()),
                    interval: t(),
                    timeout: t(),
                    rise: t(),
                    fall: t(),
                    expect_status: t(),
                    initial: Some(s.into()),
                }),
                outlier: Some(RawOutlier {
                    consecutive_5xx: t(),
                    consecutive_failures: t(),
                    base_ejection: t(),
                    max_ejection: t(),
                    max_ejected_percent: t(),
                }),
                circuit: Some(RawCircuit {
                    enabled: Some(true),
                    failure_threshold: t(),
                    reset_timeout: t(),
                    max_requests: t(),
                }),
                drain: Some(crate::config::raw::RawDrain {
                    mode: Some(s.into()),
                    deadline: t(),
                }),
                maintenance: None,
                tls: Some(crate::config::raw::RawUpstreamTls {
                    ca: Some(s.into()),
                    server_name: Some(s.into()),
                    client_cert: Some(s.into()),
                    client_key: None,
                }),
                slow_start: t(),
                retries: Some(crate::config::raw::RawServiceRetries {
                    on_status: Some(vec![Text(s.into())]),
                    on_status_idempotent: Some(vec![Text(s.into())]),
                }),
                discovery: Some(crate::config::raw::RawDiscovery {
                    dns: Some(crate::config::raw::RawDnsDiscovery {
                        name: s.into(),
                        port: t(),
                        kind: Some(s.into()),
                        resolvers: Some(vec![s.into()]),
                        refresh_min: t(),
                        refresh_max: t(),
                    }),
                }),
                proxy_protocol: Some(s.into()),
                nodes: vec![RawNode {
                    id: s.into(),
                    address: s.into(),
                    version: Some(s.into()),
                    weight: t(),
                    zone: Some(s.into()),
                    labels: [(s.to_owned(), s.to_owned())].into(),
                }],
            }],
            routes: vec![RawRoute {
                id: s.into(),
                priority: t(),
                matches: RawMatch {
                    host: Some(s.into()),
                    path: Some(s.into()),
                    path_prefix: Some(s.into()),
                    path_regex: Some(s.into()),
                    methods: vec![s.into()],
                    headers: [(s.to_owned(), s.to_owned())].into(),
                    query: [(s.to_owned(), s.to_owned())].into(),
                    source_cidrs: vec![s.into()],
                },
                service: s.into(),
                version: Some(s.into()),
                split: Some(vec![RawSplit {
                    version: s.into(),
                    weight: t(),
                }]),
                strict_version: true,
                enabled: Some(false),
                filters: vec![crate::config::raw::RawFilter {
                    request_headers: Some(edits(s)),
                    response_headers: Some(edits(s)),
                    url_rewrite: Some(crate::config::raw::RawUrlRewrite {
                        path: Some(path_rewrite(s)),
                        host: Some(s.into()),
                    }),
                    redirect: Some(crate::config::raw::RawRedirect {
                        scheme: Some(s.into()),
                        host: Some(s.into()),
                        port: t(),
                        path: Some(path_rewrite(s)),
                        status: t(),
                    }),
                    direct_response: Some(crate::config::raw::RawDirectResponse {
                        status: t(),
                        content_type: Some(s.into()),
                        body: Some(s.into()),
                        body_file: Some(s.into()),
                    }),
                    mirror: Some(crate::config::raw::RawMirror {
                        service: s.into(),
                        percent: t(),
                        max_in_flight: t(),
                    }),
                }],
                timeouts: Some(crate::config::raw::RawRouteTimeouts {
                    request: t(),
                    attempt: t(),
                    idle: t(),
                }),
                retries: Some(crate::config::raw::RawRouteRetries {
                    attempts: t(),
                    on_status: Some(vec![Text(s.into())]),
                    on_status_idempotent: Some(vec![Text(s.into())]),
                    budget: t(),
                }),
                limits: Some(crate::config::raw::RawRouteLimits {
                    max_body_bytes: t(),
                }),
                rate_limit: Some(s.into()),
                auth: Some(crate::config::raw::RawAuth {
                    jwt: Some(crate::config::raw::RawJwtAuth {
                        jwks_file: s.into(),
                        jwks: Some(crate::config::raw::RawJwksService {
                            service: s.into(),
                            path: s.into(),
                            refresh: t(),
                        }),
                        issuer: Some(s.into()),
                        audiences: Some(vec![s.into()]),
                        clock_skew: t(),
                        claims_to_headers: [(s.to_owned(), s.to_owned())].into(),
                        realm: Some(s.into()),
                        remove_authorization: Some(true),
                    }),
                    basic: Some(crate::config::raw::RawBasicAuth {
                        htpasswd: s.into(),
                        realm: Some(s.into()),
                        remove_authorization: Some(false),
                    }),
                    forward: Some(crate::config::raw::RawForwardAuth {
                        service: s.into(),
                        path: s.into(),
                        copy_request_headers: vec![s.into()],
                        copy_response_headers: vec![s.into()],
                        cache: Some(crate::config::raw::RawAuthCache {
                            key: crate::config::raw::RawCacheKey {
                                header: Some(s.into()),
                                cookie: Some(s.into()),
                            },
                            ttl: t(),
                            max_entries: t(),
                        }),
                        failure_mode: Some(s.into()),
                        timeout: t(),
                    }),
                }),
            }],
            rate_limits: vec![crate::config::raw::RawRateLimit {
                name: s.into(),
                key: vec![
                    crate::config::raw::RawLimitKey::Name(s.into()),
                    crate::config::raw::RawLimitKey::Map([(s.to_owned(), s.to_owned())].into()),
                ],
                rate: t(),
                burst: t(),
                scope: Some(s.into()),
                mode: Some(s.into()),
                max_in_flight: t(),
            }],
            access: Some(RawAccess {
                allow_cidrs: vec![s.into()],
                deny_cidrs: vec![s.into()],
                trusted_proxies: vec![s.into()],
            }),
            timeouts: Some(RawTimeouts {
                connect: t(),
                request: t(),
                idle: t(),
                header_read: t(),
                shutdown: t(),
                shutdown_delay: t(),
            }),
            limits: Some(RawLimits {
                max_header_bytes: t(),
                max_headers: t(),
                max_uri_bytes: t(),
                max_body_bytes: t(),
                max_connections: t(),
                max_connections_per_client: t(),
            }),
            retries: Some(RawRetries {
                attempts: t(),
                budget: t(),
                buffer_body: t(),
            }),
            sources: Some(crate::config::raw::RawSources {
                file: Some(crate::config::raw::RawFileSource {
                    watch: Some(true),
                    interval: t(),
                }),
                etcd: Some(crate::config::raw::RawEtcdSource {
                    endpoints: vec![s.into()],
                    prefix: Some(s.into()),
                    cache: Some(s.into()),
                }),
            }),
            sessions: Some(crate::config::raw::RawSessions {
                enabled: Some(true),
                cookie: Some(s.into()),
                header: Some(s.into()),
                ttl: t(),
                secret_env: Some(s.into()),
                previous_secrets_env: Some(s.into()),
                context_max: t(),
                secure: Some(crate::config::raw::RawSecure::Word(s.into())),
            }),
            store: Some(crate::config::raw::RawStore {
                kind: Some(s.into()),
                url: Some(s.into()),
                sentinel: Some(crate::config::raw::RawRedisSentinel {
                    master_name: Some(s.into()),
                    endpoints: vec![s.into()],
                }),
                cluster: Some(crate::config::raw::RawRedisCluster {
                    endpoints: vec![s.into()],
                }),
                prefix: Some(s.into()),
                max_queue: t(),
                path: Some(s.into()),
                max_sessions: t(),
                persist_interval: t(),
            }),
            maintenance: Some(crate::config::raw::RawMaintenance {
                mode: Some(s.into()),
                relaxed_timeout: t(),
                max_relaxed: t(),
                post_handoff_relaxed: t(),
                handoff_timeout: t(),
                max_handoff_retries: t(),
                workers: t(),
                queue: t(),
                breaker_failures: t(),
                breaker_reset: t(),
            }),
            access_log: Some(crate::config::raw::RawAccessLog {
                enabled: Some(true),
                format: Some(s.into()),
                path: Some(s.into()),
            }),
            upgrade: Some(crate::config::raw::RawUpgrade {
                socket: Some(s.into()),
            }),
            canary: Some(crate::config::raw::RawCanary {
                min_requests: t(),
                interval: t(),
                window: t(),
                max_error_ratio: t(),
                min_error_delta: t(),
                max_p99_ratio: t(),
                min_p99_delta: t(),
            }),
            tracing: Some(crate::config::raw::RawTracing {
                otlp: Some(crate::config::raw::RawOtlp {
                    enabled: Some(true),
                    endpoint: Some(s.into()),
                    protocol: Some(s.into()),
                    service_name: Some(s.into()),
                    sample_ratio: t(),
                    queue: t(),
                    batch: t(),
                    interval: t(),
                    timeout: t(),
                    headers: [(s.to_owned(), s.to_owned())].into(),
                }),
            }),
            state_dir: Some(s.into()),
        };
        let errs = validate(&raw).expect_err("every field is nonsense");
        for e in &errs {
            assert!(!e.path.is_empty(), "{s:?}: an error without a path: {e}");
            assert!(
                !e.message.is_empty(),
                "{s:?}: an error without a message at {}",
                e.path
            );
        }
    }
}

#[test]
fn random_documents_never_panic() {
    // Random documents stitched from valid and nasty fragments.
    let mut rng = fastrand::Rng::with_seed(7);
    let values: Vec<&str> = NASTY
        .iter()
        .copied()
        .chain([
            "127.0.0.1:8081",
            "api",
            "v1",
            "10.0.0.0/8",
            "2s",
            "64KiB",
            "100",
            "hash",
            "/api",
        ])
        .collect();
    for _ in 0..500 {
        let mut v = || values[rng.usize(..values.len())].to_owned();
        let raw = RawConfig {
            replica_id: Some(v()),
            listeners: vec![RawListener {
                name: v(),
                address: v(),
                debug_headers: false,
                normalize_path: None,
                tls: None,
                http1: Some(v()),
                proxy_protocol: None,
            }],
            admin: None,
            services: vec![RawService {
                name: v(),
                lb: Some(v()),
                hash_on: None,
                protocol: None,
                pool: Some(RawPool {
                    max_idle: Some(Text(v())),
                    idle_timeout: Some(Text(v())),
                    max_connections: Some(Text(v())),
                    max_pending: Some(Text(v())),
                    queue_timeout: Some(Text(v())),
                }),
                health: None,
                outlier: None,
                circuit: None,
                drain: None,
                maintenance: None,
                tls: None,
                slow_start: None,
                retries: None,
                discovery: None,
                proxy_protocol: Some(v()),
                nodes: vec![RawNode {
                    id: v(),
                    address: v(),
                    version: Some(v()),
                    weight: Some(Text(v())),
                    ..RawNode::default()
                }],
            }],
            routes: vec![RawRoute {
                id: v(),
                priority: Some(Text(v())),
                matches: RawMatch {
                    host: Some(v()),
                    path_regex: Some(v()),
                    ..RawMatch::default()
                },
                service: v(),
                split: Some(vec![RawSplit {
                    version: v(),
                    weight: Some(Text(v())),
                }]),
                ..RawRoute::default()
            }],
            ..RawConfig::default()
        };
        let _ = validate(&raw);
    }
}

/// Header edits with every field set to `s`.
fn edits(s: &str) -> crate::config::raw::RawHeaderEdits {
    crate::config::raw::RawHeaderEdits {
        add: [(s.to_owned(), s.to_owned())].into(),
        set: [(s.to_owned(), s.to_owned())].into(),
        remove: vec![s.into()],
    }
}

/// A path rewrite with every field set to `s`.
fn path_rewrite(s: &str) -> crate::config::raw::RawPathRewrite {
    crate::config::raw::RawPathRewrite {
        replace_prefix: Some(s.into()),
        full: Some(s.into()),
        regex: Some(s.into()),
        replace: Some(s.into()),
    }
}
