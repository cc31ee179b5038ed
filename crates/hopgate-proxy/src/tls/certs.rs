//! A listener's certificates by name, and the choice of one for a
//! handshake's server name (exact, then wildcard, then the first).
//!
//! Must not touch: reading the files (`load`), the handshake (`server`).

use std::collections::HashMap;
use std::sync::Arc;

use rustls::sign::CertifiedKey;

/// A listener's certificates by name.
#[derive(Debug)]
pub struct CertMap {
    /// Exact names, lower case.
    pub(super) exact: HashMap<String, Arc<CertifiedKey>>,
    /// `*.example.com` kept as `example.com`: matches one more label.
    pub(super) wildcard: HashMap<String, Arc<CertifiedKey>>,
    /// The first certificate: no SNI, or a name no certificate lists.
    pub(super) default: Arc<CertifiedKey>,
}

impl CertMap {
    /// Exact name, then wildcard, then the default.
    pub(super) fn pick(&self, name: Option<&str>) -> &Arc<CertifiedKey> {
        let Some(name) = name else {
            return &self.default;
        };
        let lower;
        let name = if name.bytes().any(|b| b.is_ascii_uppercase()) {
            lower = name.to_ascii_lowercase();
            lower.as_str()
        } else {
            name
        };
        let name = name.strip_suffix('.').unwrap_or(name);
        if let Some(c) = self.exact.get(name) {
            return c;
        }
        if let Some(c) = name
            .split_once('.')
            .and_then(|(_, rest)| self.wildcard.get(rest))
        {
            return c;
        }
        &self.default
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_then_wildcard_then_default() {
        // Three distinct keys stand for three certificates.
        let key = |n: u8| {
            let der = rustls::pki_types::CertificateDer::from(vec![n]);
            Arc::new(CertifiedKey::new(
                vec![der],
                Arc::new(NoKey) as Arc<dyn rustls::sign::SigningKey>,
            ))
        };
        let (a, b, d) = (key(1), key(2), key(3));
        let map = CertMap {
            exact: HashMap::from([("example.com".to_owned(), Arc::clone(&a))]),
            wildcard: HashMap::from([("example.com".to_owned(), Arc::clone(&b))]),
            default: Arc::clone(&d),
        };
        assert!(Arc::ptr_eq(map.pick(Some("example.com")), &a));
        assert!(Arc::ptr_eq(map.pick(Some("EXAMPLE.com.")), &a));
        assert!(Arc::ptr_eq(map.pick(Some("api.example.com")), &b));
        assert!(
            Arc::ptr_eq(map.pick(Some("a.b.example.com")), &d),
            "a wildcard covers one label"
        );
        assert!(Arc::ptr_eq(map.pick(Some("other.org")), &d));
        assert!(Arc::ptr_eq(map.pick(None), &d));
    }

    #[derive(Debug)]
    struct NoKey;
    impl rustls::sign::SigningKey for NoKey {
        fn choose_scheme(
            &self,
            _: &[rustls::SignatureScheme],
        ) -> Option<Box<dyn rustls::sign::Signer>> {
            None
        }
        fn algorithm(&self) -> rustls::SignatureAlgorithm {
            rustls::SignatureAlgorithm::ECDSA
        }
    }
}
