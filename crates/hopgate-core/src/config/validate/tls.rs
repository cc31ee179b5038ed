//! The `tls` blocks of listeners and services: their shape only (names,
//! required fields, pairs). Reading the certificate and key files, and
//! checking that they match and have not expired, is the data plane's
//! (`hopgate_proxy::tls`), which reports under the same field paths.

use std::collections::HashMap;
use std::net::IpAddr;
use std::path::PathBuf;

use super::Validator;
use crate::config::raw::{RawListenerTls, RawUpstreamTls};
use crate::config::tls::{CertificateConfig, ListenerTls, UpstreamTls};

/// A DNS name as a certificate or SNI carries it: dot-separated labels of
/// letters, digits and hyphens, none starting or ending with a hyphen.
fn check_dns_name(name: &str) -> Result<(), String> {
    let ok_label = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && !l.starts_with('-')
            && !l.ends_with('-')
            && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
    };
    if name.is_empty() || name.len() > 253 || !name.split('.').all(ok_label) {
        return Err(format!(
            "{name:?} is not a DNS name (labels of letters, digits and hyphens, like api.example.com)"
        ));
    }
    Ok(())
}

/// An `sni` entry: a DNS name, or `*.` and a DNS name of two labels or more.
fn check_sni(name: &str) -> Result<String, String> {
    let lower = name.to_ascii_lowercase();
    match lower.strip_prefix("*.") {
        Some(rest) => {
            check_dns_name(rest)
                .map_err(|_| format!("{name:?} is not a wildcard name like \"*.example.com\""))?;
            if !rest.contains('.') {
                return Err(format!(
                    "{name:?}: a wildcard needs at least two labels after \"*.\" (like \"*.example.com\")"
                ));
            }
        }
        None => check_dns_name(&lower)?,
    }
    Ok(lower)
}

fn path_of(v: &mut Validator, p: String, s: &str) -> PathBuf {
    if s.trim().is_empty() {
        v.err(
            p,
            "required: a PEM file path (relative to the config file's directory)",
        );
    }
    PathBuf::from(s)
}

impl Validator {
    pub(super) fn listener_tls(&mut self, p: &str, raw: &RawListenerTls) -> ListenerTls {
        if raw.certificates.is_empty() {
            self.err(
                format!("{p}.certificates"),
                "at least one certificate is required, like [ { cert: site.pem, key: site.key } ]",
            );
        }
        let mut seen: HashMap<String, (usize, usize)> = HashMap::new();
        let mut certificates = Vec::with_capacity(raw.certificates.len());
        for (i, c) in raw.certificates.iter().enumerate() {
            let cp = format!("{p}.certificates[{i}]");
            let cert = path_of(self, format!("{cp}.cert"), &c.cert);
            let key = path_of(self, format!("{cp}.key"), &c.key);
            let mut sni = Vec::with_capacity(c.sni.len());
            for (j, name) in c.sni.iter().enumerate() {
                let Some(lower) = self.check(format!("{cp}.sni[{j}]"), check_sni(name)) else {
                    continue;
                };
                if let Some((ci, cj)) = seen.get(&lower) {
                    self.err(
                        format!("{cp}.sni[{j}]"),
                        format!("{name:?} is already served by certificates[{ci}].sni[{cj}]"),
                    );
                    continue;
                }
                seen.insert(lower.clone(), (i, j));
                sni.push(lower);
            }
            certificates.push(CertificateConfig { cert, key, sni });
        }
        ListenerTls { certificates }
    }

    pub(super) fn upstream_tls(&mut self, p: &str, raw: &RawUpstreamTls) -> UpstreamTls {
        let ca = raw
            .ca
            .as_deref()
            .map(|c| path_of(self, format!("{p}.ca"), c));
        let server_name = raw.server_name.as_ref().and_then(|n| {
            let ok = n.parse::<IpAddr>().is_ok() || check_dns_name(n).is_ok();
            if ok {
                Some(n.to_ascii_lowercase())
            } else {
                self.err(
                    format!("{p}.server_name"),
                    format!("{n:?} is neither a DNS name (like api.internal) nor an IP address"),
                );
                None
            }
        });
        let client_auth = match (&raw.client_cert, &raw.client_key) {
            (None, None) => None,
            (Some(c), Some(k)) => Some((
                path_of(self, format!("{p}.client_cert"), c),
                path_of(self, format!("{p}.client_key"), k),
            )),
            (Some(_), None) => {
                self.err(
                    format!("{p}.client_key"),
                    "required with client_cert: the client certificate's private key (PEM)",
                );
                None
            }
            (None, Some(_)) => {
                self.err(
                    format!("{p}.client_cert"),
                    "required with client_key: the client certificate chain (PEM)",
                );
                None
            }
        };
        UpstreamTls {
            ca,
            server_name,
            client_auth,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sni_names_and_wildcards() {
        assert_eq!(check_sni("Example.COM").unwrap(), "example.com");
        assert_eq!(check_sni("*.example.com").unwrap(), "*.example.com");
        assert!(check_sni("*.com").is_err());
        assert!(check_sni("a.*.example.com").is_err());
        assert!(check_sni("exa mple.com").is_err());
        assert!(check_sni("-bad.example.com").is_err());
        assert!(check_sni("").is_err());
        assert!(check_sni("example..com").is_err());
    }
}
