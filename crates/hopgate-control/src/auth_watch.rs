//! Watching the JWKS and htpasswd files of the running config's
//! `routes[].auth` blocks, the way certificate files are watched
//! ([`crate::tls_watch::watch_set`]: inotify on their directories with
//! `sources.file.interval` as the fallback, a change acted on once it
//! holds still), and asking [`Control::reload_auth`] to re-read them: a
//! rotated key is taken at once, a removed one is refused from then on,
//! and a bad file keeps the keys in use.
//!
//! Must not touch: the keys (only through `Control`).

use std::sync::Arc;

use tokio::sync::watch;

use crate::control::Control;
use crate::tls_watch::watch_set;

/// Watches the auth files until `shutdown` turns true. Runs whether or
/// not `sources.file.watch` is on: keys rotate under a fixed config.
pub fn watch_auth_files(
    control: Arc<Control>,
    shutdown: watch::Receiver<bool>,
) -> impl std::future::Future<Output = ()> {
    let reread = |c: &Control| {
        let _ = c.reload_auth();
    };
    watch_set(control, shutdown, Control::auth_files, reread)
}
