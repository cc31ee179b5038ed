//! Route filters, compiled: the per-route program that `routes[].filters`
//! becomes at load ([`RouteFilters`]). Request-side steps (header edits
//! and URL rewrites, [`RequestStep`]) in the order written, response-side
//! header edits in the order written, at most one local answer
//! ([`Local`]: a redirect or a direct response) that ends the list, and at
//! most one [`Mirror`] (a sampled copy to another service, sent by the
//! data plane).
//! Everything that can be decided at load is: header names parsed, fixed
//! values built, regexes compiled, templates split into text and
//! variables; a request only walks the steps.
//!
//! Owns the pure operations on a request's parts: header edits on a map
//! ([`HeaderEdits::apply`]), the path a rewrite makes
//! ([`PathRewrite::apply`]), a redirect's `Location`
//! ([`Redirect::location`]) and the templates ([`template`]). Must not
//! touch: I/O (a `body_file` is read by the caller that loads the config
//! and handed in), the request path's types (the data plane applies the
//! program).

pub mod template;

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue};
use regex::Regex;

pub use template::{Template, Var, Vars};

/// One route's filters. A route without filters has none of these
/// (`Option<Arc<RouteFilters>>` is `None` in its config).
#[derive(Clone, Debug, Default)]
pub struct RouteFilters {
    /// Request headers and URL rewrites, in the order written.
    pub request: Vec<RequestStep>,
    /// Response header edits, in the order written.
    pub response: Vec<HeaderEdits>,
    /// A redirect or direct response: the route answers itself.
    pub local: Option<Local>,
    /// A copy of a sampled share of the requests to another service.
    pub mirror: Option<Mirror>,
    /// The filters' kinds in the order written (`request_headers`,
    /// `url_rewrite`, …), for spans.
    pub kinds: Vec<&'static str>,
}

/// `mirror`: a copy of the request, as the upstream sees it, to service
/// `service` (an index of the config's services) for `per_million` of a
/// million requests, at most `max_in_flight` at once.
#[derive(Clone, Debug)]
pub struct Mirror {
    pub service: usize,
    pub per_million: u32,
    pub max_in_flight: u32,
}

impl Mirror {
    /// One million: `percent: 100`.
    pub const ALL: u32 = 1_000_000;

    /// Is the request whose roll is `roll` (uniform over `0..ALL`)
    /// sampled?
    #[inline]
    pub fn samples(&self, roll: u32) -> bool {
        roll < self.per_million
    }
}

impl RouteFilters {
    /// The route answers itself (redirect or direct response).
    pub fn is_local(&self) -> bool {
        self.local.is_some()
    }

    /// Some step rewrites the path.
    pub fn rewrites_path(&self) -> bool {
        self.request
            .iter()
            .any(|s| matches!(s, RequestStep::Rewrite(UrlRewrite { path: Some(_), .. })))
    }
}

/// A request-side step.
#[derive(Clone, Debug)]
pub enum RequestStep {
    Headers(HeaderEdits),
    Rewrite(UrlRewrite),
}

/// Header edits: `set` (replace every line of the name), then `add` (one
/// more line), then `remove`, each in name order.
#[derive(Clone, Debug, Default)]
pub struct HeaderEdits {
    pub set: Vec<(HeaderName, Template)>,
    pub add: Vec<(HeaderName, Template)>,
    pub remove: Vec<HeaderName>,
}

impl HeaderEdits {
    /// Applies the edits to `headers`. A value whose variables expand to
    /// something that is not a header value is left out.
    pub fn apply(&self, headers: &mut HeaderMap, vars: &Vars<'_>) {
        for (name, t) in &self.set {
            if let Some(v) = t.expand(vars) {
                headers.insert(name.clone(), v);
            }
        }
        for (name, t) in &self.add {
            if let Some(v) = t.expand(vars) {
                headers.append(name.clone(), v);
            }
        }
        for name in &self.remove {
            headers.remove(name);
        }
    }
}

/// `url_rewrite`: the path and/or the host the upstream sees.
#[derive(Clone, Debug)]
pub struct UrlRewrite {
    pub path: Option<PathRewrite>,
    /// The `Host` sent upstream.
    pub host: Option<HeaderValue>,
}

/// How a path is rewritten.
#[derive(Clone, Debug)]
pub enum PathRewrite {
    /// The route's matched `path_prefix` (`prefix`, without a trailing
    /// `/`) replaced by `with` (without a trailing `/`).
    ReplacePrefix { prefix: String, with: String },
    /// The whole path.
    Full(String),
    /// The first match of `re` replaced by `replace` (`$1`, `${name}`).
    Regex { re: Regex, replace: String },
}

impl PathRewrite {
    /// A rewrite of `replace_prefix` for a route matching `path_prefix`.
    pub fn replace_prefix(path_prefix: &str, with: &str) -> PathRewrite {
        PathRewrite::ReplacePrefix {
            prefix: path_prefix.trim_end_matches('/').to_owned(),
            with: with.trim_end_matches('/').to_owned(),
        }
    }

    /// The path `path` becomes; `None` when it stays as it is (a prefix
    /// or regex that does not match). The result always starts with `/`.
    pub fn apply(&self, path: &str) -> Option<String> {
        let out = match self {
            PathRewrite::ReplacePrefix { prefix, with } => {
                let rest = path.strip_prefix(prefix.as_str())?;
                let mut out = String::with_capacity(with.len() + rest.len() + 1);
                out.push_str(with);
                out.push_str(rest);
                out
            }
            PathRewrite::Full(p) => p.clone(),
            PathRewrite::Regex { re, replace } => {
                let caps = re.captures(path)?;
                let whole = caps.get(0)?;
                let mut out = String::with_capacity(path.len() + replace.len());
                out.push_str(&path[..whole.start()]);
                caps.expand(replace, &mut out);
                out.push_str(&path[whole.end()..]);
                out
            }
        };
        Some(rooted(out))
    }
}

/// `p` starting with `/`, and with no character that cannot be in a
/// request target (escaped instead).
fn rooted(p: String) -> String {
    let clean = |b: u8| b.is_ascii_graphic() && b != b'?' && b != b'#';
    let p = if p.bytes().all(clean) {
        p
    } else {
        let mut out = String::with_capacity(p.len() + 8);
        for b in p.bytes() {
            if clean(b) {
                out.push(char::from(b));
            } else {
                out.push_str(&format!("%{b:02X}"));
            }
        }
        out
    };
    if p.starts_with('/') {
        p
    } else {
        format!("/{p}")
    }
}

/// A route that answers itself.
#[derive(Clone, Debug)]
pub enum Local {
    Redirect(Redirect),
    Direct(Direct),
}

/// `redirect`: unset parts keep the request's.
#[derive(Clone, Debug)]
pub struct Redirect {
    /// `true` for `https`, `false` for `http`, `None` to keep.
    pub https: Option<bool>,
    pub host: Option<String>,
    pub port: Option<u16>,
    /// `ReplacePrefix` or `Full`.
    pub path: Option<PathRewrite>,
    pub status: u16,
}

impl Redirect {
    /// The `Location` for a request that came over `https` (or not) to
    /// `host` (as sent, maybe with a port) for `path` and `query`. A scheme
    /// changed without a port drops the port (the new scheme's default);
    /// a default port is never written.
    pub fn location(&self, https: bool, host: &str, path: &str, query: Option<&str>) -> String {
        let to_https = self.https.unwrap_or(https);
        let (req_host, req_port) = split_host(host);
        let host = self.host.as_deref().unwrap_or(req_host);
        let port = match (self.port, self.https) {
            (Some(p), _) => Some(p),
            (None, Some(s)) if s != https => None,
            (None, _) => req_port,
        };
        let default = if to_https { 443 } else { 80 };
        let path = match &self.path {
            Some(rw) => rw.apply(path).unwrap_or_else(|| path.to_owned()),
            None => path.to_owned(),
        };
        let mut out = String::with_capacity(16 + host.len() + path.len());
        out.push_str(if to_https { "https://" } else { "http://" });
        out.push_str(host);
        if let Some(p) = port.filter(|p| *p != default) {
            out.push(':');
            out.push_str(&p.to_string());
        }
        out.push_str(&path);
        if let Some(q) = query {
            out.push('?');
            out.push_str(q);
        }
        out
    }
}

/// `example.com:8080` → (`example.com`, 8080); `[::1]:80` → (`[::1]`, 80).
fn split_host(host: &str) -> (&str, Option<u16>) {
    let colon = match host.rfind(':') {
        Some(i) if !host[i..].contains(']') => i,
        _ => return (host, None),
    };
    match host[colon + 1..].parse() {
        Ok(p) => (&host[..colon], Some(p)),
        Err(_) => (host, None),
    }
}

/// `direct_response`: a fixed answer.
#[derive(Clone, Debug)]
pub struct Direct {
    pub status: u16,
    pub content_type: Option<HeaderValue>,
    pub body: Bytes,
    /// `body_file` as written: the loader reads it into `body`
    /// ([`RouteFilters::with_bodies`]).
    pub body_file: Option<String>,
}

impl RouteFilters {
    /// The `body_file` of the direct response, if any.
    pub fn body_file(&self) -> Option<&str> {
        match &self.local {
            Some(Local::Direct(d)) => d.body_file.as_deref(),
            _ => None,
        }
    }

    /// The body the direct response answers, if the route has one.
    pub fn direct_body(&self) -> Option<&Bytes> {
        match &self.local {
            Some(Local::Direct(d)) => Some(&d.body),
            _ => None,
        }
    }

    /// A copy whose direct response answers `body`.
    pub fn with_body(&self, body: Bytes) -> RouteFilters {
        let mut out = self.clone();
        if let Some(Local::Direct(d)) = &mut out.local {
            d.body = body;
        }
        out
    }
}

#[cfg(test)]
mod tests;
