//! The files route filters name: a `direct_response.body_file`, read when
//! a config is loaded (start, every reload, a canary, `hopgate validate`)
//! into the route's compiled program, so the request path never touches a
//! file. A relative path is taken from the config file's directory. A file
//! that cannot be read, or is larger than [`MAX_BODY_FILE`], refuses the
//! config with the field path.
//!
//! Must not touch: anything else of the config.

use std::path::Path;
use std::sync::Arc;

use hopgate_core::config::{Config, ConfigError};

/// The largest `body_file` (a maintenance page, not a download).
pub(crate) const MAX_BODY_FILE: u64 = 1024 * 1024;

/// `config` with every `body_file` read, relative to `base`.
pub fn read_filter_bodies(mut config: Config, base: &Path) -> Result<Config, Vec<ConfigError>> {
    let mut errors = Vec::new();
    for (i, route) in config.routes.iter_mut().enumerate() {
        let Some(f) = route.filters.as_ref() else {
            continue;
        };
        let Some(file) = f.body_file() else {
            continue;
        };
        match read(&base.join(file)) {
            Ok(body) => route.filters = Some(Arc::new(f.with_body(body.into()))),
            Err(why) => errors.push(ConfigError::new(
                format!(
                    "routes[{i}].filters[{}].direct_response.body_file",
                    local_at(&config.raw.routes[i])
                ),
                format!("cannot read {file:?}: {why}"),
            )),
        }
    }
    if errors.is_empty() {
        Ok(config)
    } else {
        Err(errors)
    }
}

/// Whether a `body_file` read into `new` answers other bytes than the
/// same route of `running`: an unchanged document offered again (a SIGHUP
/// after the page was edited) is then applied anew, as its certificates
/// are re-read.
pub fn filter_bodies_differ(running: &Config, new: &Config) -> bool {
    let body = |r: &hopgate_core::config::RouteConfig| {
        r.filters
            .as_ref()
            .filter(|f| f.body_file().is_some())
            .and_then(|f| f.direct_body().cloned())
    };
    running.routes.len() != new.routes.len()
        || running
            .routes
            .iter()
            .zip(&new.routes)
            .any(|(a, b)| body(a) != body(b))
}

/// The index of the route's direct response among its filters.
fn local_at(r: &hopgate_core::config::raw::RawRoute) -> usize {
    r.filters
        .iter()
        .position(|f| f.direct_response.is_some())
        .unwrap_or_default()
}

fn read(path: &Path) -> Result<Vec<u8>, String> {
    let meta = std::fs::metadata(path).map_err(|e| e.to_string())?;
    if !meta.is_file() {
        return Err("not a file".to_owned());
    }
    if meta.len() > MAX_BODY_FILE {
        return Err(format!(
            "{} bytes, more than the {MAX_BODY_FILE}-byte limit",
            meta.len()
        ));
    }
    std::fs::read(path).map_err(|e| e.to_string())
}
