//! Reading a config's JWKS and htpasswd files into the keys and users its
//! routes check against; every problem (a file missing or unreadable, a
//! malformed JWKS, an unknown algorithm, an htpasswd line that is not
//! bcrypt) is a [`ConfigError`] under the field path naming the file
//! (`routes[2].auth.jwt.jwks_file`), so a bad file refuses the config or,
//! when it changed on disk, keeps the keys in use.
//!
//! Routes whose keys come from a service (`auth.jwt.jwks`) and forward
//! auth routes read no file: they get an empty key set to fetch, or an
//! empty decision cache (kept from the running config by
//! [`super::AuthKeys::install`] when their block did not change).
//!
//! Owns [`AuthMaterial`]. Must not touch: the running keys (installed by
//! [`super::AuthKeys::install`]).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use std::sync::Arc;

use hopgate_core::config::auth::{AuthKind, JwksSource};
use hopgate_core::config::{Config, ConfigError};

use super::basic::Htpasswd;
use super::fetch::Fetched;
use super::forward::Decisions;
use super::jwt::Jwks;
use super::{file_error, Keys};

/// A config's auth files, read: by route id, the file as configured and
/// what it holds.
pub struct AuthMaterial {
    routes: HashMap<String, (PathBuf, Keys)>,
    files: Vec<PathBuf>,
}

impl std::fmt::Debug for AuthMaterial {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuthMaterial")
            .field("files", &self.files)
            .finish_non_exhaustive()
    }
}

impl AuthMaterial {
    /// Reads every file `config`'s routes name; relative paths start at
    /// `base` (the config file's directory).
    pub fn load(config: &Config, base: &Path) -> Result<AuthMaterial, Vec<ConfigError>> {
        let mut routes = HashMap::new();
        let mut files = Vec::new();
        let mut errors = Vec::new();
        for (i, r) in config.routes.iter().enumerate() {
            let Some(auth) = &r.auth else { continue };
            let (field, path) = match &auth.kind {
                AuthKind::Jwt(j) => match &j.keys {
                    JwksSource::File(f) => (format!("routes[{i}].auth.jwt.jwks_file"), f),
                    JwksSource::Service(s) => {
                        let keys = Keys::Fetched(Arc::new(Fetched::new(s.clone())));
                        routes.insert(r.id.clone(), (PathBuf::new(), keys));
                        continue;
                    }
                },
                AuthKind::Basic { htpasswd } => {
                    (format!("routes[{i}].auth.basic.htpasswd"), htpasswd)
                }
                AuthKind::Forward(f) => {
                    let keys = Keys::Forward(Arc::new(Decisions::new(f.clone())));
                    routes.insert(r.id.clone(), (PathBuf::new(), keys));
                    continue;
                }
            };
            let full = base.join(path);
            files.push(full.clone());
            let text = match std::fs::read(&full) {
                Ok(t) => t,
                Err(e) => {
                    errors.push(file_error(&field, &full, format!("cannot read: {e}")));
                    continue;
                }
            };
            let keys = match &auth.kind {
                AuthKind::Basic { .. } => Htpasswd::parse(&text).map(Keys::Basic),
                _ => Jwks::parse(&text).map(Keys::Jwt),
            };
            match keys {
                Ok(k) => {
                    routes.insert(r.id.clone(), (path.clone(), k));
                }
                Err(m) => errors.push(file_error(&field, &full, m)),
            }
        }
        files.sort();
        files.dedup();
        if errors.is_empty() {
            Ok(AuthMaterial { routes, files })
        } else {
            Err(errors)
        }
    }

    /// The files read (resolved), for the file watcher.
    pub fn files(&self) -> &[PathBuf] {
        &self.files
    }

    /// How many routes check credentials, and their keys and users in
    /// all (for the log line of a re-read).
    pub fn summary(&self) -> (usize, usize) {
        let entries = self
            .routes
            .values()
            .map(|(_, k)| match k {
                Keys::Jwt(j) => j.len(),
                Keys::Fetched(f) => f.len(),
                Keys::Basic(u) => u.len(),
                Keys::Forward(_) => 0,
            })
            .sum();
        (self.routes.len(), entries)
    }

    #[cfg(test)]
    pub(super) fn from_parts(
        routes: HashMap<String, (PathBuf, Keys)>,
        files: Vec<PathBuf>,
    ) -> AuthMaterial {
        AuthMaterial { routes, files }
    }

    pub(super) fn into_parts(self) -> (HashMap<String, (PathBuf, Keys)>, Vec<PathBuf>) {
        (self.routes, self.files)
    }
}
