//! Reading a config's JWKS and htpasswd files into the keys and users its
//! routes check against; every problem (a file missing or unreadable, a
//! malformed JWKS, an unknown algorithm, an htpasswd line that is not
//! bcrypt) is a [`ConfigError`] under the field path naming the file
//! (`routes[2].auth.jwt.jwks_file`), so a bad file refuses the config or,
//! when it changed on disk, keeps the keys in use.
//!
//! Owns [`AuthMaterial`]. Must not touch: the running keys (installed by
//! [`super::AuthKeys::install`]).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use hopgate_core::config::auth::AuthKind;
use hopgate_core::config::{Config, ConfigError};

use super::basic::Htpasswd;
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
                AuthKind::Jwt(j) => (format!("routes[{i}].auth.jwt.jwks_file"), &j.jwks_file),
                AuthKind::Basic { htpasswd } => {
                    (format!("routes[{i}].auth.basic.htpasswd"), htpasswd)
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
                AuthKind::Jwt(_) => Jwks::parse(&text).map(Keys::Jwt),
                AuthKind::Basic { .. } => Htpasswd::parse(&text).map(Keys::Basic),
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
                Keys::Basic(u) => u.len(),
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
