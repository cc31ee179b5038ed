//! Validation of a `mirror` filter (`routes[i].filters[j].mirror`): the
//! service it names (known; speaking HTTP/2 when the route's service does,
//! so a gRPC call's copy is not sent over HTTP/1.1), its `percent` (0 to
//! 100, fractions allowed) and `max_in_flight`, one mirror per route, and
//! none on a route that answers itself. Same contract as the parent: every
//! error with its path, no I/O, no panic.

use super::super::values::{closest, int_in};
use super::super::Validator;
use super::Services;
use crate::config::raw::{RawMirror, RawRoute, Text};
use crate::filter::{Mirror, RouteFilters};

/// `max_in_flight` when unset.
const DEFAULT_MAX_IN_FLIGHT: u32 = 64;

impl Validator {
    /// `m` at `p` (`routes[i].filters[j].mirror`) into `out.mirror`.
    pub(super) fn mirror(
        &mut self,
        p: &str,
        m: Option<&RawMirror>,
        r: &RawRoute,
        (raw, by_name): Services<'_>,
        out: &mut RouteFilters,
    ) {
        let Some(m) = m else {
            return;
        };
        let before = self.errors.len();
        if out.mirror.is_some() {
            self.err(
                p,
                "one mirror per route: remove this one or the earlier one",
            );
        }
        if r.filters
            .iter()
            .any(|f| f.redirect.is_some() || f.direct_response.is_some())
        {
            self.err(
                p,
                "this route answers itself (redirect or direct_response): nothing goes \
                 upstream to copy",
            );
        }
        let service = self.mirror_service(&format!("{p}.service"), &m.service, r, raw, by_name);
        let per_million = match &m.percent {
            None => Mirror::ALL,
            Some(t) => self
                .check(format!("{p}.percent"), per_million(t))
                .unwrap_or_default(),
        };
        let max_in_flight = match &m.max_in_flight {
            None => DEFAULT_MAX_IN_FLIGHT,
            Some(t) => self
                .check(format!("{p}.max_in_flight"), int_in(t, 1, 65_536))
                .and_then(|n| u32::try_from(n).ok())
                .unwrap_or(DEFAULT_MAX_IN_FLIGHT),
        };
        if let (Some(service), true) = (service, self.errors.len() == before) {
            out.mirror = Some(Mirror {
                service,
                per_million,
                max_in_flight,
            });
        }
    }

    /// The index of the service a mirror names.
    fn mirror_service(
        &mut self,
        p: &str,
        name: &str,
        r: &RawRoute,
        raw: &[crate::config::raw::RawService],
        by_name: &std::collections::HashMap<&str, usize>,
    ) -> Option<usize> {
        if name.is_empty() {
            self.err(p, "required: name the service the copies go to");
            return None;
        }
        let Some(&idx) = by_name.get(name) else {
            let mut m = format!("unknown service {name:?}");
            if let Some(near) = closest(name, by_name.keys().copied()) {
                m.push_str(&format!(" (did you mean {near:?}?)"));
            }
            self.err(p, m);
            return None;
        };
        let http2 = |i: usize| raw.get(i).and_then(|s| s.protocol.as_deref()) == Some("http2");
        let route_http2 = by_name.get(r.service.as_str()).is_some_and(|&i| http2(i));
        if route_http2 && !http2(idx) {
            self.err(
                p,
                format!(
                    "{name:?} speaks HTTP/1.1 but the route's service {:?} speaks HTTP/2 \
                     (gRPC): a copy must go over HTTP/2 too (set protocol: http2 on {name:?})",
                    r.service
                ),
            );
            return None;
        }
        Some(idx)
    }
}

/// `percent`: a number from 0 to 100 (fractions allowed), in millionths
/// of all requests.
fn per_million(t: &Text) -> Result<u32, String> {
    let s = t.0.trim().trim_end_matches('%');
    let bad = || {
        format!(
            "{:?} is not a share: expected a number from 0 to 100 (fractions allowed, like 0.5)",
            t.0
        )
    };
    let n: f64 = s.parse().map_err(|_| bad())?;
    if !n.is_finite() {
        return Err(bad());
    }
    if !(0.0..=100.0).contains(&n) {
        return Err(format!(
            "{:?} is out of range: expected a number from 0 to 100",
            t.0
        ));
    }
    let per = (n * 10_000.0).round();
    if n > 0.0 && per < 1.0 {
        return Err(format!(
            "{:?} is below the smallest share, 0.0001 (one request in a million)",
            t.0
        ));
    }
    Ok(per as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percent_becomes_millionths() {
        let ok = |s: &str| per_million(&Text(s.into()));
        assert_eq!(ok("0"), Ok(0));
        assert_eq!(ok("100"), Ok(Mirror::ALL));
        assert_eq!(ok("10"), Ok(100_000));
        assert_eq!(ok("0.5"), Ok(5_000));
        assert_eq!(ok("0.0001"), Ok(1));
        assert!(ok("0.00001").unwrap_err().contains("smallest share"));
        assert!(ok("101").unwrap_err().contains("out of range"));
        assert!(ok("-1").unwrap_err().contains("out of range"));
        assert!(ok("NaN").unwrap_err().contains("not a share"));
        assert!(ok("ten").unwrap_err().contains("not a share"));
    }

    #[test]
    fn every_roll_is_sampled_at_100_and_none_at_0() {
        let m = |per_million| Mirror {
            service: 0,
            per_million,
            max_in_flight: 1,
        };
        for roll in [0, 1, Mirror::ALL / 2, Mirror::ALL - 1] {
            assert!(m(Mirror::ALL).samples(roll));
            assert!(!m(0).samples(roll));
        }
        assert!(m(1).samples(0) && !m(1).samples(1));
    }
}
