//! `auth.forward`: each request asked of an authorization service first
//! (NGINX's `auth_request`, Traefik's `forwardAuth`, Envoy's HTTP
//! `ext_authz`).
//!
//! The check is a `GET` of the configured path on the service, through
//! the service's nodes like any request ([`crate::subrequest`]), carrying
//! the request it is about in `X-Forwarded-Method`, `X-Forwarded-Uri`
//! (path and query as the client sent them), `X-Forwarded-Host`,
//! `X-Forwarded-Proto` and `X-Forwarded-For` (the client's address), and
//! the client's copies of `copy_request_headers`. Its answer decides:
//!
//! - 2xx: the request goes on, with the answer's `copy_response_headers`
//!   set on it (the client's own copies of those are removed first,
//!   whatever the outcome);
//! - any other status below 500: the answer (status, headers, body) goes
//!   back to the client as the service gave it (a `401` with its
//!   `WWW-Authenticate`, a `302` to a login page with its `Location`);
//! - no answer (no node reachable, the timeout, a 5xx from every node
//!   tried): `failure_mode`: `deny` answers `503` (result `error`),
//!   `allow` lets the request through without identity headers (result
//!   `failed_open`).
//!
//! Decisions (allowed and denied, never failures) are remembered when
//! `cache` is set, by the value of its header or cookie, for its `ttl`, at
//! most `max_entries` per route (the map is emptied when full). A request
//! without the key is always asked. The cache lives as long as the
//! route's `forward` block stays the same.
//!
//! Owns [`Decisions`] and [`check`]. Must not touch: the access log (the
//! credentials sent along never reach it), the service's nodes (only
//! through `subrequest`).

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use http::header::{HeaderName, HeaderValue, CONTENT_LENGTH, TRANSFER_ENCODING};
use http::{HeaderMap, Method, Request, Response, StatusCode};

use hopgate_core::config::auth::{CacheKey, FailureMode, ForwardAuth};

use super::{AuthResult, AuthWait, Checked, Counts, Grant};
use crate::body::ProxyBody;
use crate::subrequest::{self, Ask, Asked};
use crate::upstream::SharedSnapshot;

/// The largest answer body read from the service (a login page, say);
/// a larger one is a failure.
pub(crate) const MAX_ANSWER: usize = 64 * 1024;

/// Headers of a denying answer that are not passed on: they frame the
/// service's message, not the client's.
const NOT_PASSED: [HeaderName; 7] = [
    http::header::CONNECTION,
    CONTENT_LENGTH,
    TRANSFER_ENCODING,
    http::header::TE,
    http::header::UPGRADE,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
];

/// A route's remembered decisions, for the `forward` block they were
/// made under.
pub(crate) struct Decisions {
    pub(super) made_for: ForwardAuth,
    map: papaya::HashMap<Box<[u8]>, Decision>,
}

impl Decisions {
    pub(crate) fn new(made_for: ForwardAuth) -> Decisions {
        Decisions {
            made_for,
            map: papaya::HashMap::new(),
        }
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }
}

/// One decision and until when it holds.
#[derive(Clone)]
struct Decision {
    until: Instant,
    verdict: Verdict,
}

#[derive(Clone)]
enum Verdict {
    Allow(Grant),
    Deny(Arc<Denial>),
}

/// A denying answer, kept to be given again.
struct Denial {
    status: StatusCode,
    headers: HeaderMap,
    body: Bytes,
}

/// What the request the check is about looks like from outside.
#[derive(Clone, Copy)]
pub(crate) struct Origin<'a> {
    /// The client's address (through trusted proxies).
    pub(crate) client_ip: IpAddr,
    /// The client's connection is TLS.
    pub(crate) https: bool,
    /// Where the service is found when the check is sent.
    pub(crate) snapshot: &'a SharedSnapshot,
}

/// Checks `req` for a route with `f`: a remembered decision at once, else
/// a wait for the service's answer.
pub(super) fn check(
    decisions: &Arc<Decisions>,
    counts: &Arc<Counts>,
    f: &ForwardAuth,
    req: &mut Request<ProxyBody>,
    origin: Origin<'_>,
) -> Checked {
    let key: Option<Box<[u8]>> = f
        .cache
        .as_ref()
        .and_then(|c| key_of(&c.key, req.headers()))
        .map(Box::from);
    if let Some(k) = &key {
        let now = Instant::now();
        let hit = decisions
            .map
            .pin()
            .get(k)
            .filter(|d| now < d.until)
            .map(|d| d.verdict.clone());
        match hit {
            Some(Verdict::Allow(grant)) => {
                counts.bump(AuthResult::Allowed);
                super::grant(req.headers_mut(), Some(&grant));
                return Checked::Pass;
            }
            Some(Verdict::Deny(d)) => {
                counts.bump(AuthResult::Denied);
                return Checked::Refuse(answer_of(&d));
            }
            None => {}
        }
    }
    let ask = ask_of(f, req, (origin.client_ip, origin.https));
    let wait = asking(
        Arc::clone(decisions),
        Arc::clone(counts),
        origin.snapshot.clone(),
        ask,
        key,
    );
    Checked::Wait(wait)
}

/// The wait for the service's answer, and what it decides.
fn asking(
    decisions: Arc<Decisions>,
    counts: Arc<Counts>,
    snapshot: SharedSnapshot,
    ask: Ask,
    key: Option<Box<[u8]>>,
) -> AuthWait {
    Box::pin(async move {
        let f = &decisions.made_for;
        let asked = subrequest::ask(&snapshot, &f.service, &ask, f.timeout, MAX_ANSWER).await;
        let verdict = match asked {
            Ok(a) => verdict_of(f, a),
            Err(why) => {
                tracing::warn!(service = %f.service, error = %why, failure_mode = ?f.failure_mode, "auth.forward: the authorization service did not answer");
                return match f.failure_mode {
                    FailureMode::Deny => {
                        counts.bump(AuthResult::Error);
                        Err(unavailable())
                    }
                    FailureMode::Allow => {
                        counts.bump(AuthResult::FailedOpen);
                        Ok(None)
                    }
                };
            }
        };
        if let (Some(k), Some(c)) = (key, &f.cache) {
            remember(&decisions, k, c.ttl, c.max_entries, verdict.clone());
        }
        match verdict {
            Verdict::Allow(grant) => {
                counts.bump(AuthResult::Allowed);
                Ok(Some(grant))
            }
            Verdict::Deny(d) => {
                counts.bump(AuthResult::Denied);
                Err(answer_of(&d))
            }
        }
    })
}

/// Remembers a decision; the map is emptied when full.
fn remember(
    decisions: &Decisions,
    key: Box<[u8]>,
    ttl: std::time::Duration,
    max: usize,
    verdict: Verdict,
) {
    let map = decisions.map.pin();
    if map.len() >= max {
        map.clear();
    }
    let until = Instant::now() + ttl;
    map.insert(key, Decision { until, verdict });
}

/// The value a decision is remembered by, when the request has it.
fn key_of<'h>(key: &CacheKey, headers: &'h HeaderMap) -> Option<&'h [u8]> {
    match key {
        CacheKey::Header(h) => headers.get(h).map(HeaderValue::as_bytes),
        CacheKey::Cookie(c) => hopgate_core::cookie::value(headers, c).map(str::as_bytes),
    }
}

/// The check's request: what the client asked, described.
fn ask_of(f: &ForwardAuth, req: &Request<ProxyBody>, (client_ip, https): (IpAddr, bool)) -> Ask {
    let mut headers = HeaderMap::with_capacity(5 + f.copy_request_headers.len());
    for h in &f.copy_request_headers {
        for v in req.headers().get_all(h) {
            headers.append(h.clone(), v.clone());
        }
    }
    let uri = req.uri();
    let path = uri.path_and_query().map_or("/", |p| p.as_str());
    let host = req.headers().get(http::header::HOST).cloned().or_else(|| {
        uri.authority()
            .and_then(|a| HeaderValue::from_str(a.as_str()).ok())
    });
    let set = |h: &mut HeaderMap, name: &'static str, v: Option<HeaderValue>| {
        if let Some(v) = v {
            h.insert(HeaderName::from_static(name), v);
        }
    };
    set(
        &mut headers,
        "x-forwarded-method",
        HeaderValue::from_str(req.method().as_str()).ok(),
    );
    set(
        &mut headers,
        "x-forwarded-uri",
        HeaderValue::from_str(path).ok(),
    );
    set(&mut headers, "x-forwarded-host", host);
    let proto = if https { "https" } else { "http" };
    set(
        &mut headers,
        "x-forwarded-proto",
        Some(HeaderValue::from_static(proto)),
    );
    set(
        &mut headers,
        "x-forwarded-for",
        HeaderValue::from_str(&client_ip.to_string()).ok(),
    );
    Ask {
        method: Method::GET,
        path: f.path.clone(),
        headers,
    }
}

/// An answer below 500 as a decision.
fn verdict_of(f: &ForwardAuth, a: Asked) -> Verdict {
    if a.status.is_success() {
        let grant: Vec<(HeaderName, HeaderValue)> = f
            .copy_response_headers
            .iter()
            .flat_map(|h| a.headers.get_all(h).iter().map(|v| (h.clone(), v.clone())))
            .collect();
        return Verdict::Allow(Arc::from(grant));
    }
    let mut headers = a.headers;
    for h in &NOT_PASSED {
        headers.remove(h);
    }
    Verdict::Deny(Arc::new(Denial {
        status: a.status,
        headers,
        body: a.body,
    }))
}

/// The client's answer for a denial.
fn answer_of(d: &Denial) -> Box<Response<ProxyBody>> {
    let mut resp = Response::new(ProxyBody::full(d.body.clone()));
    *resp.status_mut() = d.status;
    *resp.headers_mut() = d.headers.clone();
    Box::new(resp)
}

/// `503`: the authorization service could not answer and the route denies
/// then.
fn unavailable() -> Box<Response<ProxyBody>> {
    super::answer(
        StatusCode::SERVICE_UNAVAILABLE,
        "hopgate: the authorization service is unavailable\n",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fwd() -> ForwardAuth {
        ForwardAuth {
            service: "authz".into(),
            path: "/check".into(),
            copy_request_headers: vec![http::header::AUTHORIZATION],
            copy_response_headers: vec![HeaderName::from_static("x-user")],
            cache: None,
            failure_mode: FailureMode::Deny,
            timeout: std::time::Duration::from_secs(1),
        }
    }

    #[test]
    fn the_check_describes_the_request() {
        let mut req = Request::new(ProxyBody::Empty);
        *req.method_mut() = Method::POST;
        *req.uri_mut() = "/app/x?y=1".parse().unwrap();
        req.headers_mut()
            .insert(http::header::HOST, HeaderValue::from_static("example.com"));
        req.headers_mut().insert(
            http::header::AUTHORIZATION,
            HeaderValue::from_static("Bearer t"),
        );
        req.headers_mut()
            .insert(http::header::COOKIE, HeaderValue::from_static("sid=1"));
        let ask = ask_of(&fwd(), &req, ("10.1.2.3".parse().unwrap(), true));
        assert_eq!(ask.method, Method::GET);
        assert_eq!(ask.path, "/check");
        let h = &ask.headers;
        assert_eq!(h["x-forwarded-method"], "POST");
        assert_eq!(h["x-forwarded-uri"], "/app/x?y=1");
        assert_eq!(h["x-forwarded-host"], "example.com");
        assert_eq!(h["x-forwarded-proto"], "https");
        assert_eq!(h["x-forwarded-for"], "10.1.2.3");
        assert_eq!(h["authorization"], "Bearer t");
        assert!(h.get("cookie").is_none(), "only the listed headers go");
    }

    #[test]
    fn answers_decide() {
        let mut headers = HeaderMap::new();
        headers.insert("x-user", HeaderValue::from_static("alice"));
        headers.insert("x-other", HeaderValue::from_static("no"));
        let ok = Asked {
            status: StatusCode::OK,
            headers: headers.clone(),
            body: Bytes::new(),
        };
        match verdict_of(&fwd(), ok) {
            Verdict::Allow(g) => {
                assert_eq!(g.len(), 1);
                assert_eq!(g[0].1, "alice");
            }
            Verdict::Deny(_) => panic!("2xx allows"),
        }
        headers.insert(CONTENT_LENGTH, HeaderValue::from_static("5"));
        headers.insert(
            http::header::WWW_AUTHENTICATE,
            HeaderValue::from_static("Bearer realm=\"x\""),
        );
        let no = Asked {
            status: StatusCode::UNAUTHORIZED,
            headers,
            body: Bytes::from_static(b"nope\n"),
        };
        match verdict_of(&fwd(), no) {
            Verdict::Deny(d) => {
                let resp = answer_of(&d);
                assert_eq!(resp.status(), 401);
                assert_eq!(resp.headers()["www-authenticate"], "Bearer realm=\"x\"");
                assert!(resp.headers().get(CONTENT_LENGTH).is_none());
            }
            Verdict::Allow(_) => panic!("401 denies"),
        }
    }

    #[test]
    fn cache_keys() {
        let mut h = HeaderMap::new();
        h.insert(
            http::header::COOKIE,
            HeaderValue::from_static("a=1; sid=xyz"),
        );
        h.insert(
            http::header::AUTHORIZATION,
            HeaderValue::from_static("Bearer t"),
        );
        assert_eq!(
            key_of(&CacheKey::Cookie("sid".into()), &h),
            Some(&b"xyz"[..])
        );
        assert_eq!(
            key_of(&CacheKey::Header(http::header::AUTHORIZATION), &h),
            Some(&b"Bearer t"[..])
        );
        assert_eq!(key_of(&CacheKey::Cookie("none".into()), &h), None);
    }

    #[test]
    fn a_full_cache_is_emptied() {
        let d = Decisions::new(fwd());
        let v = Verdict::Allow(Arc::from(Vec::new()));
        for i in 0..5u8 {
            remember(
                &d,
                Box::from([i]),
                std::time::Duration::from_secs(9),
                3,
                v.clone(),
            );
        }
        assert!(d.len() <= 3, "{}", d.len());
    }
}
