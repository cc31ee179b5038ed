//! Header rewriting between client and backend.
//!
//! Owns hop-by-hop stripping (RFC 9110 §7.6.1, plus every header named in
//! `Connection`), the forwarding headers hopgate adds, and request ids.
//! Must not touch: routing or bodies.

use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use http::header::{self, HeaderMap, HeaderName, HeaderValue};

use crate::h1::head::name_is;
use crate::h1::write::ExtraLines;

pub(crate) static X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
pub(crate) static X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
pub(crate) static X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");
pub(crate) static X_ROUTE_RULE_ID: HeaderName = HeaderName::from_static("x-route-rule-id");
pub(crate) static X_UPSTREAM_ADDR: HeaderName = HeaderName::from_static("x-upstream-addr");
pub(crate) static X_HOP_FROM: HeaderName = HeaderName::from_static("x-hop-from");
pub(crate) static HOP_SESSION_CONTEXT: HeaderName = HeaderName::from_static("hop-session-context");
pub(crate) static HOP_MAINTENANCE: HeaderName = HeaderName::from_static("hop-maintenance");
pub(crate) static GRPC_TIMEOUT: HeaderName = HeaderName::from_static("grpc-timeout");
static KEEP_ALIVE: HeaderName = HeaderName::from_static("keep-alive");
static PROXY_CONNECTION: HeaderName = HeaderName::from_static("proxy-connection");

// The headers [`strip_hop_by_hop`] removes, as bits of a mask that one
// pass over the names fills ([`scan_request`], [`scan_response`]).
const CONNECTION_BIT: u16 = 1;
const TRANSFER_ENCODING_BIT: u16 = 1 << 1;
const UPGRADE_BIT: u16 = 1 << 2;
const TRAILER_BIT: u16 = 1 << 3;
const PROXY_AUTHENTICATE_BIT: u16 = 1 << 4;
const PROXY_AUTHORIZATION_BIT: u16 = 1 << 5;
const EXPECT_BIT: u16 = 1 << 6;
const TE_BIT: u16 = 1 << 7;
const KEEP_ALIVE_BIT: u16 = 1 << 8;
const PROXY_CONNECTION_BIT: u16 = 1 << 9;
const X_HOP_FROM_BIT: u16 = 1 << 10;
const HOP_SESSION_CONTEXT_BIT: u16 = 1 << 11;
const HOP_MAINTENANCE_BIT: u16 = 1 << 12;

/// The hop-by-hop (or gateway-only) bit of `name`; 0 for everything else.
fn hop_bit(name: &HeaderName) -> u16 {
    // Standard names compare as small integers; the custom ones below are
    // only compared when the length matches.
    if *name == header::CONNECTION {
        CONNECTION_BIT
    } else if *name == header::TRANSFER_ENCODING {
        TRANSFER_ENCODING_BIT
    } else if *name == header::UPGRADE {
        UPGRADE_BIT
    } else if *name == header::TRAILER {
        TRAILER_BIT
    } else if *name == header::PROXY_AUTHENTICATE {
        PROXY_AUTHENTICATE_BIT
    } else if *name == header::PROXY_AUTHORIZATION {
        PROXY_AUTHORIZATION_BIT
    } else if *name == header::EXPECT {
        EXPECT_BIT
    } else if *name == header::TE {
        TE_BIT
    } else if *name == KEEP_ALIVE {
        KEEP_ALIVE_BIT
    } else if *name == PROXY_CONNECTION {
        PROXY_CONNECTION_BIT
    } else if *name == X_HOP_FROM {
        X_HOP_FROM_BIT
    } else if *name == HOP_SESSION_CONTEXT {
        HOP_SESSION_CONTEXT_BIT
    } else if *name == HOP_MAINTENANCE {
        HOP_MAINTENANCE_BIT
    } else {
        0
    }
}

/// The hop-by-hop (and gateway-only) names and their bits: what
/// `hop_bit_of` and `hop_bit` answer (a test holds them to it).
#[cfg(test)]
const HOP_NAMES: [(&str, u16); 13] = [
    ("keep-alive", KEEP_ALIVE_BIT),
    ("upgrade", UPGRADE_BIT),
    ("te", TE_BIT),
    ("connection", CONNECTION_BIT),
    ("transfer-encoding", TRANSFER_ENCODING_BIT),
    ("trailer", TRAILER_BIT),
    ("proxy-authenticate", PROXY_AUTHENTICATE_BIT),
    ("proxy-authorization", PROXY_AUTHORIZATION_BIT),
    ("expect", EXPECT_BIT),
    ("proxy-connection", PROXY_CONNECTION_BIT),
    ("x-hop-from", X_HOP_FROM_BIT),
    ("hop-session-context", HOP_SESSION_CONTEXT_BIT),
    ("hop-maintenance", HOP_MAINTENANCE_BIT),
];

/// The bit of a name given as bytes, in any case; 0 for everything else.
/// Compared without building a [`HeaderName`], which allocates for
/// non-standard names: by length first, then at most three names of that
/// length (the tests' table of hop-by-hop names holds it to `hop_bit`).
/// Inlined: asked of every line of every answer's head.
#[inline]
fn hop_bit_of(name: &[u8]) -> u16 {
    let is = |n: &[u8]| name_is(name, n);
    match name.len() {
        2 if is(b"te") => TE_BIT,
        6 if is(b"expect") => EXPECT_BIT,
        7 if is(b"upgrade") => UPGRADE_BIT,
        7 if is(b"trailer") => TRAILER_BIT,
        10 if is(b"connection") => CONNECTION_BIT,
        10 if is(b"keep-alive") => KEEP_ALIVE_BIT,
        10 if is(b"x-hop-from") => X_HOP_FROM_BIT,
        15 if is(b"hop-maintenance") => HOP_MAINTENANCE_BIT,
        16 if is(b"proxy-connection") => PROXY_CONNECTION_BIT,
        17 if is(b"transfer-encoding") => TRANSFER_ENCODING_BIT,
        18 if is(b"proxy-authenticate") => PROXY_AUTHENTICATE_BIT,
        19 if is(b"proxy-authorization") => PROXY_AUTHORIZATION_BIT,
        19 if is(b"hop-session-context") => HOP_SESSION_CONTEXT_BIT,
        _ => 0,
    }
}

/// Is a name listed in a `Connection` value one of the hop-by-hop (or
/// gateway-only) headers [`strip`] handles by itself?
fn is_hop_name(token: &str) -> bool {
    hop_bit_of(token.as_bytes()) != 0
}

/// Can a backend's response head go to the client as the backend's bytes
/// ([`crate::h1::response_head::RawHead`]), its `Connection` and `Keep-Alive`
/// lines left out by the writer? Only when the answer step has nothing to
/// take out of it or to replace: no other hop-by-hop or gateway-only
/// header (`Hop-Maintenance`, `Hop-Session-Context`), a `Connection` that
/// names only `keep-alive` or `close`, no gRPC content type, at most one
/// `Content-Length`, and none of the names in `taken` (those the gateway
/// may set on the answer).
#[inline]
pub(crate) fn passes_raw<'a>(
    lines: impl Iterator<Item = (&'a [u8], &'a [u8])>,
    taken: &[&[u8]],
) -> bool {
    let mut lengths = 0;
    for (name, value) in lines {
        match hop_bit_of(name) {
            0 => {}
            KEEP_ALIVE_BIT => continue,
            CONNECTION_BIT => {
                // Nearly every backend says one of the two: compared a
                // word at a time, no token walk (a value holds no CR, the
                // one byte that folds onto `-`).
                if name_is(value, b"keep-alive") || name_is(value, b"close") {
                    continue;
                }
                let only_own = value.split(|b| *b == b',').all(|t| {
                    let t = t.trim_ascii();
                    t.is_empty()
                        || t.eq_ignore_ascii_case(b"keep-alive")
                        || t.eq_ignore_ascii_case(b"close")
                });
                if only_own {
                    continue;
                }
                return false;
            }
            _ => return false,
        }
        if name_is(name, b"content-type") && value.starts_with(b"application/grpc") {
            return false;
        }
        if name_is(name, b"content-length") {
            lengths += 1;
            if lengths > 1 {
                return false;
            }
        }
        // Configured names may hold any token character: compared byte by
        // byte (after the length).
        if taken
            .iter()
            .any(|t| t.len() == name.len() && t.eq_ignore_ascii_case(name))
        {
            return false;
        }
    }
    true
}

/// What the request path needs to know about a request's headers, found
/// in one pass over them instead of a hashed lookup per question.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct RequestFacts {
    /// Header lines as the client sent them.
    pub count: usize,
    /// Bytes of the header lines as sent (`name: value` plus CRLF each).
    pub header_bytes: usize,
    /// The hop-by-hop (and gateway-only) headers present.
    hop: u16,
    pub request_id: bool,
    pub forwarded_for: bool,
    /// `Content-Type: application/grpc…`.
    pub grpc: bool,
    pub grpc_timeout: bool,
    /// `Host` header lines (at most 255 counted).
    pub hosts: u8,
    /// A `Content-Length` line.
    pub content_length: bool,
    /// The client's own lines of the names the gateway sets
    /// ([`SetLines`]), as bits.
    own: u8,
}

impl RequestFacts {
    /// The client sent a `Hop-Maintenance` header (stripped before the
    /// backend; an answer to this request is never trusted to carry one).
    pub fn carries_maintenance(&self) -> bool {
        self.hop & HOP_MAINTENANCE_BIT != 0
    }

    /// The client sent a `Transfer-Encoding` header.
    pub fn transfer_encoding(&self) -> bool {
        self.hop & TRANSFER_ENCODING_BIT != 0
    }

    /// The client sent `X-Forwarded-Proto`.
    pub fn forwarded_proto(&self) -> bool {
        self.own & OWN_FORWARDED_PROTO != 0
    }

    /// The client sent `X-Route-Rule-Id`.
    pub fn route_rule_id(&self) -> bool {
        self.own & OWN_ROUTE_RULE_ID != 0
    }

    /// The client sent `X-Upstream-Addr`.
    pub fn upstream_addr(&self) -> bool {
        self.own & OWN_UPSTREAM_ADDR != 0
    }

    /// The client sent `traceparent`.
    pub fn traceparent(&self) -> bool {
        self.own & OWN_TRACEPARENT != 0
    }

    /// The client sent `tracestate`.
    pub fn tracestate(&self) -> bool {
        self.own & OWN_TRACESTATE != 0
    }

    /// The client sent both `Connection` and `Upgrade`: without them a
    /// request cannot ask for an upgrade, and is not looked at for one.
    pub fn may_upgrade(&self) -> bool {
        self.hop & (CONNECTION_BIT | UPGRADE_BIT) == CONNECTION_BIT | UPGRADE_BIT
    }
}

/// One pass over a request's headers; see [`RequestFacts`].
pub fn scan_request(headers: &HeaderMap) -> RequestFacts {
    let mut f = RequestFacts {
        count: headers.len(),
        ..RequestFacts::default()
    };
    for (name, value) in headers {
        f.header_bytes += name.as_str().len() + value.len() + 4;
        if *name == header::CONTENT_TYPE {
            f.grpc |= value.as_bytes().starts_with(b"application/grpc");
        } else if *name == X_REQUEST_ID {
            f.request_id = true;
        } else if *name == X_FORWARDED_FOR {
            f.forwarded_for = true;
        } else if *name == GRPC_TIMEOUT {
            f.grpc_timeout = true;
        } else if *name == header::HOST {
            f.hosts = f.hosts.saturating_add(1);
        } else if *name == header::CONTENT_LENGTH {
            f.content_length = true;
        } else {
            f.hop |= hop_bit(name);
            f.own |= own_bit(name);
        }
    }
    f
}

const OWN_FORWARDED_PROTO: u8 = 1;
const OWN_ROUTE_RULE_ID: u8 = 1 << 1;
const OWN_UPSTREAM_ADDR: u8 = 1 << 2;
const OWN_TRACEPARENT: u8 = 1 << 3;
const OWN_TRACESTATE: u8 = 1 << 4;

/// The bit of a name the gateway sets itself ([`SetLines`]); 0 for
/// everything else.
fn own_bit(name: &HeaderName) -> u8 {
    let n = name.as_str();
    match n.len() {
        17 if n == X_FORWARDED_PROTO.as_str() => OWN_FORWARDED_PROTO,
        15 if n == X_ROUTE_RULE_ID.as_str() => OWN_ROUTE_RULE_ID,
        15 if n == X_UPSTREAM_ADDR.as_str() => OWN_UPSTREAM_ADDR,
        11 if n == crate::trace::TRACEPARENT.as_str() => OWN_TRACEPARENT,
        10 if n == crate::trace::TRACESTATE.as_str() => OWN_TRACESTATE,
        _ => 0,
    }
}

/// The lines the gateway sets on an upstream request (`X-Request-Id` when
/// the gateway made the id, `X-Forwarded-For` when the client sent none,
/// `X-Forwarded-Proto` when it is the gateway's, `X-Route-Rule-Id`,
/// `traceparent`, `X-Upstream-Addr`), kept
/// beside the request's header map instead of in it: each would cost a
/// hashed insert into the map on every request. The client's own lines of
/// these names are taken out of the map when the request is planned (only
/// when [`RequestFacts`] saw them), so a set line replaces them. The
/// HTTP/1.1 writer writes them after the map's lines
/// (`h1::write::request_head`, through [`ExtraLines`]); an HTTP/2 send puts them into the
/// map first ([`SetLines::apply`]).
#[derive(Debug, Default, Clone)]
pub struct SetLines {
    /// A request id the gateway made (a client's own valid id stays in
    /// the map; an invalid one is taken out of it).
    pub request_id: Option<MadeId>,
    pub forwarded_for: Option<HeaderValue>,
    /// `http` or `https`.
    pub forwarded_proto: Option<&'static str>,
    pub route_rule_id: Option<HeaderValue>,
    pub traceparent: Option<crate::trace::ParentLine>,
    pub upstream_addr: Option<HeaderValue>,
}

/// The HTTP/1.1 writer writes the set lines after the map's.
impl ExtraLines for SetLines {
    #[inline(always)]
    fn each(&self, line: impl FnMut(&'static [u8], &[u8])) {
        SetLines::each(self, line);
    }
}

impl SetLines {
    /// The lines that are set, in the order they are written, each as the
    /// end of the line before it and the start of its own (`\r\n`, the
    /// name and `: `), then its value: two copies per line. Inlined into
    /// the writer: six tests of an option and two copies each.
    #[inline(always)]
    pub(crate) fn each(&self, mut line: impl FnMut(&'static [u8], &[u8])) {
        if let Some(v) = &self.request_id {
            line(b"\r\nx-request-id: ", v.as_bytes());
        }
        if let Some(v) = &self.forwarded_for {
            line(b"\r\nx-forwarded-for: ", v.as_bytes());
        }
        if let Some(p) = self.forwarded_proto {
            line(b"\r\nx-forwarded-proto: ", p.as_bytes());
        }
        if let Some(v) = &self.route_rule_id {
            line(b"\r\nx-route-rule-id: ", v.as_bytes());
        }
        if let Some(t) = &self.traceparent {
            line(b"\r\ntraceparent: ", t.as_bytes());
        }
        if let Some(v) = &self.upstream_addr {
            line(b"\r\nx-upstream-addr: ", v.as_bytes());
        }
    }

    /// Puts the set lines into `headers`, replacing any of the same name.
    /// The two values new on every request (the request id the gateway
    /// made and `traceparent`) are marked sensitive: h2's HPACK encoder
    /// then sends them as never-indexed literals instead of inserting each
    /// into the upstream connection's dynamic table, where it would only
    /// evict the entries that do repeat (`content-type`, `te`,
    /// `x-forwarded-for`, `x-upstream-addr`, ...) and be evicted unused.
    pub(crate) fn apply(&self, headers: &mut HeaderMap) {
        if let Some(p) = self.forwarded_proto {
            headers.insert(X_FORWARDED_PROTO.clone(), HeaderValue::from_static(p));
        }
        if let Some(id) = &self.request_id {
            headers.insert(X_REQUEST_ID.clone(), once(id.to_value()));
        }
        let slots = [
            (&X_FORWARDED_FOR, &self.forwarded_for),
            (&X_ROUTE_RULE_ID, &self.route_rule_id),
            (&X_UPSTREAM_ADDR, &self.upstream_addr),
        ];
        for (name, value) in slots {
            if let Some(v) = value {
                headers.insert(name.clone(), v.clone());
            }
        }
        if let Some(t) = self.traceparent {
            headers.insert(crate::trace::TRACEPARENT.clone(), once(t.to_value()));
        }
    }
}

/// A value sent once (see [`SetLines::apply`]): never indexed by HPACK.
fn once(mut v: HeaderValue) -> HeaderValue {
    v.set_sensitive(true);
    v
}

/// What the gateway looks for in a backend's response headers.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ResponseFacts {
    hop: u16,
    pub maintenance: bool,
    pub grpc: bool,
}

impl ResponseFacts {
    /// The backend sent a session context.
    pub fn context(&self) -> bool {
        self.hop & HOP_SESSION_CONTEXT_BIT != 0
    }
}

/// One pass over a response's headers; see [`ResponseFacts`].
pub fn scan_response(headers: &HeaderMap) -> ResponseFacts {
    let mut f = ResponseFacts::default();
    for (name, value) in headers {
        if *name == header::CONTENT_TYPE {
            f.grpc |= value.as_bytes().starts_with(b"application/grpc");
        } else if *name == HOP_MAINTENANCE {
            f.maintenance = true;
        } else {
            f.hop |= hop_bit(name);
        }
    }
    f
}

/// Removes the hop-by-hop headers of a request found by [`scan_request`].
/// `TE: trailers` is kept (gRPC needs it); everything named in
/// `Connection` goes too, and so do the headers only the gateway may send
/// to backends (`X-Hop-From`, `Hop-Session-Context`) and the one only
/// backends may send (`Hop-Maintenance`).
pub fn strip_request(headers: &mut HeaderMap, facts: &RequestFacts) {
    strip(headers, facts.hop, true);
}

/// Removes the hop-by-hop headers of a response found by
/// [`scan_response`]. `Hop-Session-Context` stays: the session code decides
/// whether to keep or drop it.
pub(crate) fn strip_response(headers: &mut HeaderMap, facts: &ResponseFacts) {
    strip(headers, facts.hop & !HOP_SESSION_CONTEXT_BIT, false);
}

/// Removes hop-by-hop headers (RFC 9110 §7.6.1, and every header named in
/// `Connection`). On requests `TE: trailers` is kept and the gateway-only
/// headers go as well.
#[cfg(test)]
pub(crate) fn strip_hop_by_hop(headers: &mut HeaderMap, is_request: bool) {
    let hop = headers.keys().fold(0, |m, n| m | hop_bit(n));
    strip(headers, hop, is_request);
}

/// Removes the headers in `hop` (a mask from [`hop_bit`]); only names known
/// to be present are looked up.
fn strip(headers: &mut HeaderMap, hop: u16, is_request: bool) {
    if hop == 0 {
        return;
    }
    if hop & CONNECTION_BIT != 0 {
        // Other names listed in `Connection` go too. The hop-by-hop names
        // are handled below whether listed or not (so `Connection:
        // keep-alive`, the usual value, costs no lookup); `TE: trailers`
        // stays on requests even when listed (gRPC needs it).
        let mut others: Vec<HeaderName> = Vec::new();
        for value in headers.get_all(header::CONNECTION) {
            for token in value.to_str().unwrap_or("").split(',') {
                let token = token.trim();
                if token.is_empty() || token.eq_ignore_ascii_case("close") || is_hop_name(token) {
                    continue;
                }
                others.extend(HeaderName::from_bytes(token.as_bytes()).ok());
            }
        }
        for name in &others {
            headers.remove(name);
        }
    }
    let always = [
        (CONNECTION_BIT, &header::CONNECTION),
        (KEEP_ALIVE_BIT, &KEEP_ALIVE),
        (PROXY_CONNECTION_BIT, &PROXY_CONNECTION),
        (TRANSFER_ENCODING_BIT, &header::TRANSFER_ENCODING),
        (UPGRADE_BIT, &header::UPGRADE),
        (TRAILER_BIT, &header::TRAILER),
        (PROXY_AUTHENTICATE_BIT, &header::PROXY_AUTHENTICATE),
        (PROXY_AUTHORIZATION_BIT, &header::PROXY_AUTHORIZATION),
    ];
    for (bit, name) in always {
        if hop & bit != 0 {
            headers.remove(name);
        }
    }
    if is_request {
        // hopgate answers `Expect: 100-continue` itself (its HTTP/1.1 server
        // sends the 100 when the body is first read).
        if hop & EXPECT_BIT != 0 {
            headers.remove(header::EXPECT);
        }
        if hop & TE_BIT != 0 {
            let trailers_only = headers
                .get_all(header::TE)
                .iter()
                .all(|te| te.as_bytes().eq_ignore_ascii_case(b"trailers"));
            if !trailers_only {
                headers.remove(header::TE);
            }
        }
        if hop & X_HOP_FROM_BIT != 0 {
            headers.remove(&X_HOP_FROM);
        }
        if hop & HOP_SESSION_CONTEXT_BIT != 0 {
            headers.remove(&HOP_SESSION_CONTEXT);
        }
        if hop & HOP_MAINTENANCE_BIT != 0 {
            headers.remove(&HOP_MAINTENANCE);
        }
    } else if hop & TE_BIT != 0 {
        headers.remove(header::TE);
    }
}

/// The `X-Forwarded-For` value of a client with none: its address, built
/// once per connection.
pub(crate) fn peer_header(peer: IpAddr) -> HeaderValue {
    HeaderValue::from_str(&peer.to_string()).expect("an IP address is a valid header value")
}

/// Appends the peer to `X-Forwarded-For` (like nginx's
/// `$proxy_add_x_forwarded_for`). Every `X-Forwarded-For` line the client
/// sent is kept, in order, combined into one comma-separated list as RFC
/// 9110 §5.3 allows (a front proxy often adds its own line below the
/// client's); the peer goes last.
pub fn append_forwarded_for(headers: &mut HeaderMap, peer: IpAddr) {
    let mut buf = Vec::with_capacity(48);
    for prev in headers.get_all(&X_FORWARDED_FOR) {
        buf.extend_from_slice(prev.as_bytes());
        buf.extend_from_slice(b", ");
    }
    use std::io::Write;
    let _ = write!(buf, "{peer}");
    if let Ok(v) = HeaderValue::from_bytes(&buf) {
        headers.insert(X_FORWARDED_FOR.clone(), v);
    }
}

/// Whether a client's `X-Request-Id` may be kept: 1 to 128 characters of
/// `[A-Za-z0-9._:-]`, so it is safe in logs, headers and error bodies.
pub(crate) fn valid_request_id(v: &HeaderValue) -> bool {
    let b = v.as_bytes();
    (1..=128).contains(&b.len())
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'_' | b':' | b'-'))
}

/// A request id the gateway made: 32 hex digits, kept inline, so that
/// making one, handing it to the set lines and to the access log and
/// dropping it allocates nothing (as a `HeaderValue` it cost ~300
/// instructions per request: an allocation, a copy, and a shared clone).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MadeId([u8; 32]);

impl MadeId {
    /// All zeros: the place of an id not made yet (a request's state
    /// before `ClientConn::begin` gives it its id).
    pub(crate) const BLANK: MadeId = MadeId([b'0'; 32]);

    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// The digits as text (always ASCII).
    pub fn as_str(&self) -> &str {
        std::str::from_utf8(&self.0).unwrap_or("-")
    }

    /// The id as a header value, marked sensitive: new on every request,
    /// h2's HPACK encoder sends it as a never-indexed literal (to the
    /// client in an HTTP/2 answer, upstream to an HTTP/2 node) instead of
    /// inserting it into the connection's dynamic table, where it would
    /// evict the entries that repeat. HTTP/1.1 writes it the same either way.
    pub fn to_value(self) -> HeaderValue {
        let mut v = HeaderValue::from_bytes(&self.0).expect("hex digits are a valid header value");
        v.set_sensitive(true);
        v
    }
}

/// A request's id: one the gateway made, or the client's own when it was
/// valid ([`valid_request_id`]; shared with the client's header map).
#[derive(Clone, Debug)]
pub(crate) enum RequestId {
    Made(MadeId),
    Client(HeaderValue),
}

impl RequestId {
    /// The id as text (ASCII either way: made of hex digits, or checked).
    pub(crate) fn as_str(&self) -> &str {
        match self {
            RequestId::Made(id) => id.as_str(),
            RequestId::Client(v) => std::str::from_utf8(v.as_bytes()).unwrap_or("-"),
        }
    }

    /// The id as a header value (an error answer's `X-Request-Id`).
    pub(crate) fn to_value(&self) -> HeaderValue {
        match self {
            RequestId::Made(id) => id.to_value(),
            // A client's id is one per request too (see `MadeId::to_value`).
            RequestId::Client(v) => {
                let mut v = v.clone();
                v.set_sensitive(true);
                v
            }
        }
    }
}

/// A new request id: a per-process random prefix and a counter, 32 hex
/// digits, unique across processes with overwhelming probability.
pub(crate) fn new_request_id() -> MadeId {
    // The prefix's digits are written once per process.
    static PREFIX: OnceLock<[u8; 16]> = OnceLock::new();
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let prefix = PREFIX.get_or_init(|| {
        let mut digits = [0u8; 16];
        crate::trace::hex_into(&fastrand::u64(..).to_be_bytes(), &mut digits);
        digits
    });
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let mut buf = [0u8; 32];
    buf[..16].copy_from_slice(prefix);
    crate::trace::hex_into(&n.to_be_bytes(), &mut buf[16..]);
    MadeId(buf)
}

#[cfg(test)]
mod tests;
