//! The `proxy_protocol` blocks of listeners and services: accepted
//! versions, trusted sources, the header deadline, and the version a
//! service sends. Same contract as the parent module: every error with
//! its path, no silent default for a present value, no panic.

use std::time::Duration;

use super::values::unknown_choice;
use super::Validator;
use crate::config::raw::RawListenerProxyProtocol;
use crate::config::{
    ListenerProxyProtocol, ProxyProtocolVersion, UpstreamProtocol, DEFAULT_PROXY_PROTOCOL_TIMEOUT,
};
use crate::units;

const MIN_TIMEOUT: Duration = Duration::from_millis(10);
const MAX_TIMEOUT: Duration = Duration::from_secs(60);
const SEND_NAMES: [&str; 2] = ["v1", "v2"];

impl Validator {
    /// `listeners[i].proxy_protocol` (`p` is its path).
    pub(super) fn listener_proxy_protocol(
        &mut self,
        p: &str,
        raw: &RawListenerProxyProtocol,
    ) -> ListenerProxyProtocol {
        let (mut v1, mut v2) = (raw.versions.is_none(), raw.versions.is_none());
        if let Some(versions) = &raw.versions {
            if versions.is_empty() {
                self.err(
                    format!("{p}.versions"),
                    "at least one version is required: [1], [2] or [1, 2] (leave the field out for both)",
                );
            }
            for (i, t) in versions.iter().enumerate() {
                let slot = match t.0.trim() {
                    "1" => &mut v1,
                    "2" => &mut v2,
                    other => {
                        self.err(
                            format!("{p}.versions[{i}]"),
                            format!("unknown PROXY protocol version {other:?}: expected 1 or 2"),
                        );
                        continue;
                    }
                };
                if *slot {
                    self.err(
                        format!("{p}.versions[{i}]"),
                        format!("version {} is listed twice", t.0.trim()),
                    );
                }
                *slot = true;
            }
        }
        if raw.trusted_cidrs.is_empty() {
            self.err(
                format!("{p}.trusted_cidrs"),
                "at least one CIDR is required: only these sources (your L4 balancers) may \
                 connect while proxy_protocol is on, like [10.0.0.0/8]",
            );
        }
        let trusted_cidrs = self.cidrs(&format!("{p}.trusted_cidrs"), &raw.trusted_cidrs);
        let timeout = match &raw.timeout {
            None => DEFAULT_PROXY_PROTOCOL_TIMEOUT,
            Some(t) => {
                let r = units::parse_duration(&t.0).and_then(|d| {
                    if (MIN_TIMEOUT..=MAX_TIMEOUT).contains(&d) {
                        Ok(d)
                    } else {
                        Err(format!(
                            "duration {:?} is out of range: expected 10ms to 60s",
                            t.0
                        ))
                    }
                });
                self.check(format!("{p}.timeout"), r)
                    .unwrap_or(DEFAULT_PROXY_PROTOCOL_TIMEOUT)
            }
        };
        ListenerProxyProtocol {
            v1,
            v2,
            trusted_cidrs,
            timeout,
        }
    }

    /// `services[i].proxy_protocol` (`p` is the service's path).
    pub(super) fn service_proxy_protocol(
        &mut self,
        p: &str,
        raw: Option<&str>,
        protocol: UpstreamProtocol,
    ) -> Option<ProxyProtocolVersion> {
        let version = match raw? {
            "v1" => ProxyProtocolVersion::V1,
            "v2" => ProxyProtocolVersion::V2,
            other => {
                self.err(
                    format!("{p}.proxy_protocol"),
                    unknown_choice("PROXY protocol version", other, &SEND_NAMES),
                );
                return None;
            }
        };
        if protocol == UpstreamProtocol::Http2 {
            // One HTTP/2 connection carries every client's requests; a
            // header per connection could name only one of them.
            self.err(
                format!("{p}.proxy_protocol"),
                "not available with protocol: http2 (one HTTP/2 connection multiplexes many \
                 clients, and a PROXY header names one); use protocol: http1",
            );
            return None;
        }
        Some(version)
    }
}

#[cfg(test)]
mod tests;
