//! Stage two: check a [`RawConfig`] and produce the typed [`Config`].
//!
//! Being written; see the module docs of `config`.

use super::{Config, ConfigError, RawConfig};

/// Validates a raw document, returning every problem found, each with its
/// field path.
pub fn validate(_raw: &RawConfig) -> Result<Config, Vec<ConfigError>> {
    Err(vec![ConfigError::new("", "validation not built yet")])
}
