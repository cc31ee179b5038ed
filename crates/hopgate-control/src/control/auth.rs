//! The control plane's side of `routes[].auth`: reading a config's JWKS
//! and htpasswd files when it is applied (a bad file refuses the config
//! like any error, under its field path), and re-reading them when they
//! change on disk (`crate::auth_watch`): keys rotate without a reload, and
//! a bad file keeps the keys in use (counted and remembered as a rejected
//! reload).
//!
//! Owns those entry points on [`Control`]. Must not touch: the keys
//! themselves ([`hopgate_proxy::AuthKeys`] holds and swaps them).

use std::sync::Arc;

use hopgate_core::config::{Config, ConfigError};
use hopgate_proxy::{AuthKeys, AuthMaterial};

use super::{Control, Source};

impl Control {
    /// The keys and users routes check against (the wiring hands them to
    /// the forwarder; the metrics read their counts).
    pub fn auth_keys(&self) -> &Arc<AuthKeys> {
        &self.auth
    }

    /// The JWKS and htpasswd files the running config read (resolved), for
    /// the file watcher.
    pub fn auth_files(&self) -> Vec<std::path::PathBuf> {
        self.auth.files()
    }

    /// Reads `config`'s auth files; relative paths start where TLS paths
    /// do (the config file's directory).
    pub(crate) fn load_auth(&self, config: &Config) -> Result<AuthMaterial, Vec<ConfigError>> {
        let base = self.tls_base.lock().clone();
        AuthMaterial::load(config, &base)
    }

    /// Re-reads the running config's auth files (they changed on disk). A
    /// bad file is a rejected reload: counted, remembered, logged, and the
    /// keys in use stay.
    pub fn reload_auth(&self) -> Result<(), Vec<ConfigError>> {
        let _writer = self.writer.lock();
        let snap = self.snapshot().load_full();
        match self.load_auth(&snap.config) {
            Ok(material) => {
                let (routes, entries) = material.summary();
                self.auth.install(material);
                tracing::info!(
                    routes,
                    keys_and_users = entries,
                    "auth: key and password files re-read"
                );
                Ok(())
            }
            Err(errors) => Err(self.rejected(errors, &Source::AuthFiles.to_string())),
        }
    }
}
