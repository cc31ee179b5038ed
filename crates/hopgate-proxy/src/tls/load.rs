//! Reading a config's certificate, key and CA files into what rustls
//! serves and dials with; every problem comes back as a [`ConfigError`]
//! under the field path naming the file.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use hopgate_core::config::{Config, ConfigError, UpstreamProtocol, UpstreamTls};
use rustls::sign::CertifiedKey;
use rustls::{ClientConfig, RootCertStore};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName};

use super::certs::CertMap;
use super::client::{ClientCert, UpstreamConnector};
use super::metrics::Expiry;

/// Everything TLS a config needs, read from its files.
#[derive(Debug)]
pub struct TlsMaterial {
    /// Every listener by name: its certificates, or `None` for plain.
    pub(super) listeners: Vec<(String, Option<Arc<CertMap>>)>,
    /// Every service by name: its connector, or `None` for plain.
    pub(super) services: Vec<(String, Option<Arc<UpstreamConnector>>)>,
    files: Vec<PathBuf>,
    pub(super) expiry: Vec<Expiry>,
}

fn now_unix() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

/// Reads files once per load, remembering their bytes for the
/// fingerprints and their paths for the watcher.
struct Reader<'a> {
    base: &'a Path,
    files: Vec<PathBuf>,
    errors: Vec<ConfigError>,
    now: i64,
}

impl Reader<'_> {
    fn read(&mut self, field: &str, path: &Path) -> Option<Vec<u8>> {
        let full = self.base.join(path);
        self.files.push(full.clone());
        match std::fs::read(&full) {
            Ok(b) => Some(b),
            Err(e) => {
                self.errors.push(ConfigError::new(
                    field,
                    format!("cannot read {}: {e}", full.display()),
                ));
                None
            }
        }
    }

    fn certs(
        &mut self,
        field: &str,
        path: &Path,
    ) -> Option<(Vec<CertificateDer<'static>>, Vec<u8>)> {
        let bytes = self.read(field, path)?;
        let certs: Result<Vec<_>, _> = CertificateDer::pem_slice_iter(&bytes).collect();
        match certs {
            Ok(c) if !c.is_empty() => Some((c, bytes)),
            Ok(_) => {
                self.err(
                    field,
                    format!("{}: no PEM CERTIFICATE block in the file", path.display()),
                );
                None
            }
            Err(e) => {
                self.err(
                    field,
                    format!("{}: not a PEM certificate file: {e}", path.display()),
                );
                None
            }
        }
    }

    fn key(&mut self, field: &str, path: &Path) -> Option<(PrivateKeyDer<'static>, Vec<u8>)> {
        let bytes = self.read(field, path)?;
        match PrivateKeyDer::from_pem_slice(&bytes) {
            Ok(k) => Some((k, bytes)),
            Err(e) => {
                self.err(
                    field,
                    format!(
                        "{}: no PEM private key (PKCS#8, PKCS#1 or SEC1) in the file: {e}",
                        path.display()
                    ),
                );
                None
            }
        }
    }

    fn err(&mut self, field: &str, message: String) {
        self.errors.push(ConfigError::new(field, message));
    }

    /// The end-entity certificate's notAfter (Unix seconds), or an error
    /// when it cannot be parsed or has expired.
    fn not_after(&mut self, field: &str, path: &Path, cert: &CertificateDer<'_>) -> Option<i64> {
        match x509_parser::parse_x509_certificate(cert) {
            Ok((_, x)) => {
                let not_after = x.validity().not_after;
                let t = not_after.timestamp();
                if t < self.now {
                    self.err(
                        field,
                        format!("{}: the certificate expired on {not_after}", path.display()),
                    );
                    return None;
                }
                Some(t)
            }
            Err(e) => {
                self.err(
                    field,
                    format!("{}: not an X.509 certificate: {e}", path.display()),
                );
                None
            }
        }
    }

    /// A chain and its key, checked to belong together and not expired.
    fn pair(
        &mut self,
        cert_field: &str,
        cert_path: &Path,
        key_field: &str,
        key_path: &Path,
        hasher: &mut impl Hasher,
    ) -> Option<(CertifiedKey, i64)> {
        let chain = self.certs(cert_field, cert_path);
        let key = self.key(key_field, key_path);
        let ((chain, cert_bytes), (key, key_bytes)) = (chain?, key?);
        cert_bytes.hash(hasher);
        key_bytes.hash(hasher);
        let not_after = self.not_after(cert_field, cert_path, &chain[0])?;
        match CertifiedKey::from_der(chain, key, &super::provider()) {
            Ok(ck) => Some((ck, not_after)),
            Err(rustls::Error::InconsistentKeys(_)) => {
                self.err(
                    key_field,
                    format!(
                        "{}: the key does not match the certificate in {}",
                        key_path.display(),
                        cert_path.display()
                    ),
                );
                None
            }
            Err(e) => {
                self.err(
                    key_field,
                    format!("{}: unusable private key: {e}", key_path.display()),
                );
                None
            }
        }
    }
}

impl TlsMaterial {
    /// Reads every file the config's `tls` blocks name, relative to
    /// `base` (the config file's directory). All problems are reported.
    pub fn load(cfg: &Config, base: &Path) -> Result<TlsMaterial, Vec<ConfigError>> {
        let mut r = Reader {
            base,
            files: Vec::new(),
            errors: Vec::new(),
            now: now_unix(),
        };
        let mut expiry = Vec::new();
        let mut listeners = Vec::with_capacity(cfg.listeners.len());
        for (i, l) in cfg.listeners.iter().enumerate() {
            let Some(tls) = &l.tls else {
                listeners.push((l.name.clone(), None));
                continue;
            };
            let mut exact = HashMap::new();
            let mut wildcard = HashMap::new();
            let mut default = None;
            for (j, c) in tls.certificates.iter().enumerate() {
                let p = format!("listeners[{i}].tls.certificates[{j}]");
                let mut h = std::hash::DefaultHasher::new();
                let Some((ck, not_after)) = r.pair(
                    &format!("{p}.cert"),
                    &c.cert,
                    &format!("{p}.key"),
                    &c.key,
                    &mut h,
                ) else {
                    continue;
                };
                expiry.push(Expiry {
                    scope: "listener",
                    owner: l.name.clone(),
                    index: j,
                    not_after,
                });
                let ck = Arc::new(ck);
                for name in &c.sni {
                    match name.strip_prefix("*.") {
                        Some(rest) => wildcard.insert(rest.to_owned(), Arc::clone(&ck)),
                        None => exact.insert(name.clone(), Arc::clone(&ck)),
                    };
                }
                default.get_or_insert(ck);
            }
            let map = default.map(|default| {
                Arc::new(CertMap {
                    exact,
                    wildcard,
                    default,
                })
            });
            listeners.push((l.name.clone(), map));
        }
        let mut services = Vec::with_capacity(cfg.services.len());
        for (i, s) in cfg.services.iter().enumerate() {
            let connector = s.tls.as_ref().and_then(|t| {
                connector(
                    &mut r,
                    &format!("services[{i}].tls"),
                    t,
                    s.protocol,
                    &s.name,
                    &mut expiry,
                )
            });
            services.push((s.name.clone(), connector.map(Arc::new)));
        }
        if !r.errors.is_empty() {
            return Err(r.errors);
        }
        let mut files = r.files;
        files.sort();
        files.dedup();
        Ok(TlsMaterial {
            listeners,
            services,
            files,
            expiry,
        })
    }

    /// The files read, resolved, for the watcher.
    pub fn files(&self) -> &[PathBuf] {
        &self.files
    }
}

fn connector(
    r: &mut Reader<'_>,
    p: &str,
    t: &UpstreamTls,
    protocol: UpstreamProtocol,
    service: &str,
    expiry: &mut Vec<Expiry>,
) -> Option<UpstreamConnector> {
    let mut h = std::hash::DefaultHasher::new();
    t.server_name.hash(&mut h);
    let mut roots = RootCertStore::empty();
    match &t.ca {
        Some(ca) => {
            let field = format!("{p}.ca");
            let (certs, bytes) = r.certs(&field, ca)?;
            bytes.hash(&mut h);
            let (added, _) = roots.add_parsable_certificates(certs);
            if added == 0 {
                r.err(
                    &field,
                    format!("{}: no usable CA certificate in the file", ca.display()),
                );
                return None;
            }
        }
        None => {
            let found = rustls_native_certs::load_native_certs();
            let (added, _) = roots.add_parsable_certificates(found.certs);
            if added == 0 {
                r.err(
                    &format!("{p}.ca"),
                    "no ca given and no system root certificates found (install ca-certificates, or give a ca file)".to_owned(),
                );
                return None;
            }
        }
    }
    let builder = match ClientConfig::builder_with_provider(super::provider())
        .with_safe_default_protocol_versions()
    {
        Ok(b) => b.with_root_certificates(roots),
        Err(e) => {
            r.err(p, format!("cannot build a TLS client: {e}"));
            return None;
        }
    };
    let mut config = match &t.client_auth {
        None => builder.with_no_client_auth(),
        Some((cert, key)) => {
            let (cf, kf) = (format!("{p}.client_cert"), format!("{p}.client_key"));
            let (ck, not_after) = r.pair(&cf, cert, &kf, key, &mut h)?;
            expiry.push(Expiry {
                scope: "service",
                owner: service.to_owned(),
                index: 0,
                not_after,
            });
            builder.with_client_cert_resolver(Arc::new(ClientCert(Arc::new(ck))))
        }
    };
    config.alpn_protocols = match protocol {
        UpstreamProtocol::Http1 => vec![b"http/1.1".to_vec()],
        UpstreamProtocol::Http2 => vec![b"h2".to_vec()],
    };
    (protocol == UpstreamProtocol::Http2).hash(&mut h);
    let server_name = match &t.server_name {
        None => None,
        Some(n) => match ServerName::try_from(n.clone()) {
            Ok(sn) => Some(sn),
            Err(e) => {
                r.err(&format!("{p}.server_name"), format!("{n:?}: {e}"));
                return None;
            }
        },
    };
    Some(UpstreamConnector::new(
        Arc::new(config),
        server_name,
        h.finish(),
    ))
}

impl TlsMaterial {
    /// Gives each node of `snap` its service's connector (or none), and
    /// each listener in `listeners` its certificates. Called before the
    /// snapshot goes in, so no request dials a node with the old setting.
    pub fn install(&self, listeners: &super::TlsListeners, snap: &crate::Snapshot) {
        self.install_upstreams(snap);
        listeners.install(&self.listeners, self.expiry.clone());
    }

    /// The upstream half of [`TlsMaterial::install`]: each node's pool
    /// gets its service's connector (a config canary's snapshot takes only
    /// this; the listeners keep the running config's certificates).
    pub fn install_upstreams(&self, snap: &crate::Snapshot) {
        for svc in &snap.services {
            let connector = self
                .services
                .iter()
                .find(|(name, _)| *name == svc.name)
                .and_then(|(_, c)| c.clone());
            for n in &svc.nodes {
                match &connector {
                    Some(c) => n
                        .upstream
                        .pool(svc.pool.max_idle)
                        .set_tls(Some(Arc::clone(c))),
                    None => {
                        if let Some(pool) = n.upstream.pool_if_set() {
                            pool.set_tls(None);
                        }
                    }
                }
            }
        }
    }
}
