//! Validation of `rate_limits[]` and of the routes' references to them
//! (`routes[].rate_limit`). Same contract as the parent module: every
//! error with its path, no I/O, no panic.

use std::collections::HashMap;
use std::time::Duration;

use super::values::{closest, int_in, parse_header_name};
use super::Validator;
use crate::config::raw::{RawLimitKey, RawRateLimit, RawRoute, Text};
use crate::config::{LimitKey, LimitMode, LimitScope, Rate, RateLimitConfig, RouteConfig};

/// Tokens per window and burst at most: keeps the bucket arithmetic
/// (nanoseconds in a `u64`) exact.
const MAX_TOKENS: i64 = 1_000_000;

impl Validator {
    pub(super) fn rate_limits(&mut self, raw: &[RawRateLimit]) -> Vec<RateLimitConfig> {
        let mut names: HashMap<&str, usize> = HashMap::new();
        let mut out = Vec::with_capacity(raw.len());
        for (i, r) in raw.iter().enumerate() {
            let p = format!("rate_limits[{i}]");
            if let Err(m) = check_policy_name(&r.name) {
                self.err(format!("{p}.name"), m);
            } else if let Some(first) = names.get(r.name.as_str()) {
                self.err(
                    format!("{p}.name"),
                    format!(
                        "duplicate rate limit name {:?} (also rate_limits[{first}])",
                        r.name
                    ),
                );
            } else {
                names.insert(&r.name, i);
            }
            out.push(self.rate_limit(&p, r));
        }
        out
    }

    /// `scope: fleet` shares the rate through the Redis store: refused
    /// without one.
    pub(super) fn fleet_rate_limits(&mut self, policies: &[RateLimitConfig], redis: bool) {
        for (i, p) in policies.iter().enumerate() {
            if p.scope == LimitScope::Fleet && !redis {
                self.err(
                    format!("rate_limits[{i}].scope"),
                    "scope: fleet shares the rate through Redis: it needs store.kind: redis",
                );
            }
        }
    }

    fn rate_limit(&mut self, p: &str, r: &RawRateLimit) -> RateLimitConfig {
        let key = self.limit_key(&format!("{p}.key"), &r.key);
        let scope = match r.scope.as_deref() {
            None | Some("local") => LimitScope::Local,
            Some("fleet") => {
                if r.rate.is_none() {
                    self.err(
                        format!("{p}.scope"),
                        "scope: fleet shares a rate: set rate (max_in_flight alone is per replica)",
                    );
                }
                LimitScope::Fleet
            }
            Some(s) => {
                self.err(
                    format!("{p}.scope"),
                    format!("unknown scope {s:?}: expected local or fleet"),
                );
                LimitScope::Local
            }
        };
        let mode = match r.mode.as_deref() {
            None | Some("enforce") => LimitMode::Enforce,
            Some("log") => LimitMode::Log,
            Some(m) => {
                self.err(
                    format!("{p}.mode"),
                    format!("unknown mode {m:?}: expected enforce or log"),
                );
                LimitMode::Enforce
            }
        };
        let max_in_flight = r.max_in_flight.as_ref().and_then(|t| {
            self.check(format!("{p}.max_in_flight"), int_in(t, 1, MAX_TOKENS))
                .map(|n| n as u32)
        });
        let rate = self.rate(p, r);
        if r.rate.is_none() && r.max_in_flight.is_none() {
            self.err(
                format!("{p}.rate"),
                "required: a policy needs a rate (like 100/s), a max_in_flight, or both",
            );
        }
        RateLimitConfig {
            name: r.name.clone(),
            key,
            rate,
            mode,
            scope,
            max_in_flight,
        }
    }

    /// `rate` and `burst` (burst defaults to the rate's `N`).
    fn rate(&mut self, p: &str, r: &RawRateLimit) -> Option<Rate> {
        let Some(text) = &r.rate else {
            if r.burst.is_some() {
                self.err(format!("{p}.burst"), "burst needs a rate (like 100/s)");
            }
            return None;
        };
        let rate = self.check(format!("{p}.rate"), parse_rate(text));
        let burst = r
            .burst
            .as_ref()
            .and_then(|b| self.check(format!("{p}.burst"), burst_of(b)));
        let (tokens, per) = rate?;
        Some(Rate {
            tokens,
            per,
            burst: burst.unwrap_or(tokens),
        })
    }

    fn limit_key(&mut self, p: &str, raw: &[RawLimitKey]) -> Vec<LimitKey> {
        if raw.is_empty() {
            self.err(
                p,
                "a key needs at least one part: client_ip, session, route, { header: NAME } \
                 or { cookie: NAME }",
            );
        }
        let mut out: Vec<LimitKey> = Vec::with_capacity(raw.len());
        for (j, k) in raw.iter().enumerate() {
            let kp = format!("{p}[{j}]");
            let Some(part) = self.check(kp.clone(), key_part(k)) else {
                continue;
            };
            if out.contains(&part) {
                self.err(kp, "this key part is already in the key");
            } else {
                out.push(part);
            }
        }
        out
    }

    /// `routes[].rate_limit`: each names a policy of `rate_limits`.
    pub(super) fn route_rate_limits(
        &mut self,
        raw: &[RawRoute],
        policies: &[RateLimitConfig],
        routes: &mut [RouteConfig],
    ) {
        for (i, (r, out)) in raw.iter().zip(routes.iter_mut()).enumerate() {
            let Some(name) = &r.rate_limit else { continue };
            match policies.iter().position(|p| p.name == *name) {
                Some(idx) => out.rate_limit = Some(idx),
                None => {
                    let mut m = format!("unknown rate limit {name:?}");
                    if let Some(near) = closest(name, policies.iter().map(|p| p.name.as_str())) {
                        m.push_str(&format!(" (did you mean {near:?}?)"));
                    } else if policies.is_empty() {
                        m.push_str(": define it under rate_limits");
                    }
                    self.err(format!("routes[{i}].rate_limit"), m);
                }
            }
        }
    }
}

/// A policy's name: 1 to 64 of `A-Z a-z 0-9 . _ -` (it is quoted in
/// response headers and used as a metric label).
fn check_policy_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("a rate limit needs a name".to_owned());
    }
    if name.len() > 64
        || !name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
    {
        return Err(format!(
            "invalid name {name:?}: use 1 to 64 letters, digits, '.', '_' or '-'"
        ));
    }
    Ok(())
}

/// `N/s`, `N/m` or `N/h`, `N` from 1 to a million.
pub(super) fn parse_rate(t: &Text) -> Result<(u32, Duration), String> {
    let s = t.0.trim();
    let bad = || format!("invalid rate {s:?}: expected N/s, N/m or N/h (like 100/s)");
    let (n, unit) = s.split_once('/').ok_or_else(bad)?;
    let per = match unit.trim() {
        "s" => Duration::from_secs(1),
        "m" => Duration::from_secs(60),
        "h" => Duration::from_secs(3600),
        _ => return Err(bad()),
    };
    let n = n.trim();
    if n.is_empty() || !n.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    match n.parse::<i64>() {
        Ok(n) if (1..=MAX_TOKENS).contains(&n) => Ok((n as u32, per)),
        _ => Err(format!(
            "rate {s:?} is out of range: N must be from 1 to {MAX_TOKENS}"
        )),
    }
}

fn burst_of(t: &Text) -> Result<u32, String> {
    if t.0.trim() == "0" {
        return Err(
            "burst 0 would refuse every request: expected at least 1 (to refuse a route, use \
             a rule without a service or access.deny_cidrs)"
                .to_owned(),
        );
    }
    int_in(t, 1, MAX_TOKENS).map(|n| n as u32)
}

fn key_part(k: &RawLimitKey) -> Result<LimitKey, String> {
    const KINDS: &str = "client_ip, session, route, { header: NAME } or { cookie: NAME }";
    match k {
        RawLimitKey::Name(n) => match n.as_str() {
            "client_ip" => Ok(LimitKey::ClientIp),
            "session" => Ok(LimitKey::Session),
            "route" => Ok(LimitKey::Route),
            "header" | "cookie" => Err(format!("{n} needs a name: write {{ {n}: NAME }}")),
            other => Err(format!("unknown key kind {other:?}: expected {KINDS}")),
        },
        RawLimitKey::Map(m) => {
            let mut it = m.iter();
            let (Some((kind, name)), None) = (it.next(), it.next()) else {
                return Err(format!("a key part has exactly one kind: expected {KINDS}"));
            };
            match kind.as_str() {
                "header" => parse_header_name(name).map(LimitKey::Header),
                "cookie" if name.is_empty() => Err("cookie name must not be empty".to_owned()),
                "cookie" => Ok(LimitKey::Cookie(name.clone())),
                other => Err(format!("unknown key kind {other:?}: expected {KINDS}")),
            }
        }
    }
}

#[cfg(test)]
mod tests;
