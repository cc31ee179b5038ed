//! Maintenance notifications: what a backend (or an operator) announces
//! about a node ahead of planned work, and how announcements are written.
//!
//! Owns [`Notification`], its kinds, and the parser of the backend header
//! `Hop-Maintenance: <KIND> seq=<n> [to=<host:port>] [in=<secs>]`. Parsing
//! is all-or-nothing: a malformed notification is rejected whole, never
//! applied half-way. Must not touch: pools, timers, node state (the control
//! plane applies notifications).

use std::fmt;
use std::net::SocketAddr;

/// The kind of a maintenance notification.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Kind {
    /// Work is starting: relax timeouts, suspend passive ejection.
    Migrating,
    /// The node moves to a new address (`to`) within `in` seconds.
    Moving,
    /// Work finished: normal timeouts again.
    Migrated,
    /// A failover is starting: relax timeouts.
    FailingOver,
    /// The failover finished: normal timeouts again.
    FailedOver,
}

impl Kind {
    pub const ALL: [Kind; 5] = [
        Kind::Migrating,
        Kind::Moving,
        Kind::Migrated,
        Kind::FailingOver,
        Kind::FailedOver,
    ];

    pub fn parse(s: &str) -> Option<Kind> {
        Some(match s {
            "MIGRATING" => Kind::Migrating,
            "MOVING" => Kind::Moving,
            "MIGRATED" => Kind::Migrated,
            "FAILING_OVER" => Kind::FailingOver,
            "FAILED_OVER" => Kind::FailedOver,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Migrating => "MIGRATING",
            Kind::Moving => "MOVING",
            Kind::Migrated => "MIGRATED",
            Kind::FailingOver => "FAILING_OVER",
            Kind::FailedOver => "FAILED_OVER",
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One announcement about one node.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Notification {
    pub service: String,
    pub node: String,
    pub kind: Kind,
    /// Per-node sequence number; a notification with a sequence number not
    /// above the last one seen for its node is a duplicate.
    pub seq: u64,
    /// MOVING: the node's new address.
    pub to: Option<SocketAddr>,
    /// MOVING: seconds until the old address goes away.
    pub in_secs: Option<u64>,
}

/// Parses the value of a `Hop-Maintenance` header sent by node `node` of
/// `service`.
pub fn parse_header(service: &str, node: &str, value: &str) -> Result<Notification, String> {
    let mut parts = value.split_ascii_whitespace();
    let kind_text = parts.next().ok_or("empty Hop-Maintenance header")?;
    let kind = Kind::parse(kind_text).ok_or_else(|| {
        format!(
            "unknown kind {kind_text:?} (MIGRATING, MOVING, MIGRATED, FAILING_OVER, FAILED_OVER)"
        )
    })?;
    let (mut seq, mut to, mut in_secs) = (None, None, None);
    for p in parts {
        let (k, v) = p
            .split_once('=')
            .ok_or_else(|| format!("expected key=value, got {p:?}"))?;
        match k {
            "seq" if seq.is_none() => {
                seq = Some(
                    v.parse::<u64>()
                        .map_err(|_| format!("seq {v:?} is not a number"))?,
                )
            }
            "to" if to.is_none() => to = Some(parse_endpoint(v)?),
            "in" if in_secs.is_none() => {
                in_secs = Some(
                    v.parse::<u64>()
                        .map_err(|_| format!("in {v:?} is not a number of seconds"))?,
                )
            }
            _ => return Err(format!("unexpected or repeated field {k:?}")),
        }
    }
    let n = Notification {
        service: service.to_owned(),
        node: node.to_owned(),
        kind,
        seq: seq.ok_or("seq=<n> is required")?,
        to,
        in_secs,
    };
    check(&n)?;
    Ok(n)
}

/// `host:port` with an IP host (or `localhost`).
pub fn parse_endpoint(v: &str) -> Result<SocketAddr, String> {
    if let Some(port) = v.strip_prefix("localhost:") {
        let port: u16 = port.parse().map_err(|_| format!("bad port in {v:?}"))?;
        return Ok(SocketAddr::from(([127, 0, 0, 1], port)));
    }
    v.parse()
        .map_err(|_| format!("to {v:?} is not an ip:port address"))
}

/// Rules every notification must satisfy, whatever its source.
pub fn check(n: &Notification) -> Result<(), String> {
    if n.service.is_empty() || n.node.is_empty() {
        return Err("service and node are required".into());
    }
    if n.seq == 0 {
        return Err("seq must be at least 1".into());
    }
    if n.kind != Kind::Moving && (n.to.is_some() || n.in_secs.is_some()) {
        return Err(format!("to= and in= only go with MOVING, not {}", n.kind));
    }
    if n.kind == Kind::Moving && n.in_secs.is_none() {
        return Err("MOVING needs in=<seconds>".into());
    }
    if n.in_secs.is_some_and(|s| s > 86_400) {
        return Err("in= is at most 86400 seconds".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_kind() {
        let n = parse_header("s", "n", "MOVING seq=7 to=127.0.0.1:9000 in=30").unwrap();
        assert_eq!(n.kind, Kind::Moving);
        assert_eq!(n.seq, 7);
        assert_eq!(n.to, Some("127.0.0.1:9000".parse().unwrap()));
        assert_eq!(n.in_secs, Some(30));
        let n = parse_header("s", "n", "MOVING seq=8 in=10").unwrap();
        assert_eq!(n.to, None);
        for k in ["MIGRATING", "MIGRATED", "FAILING_OVER", "FAILED_OVER"] {
            assert_eq!(
                parse_header("s", "n", &format!("{k} seq=1"))
                    .unwrap()
                    .kind
                    .as_str(),
                k
            );
        }
        assert_eq!(
            parse_header("s", "n", "MOVING seq=1 to=localhost:81 in=1")
                .unwrap()
                .to,
            Some("127.0.0.1:81".parse().unwrap())
        );
    }

    #[test]
    fn rejects_malformed_whole() {
        for bad in [
            "",
            "REBOOTING seq=1",
            "MIGRATING",
            "MIGRATING seq=x",
            "MIGRATING seq=0",
            "MIGRATING seq=1 seq=2",
            "MIGRATING seq=1 to=1.2.3.4:5",
            "MOVING seq=1 to=1.2.3.4:5",
            "MOVING seq=1 to=nowhere in=5",
            "MOVING seq=1 in=99999999",
            "MIGRATING seq=1 color=blue",
            "MIGRATING seq=1 junk",
        ] {
            assert!(
                parse_header("s", "n", bad).is_err(),
                "{bad:?} must be rejected"
            );
        }
    }
}
