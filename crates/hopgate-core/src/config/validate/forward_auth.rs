//! `routes[].auth.forward` and `routes[].auth.jwt.jwks`: the auth blocks
//! that name a hopgate service (the authorization service, the key set's
//! server). Every error under its field path: a service that is not
//! defined, a path that does not start with `/`, headers that cannot be
//! copied, a cache without a key or with a TTL out of bounds, an unknown
//! failure mode.
//!
//! Must not touch: I/O (the service is asked by the data plane,
//! `hopgate_proxy::auth`).

use std::time::Duration;

use http::HeaderName;

use super::auth::{Services, RESERVED};
use super::values::{closest, int_in, is_tchar, parse_header_name, unknown_choice};
use super::Validator;
use crate::config::auth::{
    AuthKind, CacheKey, DecisionCache, FailureMode, ForwardAuth, JwksService, RouteAuth,
    DEFAULT_CACHE_ENTRIES, DEFAULT_FORWARD_TIMEOUT, DEFAULT_JWKS_REFRESH,
};
use crate::config::raw::{RawAuthCache, RawForwardAuth, RawJwksService, Text};

/// The longest a decision may be remembered.
const MAX_TTL: Duration = Duration::from_secs(3600);
/// The longest a check may take.
const MAX_TIMEOUT: Duration = Duration::from_secs(60);
/// The bounds of `jwks.refresh`.
const MIN_REFRESH: Duration = Duration::from_secs(10);
const MAX_REFRESH: Duration = Duration::from_secs(86_400);
/// The most decisions a route may remember.
const MAX_ENTRIES: i64 = 1_000_000;

/// Headers the check never carries: hop-by-hop ones, and the ones that
/// frame the check itself or describe the request (the gateway sets
/// `X-Forwarded-*`).
const NOT_SENT: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "host",
    "content-length",
    "x-forwarded-for",
    "x-forwarded-host",
    "x-forwarded-proto",
    "x-forwarded-method",
    "x-forwarded-uri",
];

impl Validator {
    pub(super) fn forward_auth(
        &mut self,
        p: &str,
        id: &str,
        raw: &RawForwardAuth,
        services: &Services<'_>,
    ) -> RouteAuth {
        self.service_ref(&format!("{p}.service"), &raw.service, services);
        self.subrequest_path(&format!("{p}.path"), &raw.path);
        let copy_request_headers = self.header_list(
            &format!("{p}.copy_request_headers"),
            &raw.copy_request_headers,
            NOT_SENT,
        );
        let copy_response_headers = self.header_list(
            &format!("{p}.copy_response_headers"),
            &raw.copy_response_headers,
            RESERVED,
        );
        let failure_mode = match raw.failure_mode.as_deref() {
            None | Some("deny") => FailureMode::Deny,
            Some("allow") => FailureMode::Allow,
            Some(other) => {
                self.err(
                    format!("{p}.failure_mode"),
                    unknown_choice("failure mode", other, &["deny", "allow"]),
                );
                FailureMode::Deny
            }
        };
        let timeout = raw.timeout.as_ref().map_or(DEFAULT_FORWARD_TIMEOUT, |t| {
            self.check(
                format!("{p}.timeout"),
                bounded(t, Duration::ZERO, MAX_TIMEOUT, "60s"),
            )
            .unwrap_or(DEFAULT_FORWARD_TIMEOUT)
        });
        for (i, n) in raw.copy_response_headers.iter().enumerate() {
            let Ok(h) = parse_header_name(n) else {
                continue;
            };
            if copy_request_headers.contains(&h) {
                self.err(
                    format!("{p}.copy_response_headers[{i}]"),
                    format!("{h} is also in copy_request_headers: the client's copy is removed before the check, so the service would never see it"),
                );
            }
        }
        let cache = raw
            .cache
            .as_ref()
            .and_then(|c| self.decision_cache(&format!("{p}.cache"), c));
        RouteAuth {
            // Client-sent copies of the identity headers never pass.
            strip: copy_response_headers.clone(),
            kind: AuthKind::Forward(ForwardAuth {
                service: raw.service.clone(),
                path: raw.path.clone(),
                copy_request_headers,
                copy_response_headers,
                cache,
                failure_mode,
                timeout,
            }),
            realm: id.to_owned(),
            remove_authorization: false,
        }
    }

    pub(super) fn jwks_service(
        &mut self,
        p: &str,
        raw: &RawJwksService,
        services: &Services<'_>,
    ) -> JwksService {
        self.service_ref(&format!("{p}.service"), &raw.service, services);
        self.subrequest_path(&format!("{p}.path"), &raw.path);
        let refresh = raw.refresh.as_ref().map_or(DEFAULT_JWKS_REFRESH, |t| {
            self.check(
                format!("{p}.refresh"),
                bounded(t, MIN_REFRESH, MAX_REFRESH, "24h"),
            )
            .unwrap_or(DEFAULT_JWKS_REFRESH)
        });
        JwksService {
            service: raw.service.clone(),
            path: raw.path.clone(),
            refresh,
        }
    }

    /// `service` must name a service of the config.
    fn service_ref(&mut self, p: &str, service: &str, services: &Services<'_>) {
        if service.is_empty() {
            self.err(
                p,
                "required: the name of the service to ask (from services)",
            );
        } else if !services.contains_key(service) {
            let mut m = format!("unknown service {service:?}");
            if let Some(near) = closest(service, services.keys().copied()) {
                m.push_str(&format!(" (did you mean {near:?}?)"));
            }
            self.err(p, m);
        }
    }

    /// A path and query the gateway asks for: starts with `/`.
    fn subrequest_path(&mut self, p: &str, path: &str) {
        if path.is_empty() {
            self.err(p, "required: the path to ask for, starting with '/'");
        } else if !path.starts_with('/') {
            self.err(p, format!("{path:?} must start with '/'"));
        } else if path.parse::<http::uri::PathAndQuery>().is_err() || path.contains('#') {
            self.err(p, format!("{path:?} is not a valid path"));
        }
    }

    /// Header names, none of `refused`, none twice.
    fn header_list(&mut self, p: &str, names: &[String], refused: &[&str]) -> Vec<HeaderName> {
        let mut out: Vec<HeaderName> = Vec::with_capacity(names.len());
        for (i, n) in names.iter().enumerate() {
            let Some(h) = self.check(format!("{p}[{i}]"), parse_header_name(n)) else {
                continue;
            };
            if refused.contains(&h.as_str()) {
                self.err(
                    format!("{p}[{i}]"),
                    format!("{n:?} cannot be copied: it is hop-by-hop, frames the message or is set by the gateway"),
                );
            } else if out.contains(&h) {
                self.err(format!("{p}[{i}]"), format!("{n:?} is listed twice"));
            } else {
                out.push(h);
            }
        }
        out
    }

    fn decision_cache(&mut self, p: &str, raw: &RawAuthCache) -> Option<DecisionCache> {
        let key = match (&raw.key.header, &raw.key.cookie) {
            (Some(_), Some(_)) => {
                self.err(format!("{p}.key"), "set one of header and cookie, not both");
                None
            }
            (Some(h), None) => self
                .check(format!("{p}.key.header"), parse_header_name(h))
                .map(CacheKey::Header),
            (None, Some(c)) if !c.is_empty() && c.bytes().all(is_tchar) => {
                Some(CacheKey::Cookie(c.clone()))
            }
            (None, Some(c)) => {
                self.err(
                    format!("{p}.key.cookie"),
                    format!("{c:?} is not a cookie name"),
                );
                None
            }
            (None, None) => {
                self.err(
                    format!("{p}.key"),
                    "required: what a decision is remembered by, { header: Authorization } or { cookie: NAME }",
                );
                None
            }
        };
        let ttl = match &raw.ttl {
            None => {
                self.err(
                    format!("{p}.ttl"),
                    "required: how long a decision is remembered (up to 1h)",
                );
                None
            }
            Some(t) => self.check(
                format!("{p}.ttl"),
                bounded(t, Duration::ZERO, MAX_TTL, "1h"),
            ),
        };
        let max_entries = match &raw.max_entries {
            None => Some(DEFAULT_CACHE_ENTRIES),
            Some(t) => self
                .check(format!("{p}.max_entries"), int_in(t, 1, MAX_ENTRIES))
                .map(|n| usize::try_from(n).unwrap_or(DEFAULT_CACHE_ENTRIES)),
        };
        Some(DecisionCache {
            key: key?,
            ttl: ttl?,
            max_entries: max_entries?,
        })
    }
}

/// A duration above `min` (at least `min` when `min` is not zero) and at
/// most `max` (spelled `hi`).
fn bounded(t: &Text, min: Duration, max: Duration, hi: &str) -> Result<Duration, String> {
    let d = crate::units::parse_duration(&t.0)?;
    if d.is_zero() {
        return Err(format!("duration {:?} must be greater than 0", t.0));
    }
    if d < min {
        return Err(format!("{:?} is too short: at least {min:?}", t.0));
    }
    if d > max {
        return Err(format!("{:?} is too long: at most {hi}", t.0));
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds() {
        let t = |s: &str| Text(s.into());
        assert!(bounded(&t("10s"), Duration::ZERO, MAX_TTL, "1h").is_ok());
        assert!(bounded(&t("0s"), Duration::ZERO, MAX_TTL, "1h").is_err());
        assert!(bounded(&t("2h"), Duration::ZERO, MAX_TTL, "1h").is_err());
        assert!(bounded(&t("1s"), MIN_REFRESH, MAX_REFRESH, "24h").is_err());
        assert!(bounded(&t("abc"), Duration::ZERO, MAX_TTL, "1h").is_err());
    }
}
