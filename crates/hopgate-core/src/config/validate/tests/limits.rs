//! Access lists, timeouts and limits.

use super::*;

#[test]
fn access_cidrs() {
    let c = ok(&with_top("access:\n  allow_cidrs: [10.0.0.0/8]\n  deny_cidrs: [10.9.0.0/16, 10.1.1.1]\n  trusted_proxies: [\"::1\"]\n"));
    assert_eq!(c.access.allow, ["10.0.0.0/8".parse::<IpNet>().unwrap()]);
    assert_eq!(c.access.deny.len(), 2);
    assert_eq!(
        c.access.trusted_proxies,
        ["::1/128".parse::<IpNet>().unwrap()]
    );
    let errs = errors(&with_top("access:\n  allow_cidrs: [10.0.0.0/8, x]\n  deny_cidrs: [1.2.3.4/99]\n  trusted_proxies: [10.0.0.1, 10.0.0.0/8, \"\"]\n"));
    let paths: Vec<&str> = errs.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(
        paths,
        [
            "access.allow_cidrs[1]",
            "access.deny_cidrs[0]",
            "access.trusted_proxies[2]"
        ]
    );
    assert!(errs[0].message.contains("invalid CIDR \"x\""));
}

#[test]
fn timeouts() {
    let c = ok(&with_top(
        "timeouts: { connect: 250ms, request: 2m, idle: 1h, header_read: 1.5s, shutdown: 5s, shutdown_delay: 0s }\n",
    ));
    assert_eq!(
        c.timeouts,
        Timeouts {
            connect: Duration::from_millis(250),
            request: Duration::from_secs(120),
            idle: Duration::from_secs(3600),
            header_read: Duration::from_millis(1500),
            shutdown: Duration::from_secs(5),
            shutdown_delay: Duration::ZERO,
        }
    );
    assert_eq!(Timeouts::default().shutdown_delay, Duration::from_secs(2));
    only(
        &with_top("timeouts: { shutdown_delay: 2h }\n"),
        "timeouts.shutdown_delay",
        "above the limit of 1h",
    );
    only(
        &with_top("timeouts: { shutdown_delay: soon }\n"),
        "timeouts.shutdown_delay",
        "",
    );
    // Only the given fields change.
    let c = ok(&with_top("timeouts: { shutdown: 1s }\n"));
    assert_eq!(
        c.timeouts,
        Timeouts {
            shutdown: Duration::from_secs(1),
            ..Timeouts::default()
        }
    );
    for field in ["connect", "request", "idle", "header_read", "shutdown"] {
        let path = format!("timeouts.{field}");
        only(
            &with_top(&format!("timeouts: {{ {field}: 0s }}\n")),
            &path,
            "must be greater than 0",
        );
        only(
            &with_top(&format!("timeouts: {{ {field}: 10 }}\n")),
            &path,
            "needs a unit",
        );
        only(
            &with_top(&format!("timeouts: {{ {field}: soon }}\n")),
            &path,
            "\"soon\"",
        );
        only(
            &with_top(&format!("timeouts: {{ {field}: 3 weeks }}\n")),
            &path,
            "unknown unit",
        );
    }
}

#[test]
fn limits() {
    let c = ok(&with_top("limits: { max_header_bytes: 1KiB, max_headers: 1, max_uri_bytes: 256, max_body_bytes: 1, max_connections: 1 }\n"));
    assert_eq!(
        c.limits,
        Limits {
            max_header_bytes: 1024,
            max_headers: 1,
            max_uri_bytes: 256,
            max_body_bytes: 1,
            max_connections: Some(1),
            max_connections_per_client: None,
        }
    );
    let c = ok(&with_top("limits: { max_header_bytes: 1MiB, max_headers: 10000, max_uri_bytes: 1MiB, max_body_bytes: 1GiB, max_connections: 10000000, max_connections_per_client: 8 }\n"));
    assert_eq!(
        c.limits,
        Limits {
            max_header_bytes: 1 << 20,
            max_headers: 10_000,
            max_uri_bytes: 1 << 20,
            max_body_bytes: 1 << 30,
            max_connections: Some(10_000_000),
            max_connections_per_client: Some(8),
        }
    );
    let c = ok(&with_top("limits: { max_body_bytes: 64KB }\n"));
    assert_eq!(
        c.limits,
        Limits {
            max_body_bytes: 64_000,
            ..Limits::default()
        }
    );

    let bad = [
        ("max_header_bytes", "1023", "expected 1KiB to 1MiB"),
        ("max_header_bytes", "1048577", "out of range"),
        ("max_header_bytes", "16 KiBs", "unknown unit"),
        ("max_header_bytes", "-1", "must start with a number"),
        ("max_headers", "0", "expected an integer from 1 to 10000"),
        ("max_headers", "10001", "out of range"),
        ("max_headers", "1KiB", "not an integer"),
        ("max_uri_bytes", "255", "expected 256 to 1MiB"),
        ("max_uri_bytes", "2MiB", "out of range"),
        ("max_body_bytes", "0", "expected at least 1"),
        ("max_body_bytes", "99999999999GiB", "too large"),
        (
            "max_connections",
            "0",
            "expected an integer from 1 to 10000000",
        ),
        ("max_connections", "10000001", "out of range"),
        ("max_connections", "lots", "not an integer"),
        (
            "max_connections_per_client",
            "0",
            "expected an integer from 1 to 1000000",
        ),
    ];
    for (field, value, needle) in bad {
        only(
            &with_top(&format!("limits: {{ {field}: \"{value}\" }}\n")),
            &format!("limits.{field}"),
            needle,
        );
    }
}
