//! `routes[].auth`: its shape, names and values (`forward` and a JWKS
//! fetched from a service in `forward_auth`). Reading the JWKS and
//! htpasswd files (a file missing, unreadable or malformed) is the data
//! plane's (`hopgate_proxy::auth`), which reports under the same field
//! paths when a config is applied.
//!
//! Must not touch: I/O.

use std::path::PathBuf;
use std::sync::Arc;

use http::HeaderName;

use super::values::parse_header_name;
use super::Validator;
use crate::config::auth::{AuthKind, JwksSource, JwtAuth, RouteAuth, DEFAULT_CLOCK_SKEW};
use crate::config::raw::{RawAuth, RawBasicAuth, RawJwtAuth};

/// The config's services by name (the first of a name), for the auth
/// blocks that name one (`forward_auth`).
pub(super) type Services<'a> = std::collections::HashMap<&'a str, usize>;

/// The longest `clock_skew` accepted: past it `exp` means little.
const MAX_CLOCK_SKEW: std::time::Duration = std::time::Duration::from_secs(600);

/// Headers a claim may not be copied into: hop-by-hop ones (removed on
/// the way), and the ones that frame or route the request.
pub(super) const RESERVED: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "host",
    "content-length",
    "authorization",
];

impl Validator {
    /// `p` is the route's path (`routes[2]`), `id` its id (the default
    /// realm), `services` the config's services by name.
    pub(super) fn route_auth(
        &mut self,
        p: &str,
        id: &str,
        raw: &RawAuth,
        services: &Services<'_>,
    ) -> Option<Arc<RouteAuth>> {
        let p = format!("{p}.auth");
        let set = [
            raw.jwt.as_ref().map(|_| "jwt"),
            raw.basic.as_ref().map(|_| "basic"),
            raw.forward.as_ref().map(|_| "forward"),
        ];
        let set: Vec<&str> = set.into_iter().flatten().collect();
        if set.len() > 1 {
            self.err(
                p.clone(),
                format!(
                    "set one of jwt, basic and forward, not {}: a route checks one kind of credential",
                    set.join(" and ")
                ),
            );
            return None;
        }
        let auth = match (&raw.jwt, &raw.basic, &raw.forward) {
            (Some(j), _, _) => self.jwt_auth(&format!("{p}.jwt"), id, j, services),
            (_, Some(b), _) => self.basic_auth(&format!("{p}.basic"), id, b),
            (_, _, Some(f)) => self.forward_auth(&format!("{p}.forward"), id, f, services),
            (None, None, None) => {
                self.err(p, "empty: set jwt, basic or forward (or remove auth)");
                return None;
            }
        };
        Some(Arc::new(auth))
    }

    fn jwt_auth(
        &mut self,
        p: &str,
        id: &str,
        raw: &RawJwtAuth,
        services: &Services<'_>,
    ) -> RouteAuth {
        let keys = match &raw.jwks {
            Some(_) if !raw.jwks_file.is_empty() => {
                self.err(
                    format!("{p}.jwks"),
                    "set one of jwks_file and jwks, not both: the keys come from one place",
                );
                JwksSource::File(PathBuf::new())
            }
            Some(j) => JwksSource::Service(self.jwks_service(&format!("{p}.jwks"), j, services)),
            None => JwksSource::File(self.auth_file(
                &format!("{p}.jwks_file"),
                &raw.jwks_file,
                "a JWKS file (or jwks: { service, path } to fetch the keys)",
            )),
        };
        if raw.issuer.as_deref().is_some_and(str::is_empty) {
            self.err(
                format!("{p}.issuer"),
                "must not be empty (remove it to accept any issuer)",
            );
        }
        let audiences = raw.audiences.clone().unwrap_or_default();
        if raw.audiences.as_ref().is_some_and(Vec::is_empty) {
            self.err(
                format!("{p}.audiences"),
                "must name at least one audience (remove it to accept any)",
            );
        }
        for (i, a) in audiences.iter().enumerate() {
            if a.is_empty() {
                self.err(format!("{p}.audiences[{i}]"), "must not be empty");
            }
        }
        let clock_skew = match &raw.clock_skew {
            None => DEFAULT_CLOCK_SKEW,
            Some(t) => self
                .check(format!("{p}.clock_skew"), skew(t))
                .unwrap_or(DEFAULT_CLOCK_SKEW),
        };
        let mut claims_to_headers = Vec::with_capacity(raw.claims_to_headers.len());
        for (claim, header) in &raw.claims_to_headers {
            let hp = format!("{p}.claims_to_headers.{claim}");
            if claim.is_empty() {
                self.err(hp.clone(), "the claim name must not be empty");
            }
            if let Some(h) = self.check(hp, claim_target(header)) {
                claims_to_headers.push((claim.clone(), h));
            }
        }
        let mut strip: Vec<HeaderName> = claims_to_headers.iter().map(|(_, h)| h.clone()).collect();
        strip.dedup();
        RouteAuth {
            kind: AuthKind::Jwt(JwtAuth {
                keys,
                issuer: raw.issuer.clone(),
                audiences,
                clock_skew,
                claims_to_headers,
            }),
            realm: self.realm(p, id, raw.realm.as_deref()),
            remove_authorization: raw.remove_authorization.unwrap_or(false),
            strip,
        }
    }

    fn basic_auth(&mut self, p: &str, id: &str, raw: &RawBasicAuth) -> RouteAuth {
        let htpasswd = self.auth_file(&format!("{p}.htpasswd"), &raw.htpasswd, "an htpasswd file");
        RouteAuth {
            kind: AuthKind::Basic { htpasswd },
            realm: self.realm(p, id, raw.realm.as_deref()),
            remove_authorization: raw.remove_authorization.unwrap_or(false),
            strip: Vec::new(),
        }
    }

    fn auth_file(&mut self, p: &str, s: &str, what: &str) -> PathBuf {
        if s.trim().is_empty() {
            self.err(
                p,
                format!("required: {what} path (relative to the config file's directory)"),
            );
        }
        PathBuf::from(s)
    }

    /// The challenge's realm: printable ASCII without quotes or
    /// backslashes (it goes between quotes in a header).
    fn realm(&mut self, p: &str, id: &str, realm: Option<&str>) -> String {
        let Some(r) = realm else {
            return id.to_owned();
        };
        if r.is_empty()
            || !r
                .bytes()
                .all(|b| (0x20..0x7f).contains(&b) && b != b'"' && b != b'\\')
        {
            self.err(
                format!("{p}.realm"),
                format!("{r:?}: a realm is printable ASCII without quotes or backslashes"),
            );
        }
        r.to_owned()
    }
}

fn skew(t: &crate::config::raw::Text) -> Result<std::time::Duration, String> {
    let d = crate::units::parse_duration(&t.0)?;
    if d > MAX_CLOCK_SKEW {
        return Err(format!("clock skew {:?} is too long: at most 10m", t.0));
    }
    Ok(d)
}

/// A header a claim may be copied into.
pub(super) fn claim_target(header: &str) -> Result<HeaderName, String> {
    let h = parse_header_name(header)?;
    if RESERVED.contains(&h.as_str()) {
        return Err(format!(
            "{header:?} cannot carry a claim: it is hop-by-hop or frames the request"
        ));
    }
    Ok(h)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claim_targets() {
        assert_eq!(claim_target("X-User").unwrap(), "x-user");
        assert!(claim_target("Connection").is_err());
        assert!(claim_target("transfer-encoding").is_err());
        assert!(claim_target("bad header").is_err());
        assert!(claim_target("").is_err());
    }

    #[test]
    fn skews() {
        assert_eq!(
            skew(&crate::config::raw::Text("0s".into()))
                .unwrap()
                .as_secs(),
            0
        );
        assert!(skew(&crate::config::raw::Text("1h".into())).is_err());
        assert!(skew(&crate::config::raw::Text("abc".into())).is_err());
    }
}
