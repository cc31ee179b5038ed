//! Validation of `routes[].filters` into the route's compiled program
//! ([`RouteFilters`]): one kind per entry, at most one local answer and
//! nothing after it, header names and values (no hop-by-hop header, no
//! `Content-Length`, no `Host` or header the gateway sets on requests),
//! templates and their variables, rewrites (a `replace_prefix` needs the
//! route's `path_prefix`, a regex's captures must exist, no path rewrite on
//! a gRPC route), redirects (scheme, port, status), direct responses and
//! the mirror (`filters/mirror.rs`).
//! Same contract as the parent module: every error with its path, no I/O
//! (a `body_file` is only checked for shape; the loader reads it), no
//! panic.

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderName, HeaderValue};

use super::routes::{check_path, compile_regex};
use super::values::{int_in, parse_header_name};
use super::Validator;
use crate::config::raw::{
    RawDirectResponse, RawFilter, RawHeaderEdits, RawPathRewrite, RawRedirect, RawRoute,
    RawService, RawUrlRewrite,
};
use crate::filter::{
    Direct, HeaderEdits, Local, PathRewrite, Redirect, RequestStep, RouteFilters, Template,
    UrlRewrite, Var,
};

mod mirror;

/// The services a filter may name: as written, and their indices by name.
pub(super) type Services<'a> = (&'a [RawService], &'a HashMap<&'a str, usize>);

/// The statuses a redirect may answer.
const REDIRECT_STATUSES: [i64; 5] = [301, 302, 303, 307, 308];

/// Hop-by-hop headers: never set or removed by a filter (the gateway owns
/// them on both sides).
const HOP_BY_HOP: [&str; 8] = [
    "connection",
    "keep-alive",
    "transfer-encoding",
    "upgrade",
    "te",
    "trailer",
    "proxy-connection",
    "proxy-authenticate",
];

/// Request headers the gateway itself sets on the way upstream.
const GATEWAY_SET: [&str; 8] = [
    "x-forwarded-for",
    "x-forwarded-proto",
    "x-forwarded-host",
    "x-forwarded-prefix",
    "x-request-id",
    "x-route-rule-id",
    "x-upstream-addr",
    "traceparent",
];

/// Response lines that carry a gRPC call's outcome: never edited (a
/// trailers-only answer, every gRPC error without a body, has them in its
/// head).
const GRPC_STATUS: [&str; 3] = ["grpc-status", "grpc-message", "grpc-status-details-bin"];

/// Which side a header edit is on.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Side {
    Request,
    Response,
}

/// The variables a response header may use (the request's other facts are
/// gone by the time its answer arrives).
const RESPONSE_VARS: [Var; 2] = [Var::RouteId, Var::Scheme];

impl Validator {
    /// `routes[i].filters` (`p` is `routes[i]`): the compiled program, or
    /// `None` for a route without filters (or with errors, reported).
    pub(super) fn filters(
        &mut self,
        p: &str,
        r: &RawRoute,
        services: Services<'_>,
    ) -> Option<Arc<RouteFilters>> {
        if r.filters.is_empty() {
            return None;
        }
        let before = self.errors.len();
        let mut out = RouteFilters::default();
        let mut local_at: Option<usize> = None;
        let mut rewrite_at: Option<usize> = None;
        for (i, f) in r.filters.iter().enumerate() {
            let fp = format!("{p}.filters[{i}]");
            let Some(kind) = self.one_kind(&fp, f) else {
                continue;
            };
            if let Some(at) = local_at {
                self.err(
                    format!("{fp}.{kind}"),
                    format!(
                        "never runs: filters[{at}] answers the request (a redirect or \
                         direct_response must be the last filter)"
                    ),
                );
                continue;
            }
            out.kinds.push(kind);
            if kind == "mirror" {
                self.mirror(
                    &format!("{fp}.mirror"),
                    f.mirror.as_ref(),
                    r,
                    services,
                    &mut out,
                );
                continue;
            }
            self.filter(&fp, kind, f, r, &mut out);
            match kind {
                "redirect" | "direct_response" => local_at = Some(i),
                "url_rewrite" => rewrite_at = Some(i),
                _ => {}
            }
        }
        let redirects = r.filters.iter().any(|f| f.redirect.is_some());
        if let (Some(rw), true) = (rewrite_at, redirects) {
            self.err(
                format!("{p}.filters[{rw}].url_rewrite"),
                "url_rewrite and redirect cannot be combined: a redirect sends the client \
                 elsewhere, nothing goes upstream (set the path in redirect.path)",
            );
        }
        (self.errors.len() == before).then(|| Arc::new(out))
    }

    /// The one kind an entry sets, by its field name.
    fn one_kind(&mut self, fp: &str, f: &RawFilter) -> Option<&'static str> {
        let kinds: Vec<&'static str> = [
            ("request_headers", f.request_headers.is_some()),
            ("response_headers", f.response_headers.is_some()),
            ("url_rewrite", f.url_rewrite.is_some()),
            ("redirect", f.redirect.is_some()),
            ("direct_response", f.direct_response.is_some()),
            ("mirror", f.mirror.is_some()),
        ]
        .into_iter()
        .filter(|(_, set)| *set)
        .map(|(k, _)| k)
        .collect();
        match kinds.as_slice() {
            [one] => Some(one),
            [] => {
                self.err(
                    fp,
                    "empty filter: set one of request_headers, response_headers, url_rewrite, \
                     redirect, direct_response, mirror",
                );
                None
            }
            many => {
                self.err(
                    fp,
                    format!(
                        "one kind per filter (found {}): write each as its own list entry",
                        many.join(" and ")
                    ),
                );
                None
            }
        }
    }

    fn filter(
        &mut self,
        fp: &str,
        kind: &str,
        f: &RawFilter,
        r: &RawRoute,
        out: &mut RouteFilters,
    ) {
        let kp = format!("{fp}.{kind}");
        match kind {
            "request_headers" => {
                if let Some(e) = f.request_headers.as_ref() {
                    let e = self.header_edits(&kp, e, Side::Request);
                    out.request.push(RequestStep::Headers(e));
                }
            }
            "response_headers" => {
                if let Some(e) = f.response_headers.as_ref() {
                    let e = self.header_edits(&kp, e, Side::Response);
                    out.response.push(e);
                }
            }
            "url_rewrite" => {
                if let Some(rw) = f
                    .url_rewrite
                    .as_ref()
                    .and_then(|u| self.url_rewrite(&kp, u, r))
                {
                    out.request.push(RequestStep::Rewrite(rw));
                }
            }
            "redirect" => {
                if let Some(rd) = f.redirect.as_ref().and_then(|d| self.redirect(&kp, d, r)) {
                    out.local = Some(Local::Redirect(rd));
                }
            }
            "direct_response" => {
                if let Some(d) = f.direct_response.as_ref().and_then(|d| self.direct(&kp, d)) {
                    out.local = Some(Local::Direct(d));
                }
            }
            _ => {}
        }
    }

    fn header_edits(&mut self, p: &str, e: &RawHeaderEdits, side: Side) -> HeaderEdits {
        let mut out = HeaderEdits::default();
        if e.add.is_empty() && e.set.is_empty() && e.remove.is_empty() {
            self.err(p, "empty: give add, set or remove");
        }
        let mut seen: Vec<(HeaderName, &'static str)> = Vec::new();
        for (op, map, list) in [("set", &e.set, &mut out.set), ("add", &e.add, &mut out.add)] {
            for (name, value) in map {
                let hp = format!("{p}.{op}.{name}");
                let Some(n) = self.edited_name(&hp, name, side, op, &mut seen) else {
                    continue;
                };
                if let Some(t) = self.template(&hp, value, side) {
                    list.push((n, t));
                }
            }
        }
        for (j, name) in e.remove.iter().enumerate() {
            let hp = format!("{p}.remove[{j}]");
            if let Some(n) = self.edited_name(&hp, name, side, "remove", &mut seen) {
                out.remove.push(n);
            }
        }
        out
    }

    /// A header name a filter may edit on `side`, once per block.
    fn edited_name(
        &mut self,
        hp: &str,
        name: &str,
        side: Side,
        op: &'static str,
        seen: &mut Vec<(HeaderName, &'static str)>,
    ) -> Option<HeaderName> {
        let n = self.check(hp, parse_header_name(name))?;
        if let Some(why) = forbidden(&n, side) {
            self.err(hp, format!("{name:?} cannot be edited by a filter: {why}"));
            return None;
        }
        if let Some((_, first)) = seen.iter().find(|(s, _)| *s == n) {
            self.err(
                hp,
                format!("{name:?} is also in {first} (header names ignore case): edit it once"),
            );
            return None;
        }
        seen.push((n.clone(), op));
        Some(n)
    }

    fn template(&mut self, hp: &str, value: &str, side: Side) -> Option<Template> {
        let t = self.check(hp, Template::parse(value))?;
        if side == Side::Response {
            if let Some(v) = t.vars().find(|v| !RESPONSE_VARS.contains(v)) {
                self.err(
                    hp,
                    format!(
                        "${{{}}} is not available in response headers (they may use \
                         ${{route_id}} and ${{scheme}})",
                        v.name()
                    ),
                );
                return None;
            }
        }
        Some(t)
    }

    fn url_rewrite(&mut self, p: &str, u: &RawUrlRewrite, r: &RawRoute) -> Option<UrlRewrite> {
        if u.path.is_none() && u.host.is_none() {
            self.err(p, "empty: give path, host or both");
            return None;
        }
        let path = match &u.path {
            Some(raw) => {
                if grpc_route(r) {
                    self.err(
                        format!("{p}.path"),
                        "a gRPC route's path names the method the backend calls: rewriting it \
                         breaks gRPC (edit headers or the host only)",
                    );
                    None
                } else {
                    Some(self.path_rewrite(&format!("{p}.path"), raw, r, true)?)
                }
            }
            None => None,
        };
        let host = match &u.host {
            Some(h) => Some(self.check(format!("{p}.host"), check_authority(h))?),
            None => None,
        };
        Some(UrlRewrite { path, host })
    }

    /// One of `replace_prefix`, `full` and (when `regex_ok`) `regex` with
    /// `replace`.
    fn path_rewrite(
        &mut self,
        p: &str,
        raw: &RawPathRewrite,
        r: &RawRoute,
        regex_ok: bool,
    ) -> Option<PathRewrite> {
        let set: Vec<&str> = [
            ("replace_prefix", raw.replace_prefix.is_some()),
            ("full", raw.full.is_some()),
            ("regex", raw.regex.is_some()),
        ]
        .into_iter()
        .filter(|(_, s)| *s)
        .map(|(k, _)| k)
        .collect();
        if set.len() != 1 {
            let want = if regex_ok {
                "replace_prefix, full, or regex with replace"
            } else {
                "replace_prefix or full"
            };
            self.err(p, format!("give exactly one of {want}"));
            return None;
        }
        if raw.replace.is_some() && raw.regex.is_none() {
            self.err(format!("{p}.replace"), "only with regex");
            return None;
        }
        if let Some(with) = &raw.replace_prefix {
            let with = self.check(format!("{p}.replace_prefix"), check_path(with))?;
            let Some(prefix) = &r.matches.path_prefix else {
                self.err(
                    format!("{p}.replace_prefix"),
                    "needs the route to match a prefix: set match.path_prefix (or use full or \
                     regex)",
                );
                return None;
            };
            return Some(PathRewrite::replace_prefix(prefix, &with));
        }
        if let Some(full) = &raw.full {
            let full = self.check(format!("{p}.full"), check_path(full))?;
            return Some(PathRewrite::Full(full));
        }
        let re = raw.regex.as_deref().unwrap_or_default();
        if !regex_ok {
            self.err(
                format!("{p}.regex"),
                "a redirect's path takes replace_prefix or full",
            );
            return None;
        }
        let re = self.check(format!("{p}.regex"), compile_regex(re))?;
        let Some(replace) = &raw.replace else {
            self.err(
                format!("{p}.replace"),
                "required with regex, like \"/b/$1\"",
            );
            return None;
        };
        self.check(format!("{p}.replace"), check_captures(&re, replace))?;
        Some(PathRewrite::Regex {
            re,
            replace: replace.clone(),
        })
    }

    fn redirect(&mut self, p: &str, d: &RawRedirect, r: &RawRoute) -> Option<Redirect> {
        let before = self.errors.len();
        let https = match d.scheme.as_deref() {
            None => None,
            Some("https") => Some(true),
            Some("http") => Some(false),
            Some(s) => {
                self.err(
                    format!("{p}.scheme"),
                    format!("{s:?}: expected http or https"),
                );
                None
            }
        };
        let host = d
            .host
            .as_ref()
            .and_then(|h| self.check(format!("{p}.host"), check_host(h)));
        let port = d
            .port
            .as_ref()
            .and_then(|t| self.check(format!("{p}.port"), int_in(t, 1, 65535)))
            .and_then(|n| u16::try_from(n).ok());
        let path = d
            .path
            .as_ref()
            .and_then(|raw| self.path_rewrite(&format!("{p}.path"), raw, r, false));
        let status = match &d.status {
            None => 302,
            Some(t) => self.check(format!("{p}.status"), redirect_status(t))?,
        };
        (self.errors.len() == before).then_some(Redirect {
            https,
            host,
            port,
            path,
            status,
        })
    }

    fn direct(&mut self, p: &str, d: &RawDirectResponse) -> Option<Direct> {
        let before = self.errors.len();
        let status = match &d.status {
            None => 200,
            Some(t) => self
                .check(format!("{p}.status"), int_in(t, 200, 599))
                .and_then(|n| u16::try_from(n).ok())
                .unwrap_or(200),
        };
        let content_type = d.content_type.as_ref().and_then(|c| {
            let v = HeaderValue::from_str(c).ok().filter(|_| !c.is_empty());
            if v.is_none() {
                self.err(
                    format!("{p}.content_type"),
                    format!("invalid content type {c:?}: like \"text/html; charset=utf-8\""),
                );
            }
            v
        });
        if d.body.is_some() && d.body_file.is_some() {
            self.err(format!("{p}.body_file"), "give body or body_file, not both");
        }
        if d.body_file.as_deref() == Some("") {
            self.err(format!("{p}.body_file"), "must not be empty: name a file");
        }
        let body = Bytes::from(d.body.clone().unwrap_or_default());
        (self.errors.len() == before).then(|| Direct {
            status,
            content_type,
            body,
            body_file: d.body_file.clone(),
        })
    }
}

/// Why `n` may not be edited on `side`, if it may not.
fn forbidden(n: &HeaderName, side: Side) -> Option<&'static str> {
    let s = n.as_str();
    if s == "content-length" {
        return Some("the gateway frames bodies itself");
    }
    if HOP_BY_HOP.contains(&s) || s.starts_with("proxy-") {
        return Some("it is hop-by-hop: it describes one connection, not the message");
    }
    if side == Side::Response && GRPC_STATUS.contains(&s) {
        return Some(
            "it carries a gRPC call's outcome (in the head of a trailers-only answer): \
             without it, or changed, gRPC clients fail the call or report a wrong status",
        );
    }
    if side == Side::Request {
        if s == "host" {
            return Some("set the host with url_rewrite.host");
        }
        if GATEWAY_SET.contains(&s) {
            return Some("the gateway sets it on every request it forwards");
        }
    }
    None
}

/// The route only matches gRPC requests (`match.headers.content-type:
/// application/grpc...`).
fn grpc_route(r: &RawRoute) -> bool {
    r.matches.headers.iter().any(|(k, v)| {
        k.eq_ignore_ascii_case("content-type")
            && v.to_ascii_lowercase().starts_with("application/grpc")
    })
}

fn redirect_status(t: &crate::config::raw::Text) -> Result<u16, String> {
    let n = int_in(t, 100, 599)?;
    if REDIRECT_STATUSES.contains(&n) {
        Ok(u16::try_from(n).unwrap_or(302))
    } else {
        Err(format!(
            "{n} is not a redirect status: expected 301, 302, 303, 307 or 308"
        ))
    }
}

/// A host name or address, no port (a redirect's `host`).
fn check_host(h: &str) -> Result<String, String> {
    let a = check_authority(h)?;
    let a = a.to_str().unwrap_or_default();
    let port = a.rfind(':').filter(|&i| !a[i..].contains(']'));
    if port.is_some() {
        return Err(format!("{h:?}: give the port in port, not in host"));
    }
    Ok(a.to_owned())
}

/// A host with an optional port, usable as `Host` and `:authority`.
fn check_authority(h: &str) -> Result<HeaderValue, String> {
    let bad = || {
        format!("invalid host {h:?}: expected a name or address like \"app.internal\" or \"app.internal:8080\"")
    };
    if h.is_empty() || h.contains(['/', '@', '?', '#', ' ']) {
        return Err(bad());
    }
    h.parse::<http::uri::Authority>().map_err(|_| bad())?;
    HeaderValue::from_str(h).map_err(|_| bad())
}

/// Every capture `replace` names exists in `re` (`$1`, `${1}`, `$name`,
/// `${name}`; `$$` is a literal `$`). The regex crate reads the longest
/// run of name characters after `$`, so `$1a` names `1a`: the message says
/// to write `${1}a`.
pub(crate) fn check_captures(re: &regex::Regex, replace: &str) -> Result<(), String> {
    let b = replace.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] != b'$' {
            i += 1;
            continue;
        }
        let rest = &replace[i + 1..];
        let (name, used) = if rest.starts_with('$') {
            i += 2;
            continue;
        } else if let Some(inner) = rest.strip_prefix('{') {
            match inner.find('}') {
                Some(end) => (&inner[..end], end + 2),
                None => {
                    return Err(format!(
                        "{replace:?}: unclosed ${{ (write ${{1}} or ${{name}})"
                    ))
                }
            }
        } else {
            let n = rest
                .bytes()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == b'_')
                .count();
            (&rest[..n], n)
        };
        if name.is_empty() {
            return Err(format!(
                "{replace:?}: '$' starts a capture like $1 or ${{name}}; write $$ for a literal '$'"
            ));
        }
        let exists = match name.parse::<usize>() {
            Ok(n) => n < re.captures_len(),
            Err(_) => re.capture_names().flatten().any(|c| c == name),
        };
        if !exists {
            let hint = if name.bytes().next().is_some_and(|c| c.is_ascii_digit())
                && name.parse::<usize>().is_err()
            {
                " (a name right after a number: write ${1}a, not $1a)"
            } else {
                ""
            };
            return Err(format!(
                "{replace:?} uses capture {name:?}, which the regex does not define (it has {} numbered group(s){}){hint}",
                re.captures_len() - 1,
                named(re)
            ));
        }
        i += 1 + used;
    }
    Ok(())
}

fn named(re: &regex::Regex) -> String {
    let names: Vec<&str> = re.capture_names().flatten().collect();
    if names.is_empty() {
        String::new()
    } else {
        format!(" and names {}", names.join(", "))
    }
}

#[cfg(test)]
mod tests;
