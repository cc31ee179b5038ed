//! systemd's readiness protocol (`sd_notify`): one datagram of
//! `KEY=value` lines to the socket named by `NOTIFY_SOCKET` (a path, or an
//! abstract name starting with `@`). Without the variable, nothing is sent.
//!
//! Must not touch: anything else of systemd (socket activation is in
//! [`crate::listenfd`]).

use std::os::unix::net::UnixDatagram;

/// Sends `state` (e.g. `READY=1`); false when there is no notify socket or
/// the datagram could not be sent (logged).
pub(crate) fn notify(state: &str) -> bool {
    let Some(target) = std::env::var_os("NOTIFY_SOCKET") else {
        return false;
    };
    let sent = UnixDatagram::unbound().and_then(|sock| {
        let bytes = std::os::unix::ffi::OsStrExt::as_bytes(target.as_os_str());
        match bytes.strip_prefix(b"@") {
            Some(name) => {
                use std::os::linux::net::SocketAddrExt;
                let addr = std::os::unix::net::SocketAddr::from_abstract_name(name)?;
                sock.send_to_addr(state.as_bytes(), &addr)
            }
            None => sock.send_to(state.as_bytes(), &target),
        }
    });
    match sent {
        Ok(_) => true,
        Err(e) => {
            tracing::warn!(socket = ?target, error = %e, state, "sd_notify failed");
            false
        }
    }
}
