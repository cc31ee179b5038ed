//! The process's file-descriptor budget.
//!
//! Owns raising `RLIMIT_NOFILE` to its hard limit at start (as nginx's
//! `worker_rlimit_nofile` and HAProxy do: the default soft limit of 1024
//! would let a few hundred idle clients starve upstream connects with
//! EMFILE) and the check that every listener's `limits.max_connections`
//! fits in what the process may open. Must not touch: sockets.

use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};

/// File descriptors kept for everything that is not a client connection:
/// the admin API, upstream connections of requests in flight beyond the
/// pools, health checks, logs, the config and session files.
pub(crate) const RESERVED_FDS: u64 = 256;

/// Raises the soft `RLIMIT_NOFILE` to the hard limit; the soft limit in
/// force afterwards (`None` when unlimited).
pub(crate) fn raise_nofile() -> Option<u64> {
    let lim = getrlimit(Resource::Nofile);
    if lim.current != lim.maximum {
        let raised = Rlimit {
            current: lim.maximum,
            maximum: lim.maximum,
        };
        match setrlimit(Resource::Nofile, raised) {
            Ok(()) => {
                tracing::debug!(from = ?lim.current, to = ?lim.maximum, "raised RLIMIT_NOFILE")
            }
            Err(e) => tracing::warn!(error = %e, "cannot raise RLIMIT_NOFILE to its hard limit"),
        }
    }
    getrlimit(Resource::Nofile).current
}

/// Whether `listeners` listeners of `max_connections` each fit in `limit`
/// descriptors with [`RESERVED_FDS`] to spare; the error names the field.
pub(crate) fn check_fits(
    listeners: usize,
    max_connections: usize,
    limit: Option<u64>,
) -> Result<(), String> {
    let Some(limit) = limit else { return Ok(()) };
    let need = (listeners as u64)
        .saturating_mul(max_connections as u64)
        .saturating_add(RESERVED_FDS);
    if need > limit {
        return Err(format!(
            "limits.max_connections: {max_connections} per listener × {listeners} listener(s) + {RESERVED_FDS} reserved = {need} file descriptors, above this process's limit of {limit} (RLIMIT_NOFILE hard limit; raise it with `ulimit -Hn` / systemd LimitNOFILE=, or lower limits.max_connections)"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn max_connections_must_fit_in_the_descriptor_limit() {
        assert!(check_fits(1, 10_000, Some(20_000)).is_ok());
        assert!(check_fits(1, 10_000, None).is_ok());
        let e = check_fits(2, 10_000, Some(20_000)).unwrap_err();
        assert!(e.starts_with("limits.max_connections:"), "{e}");
        assert!(check_fits(1, 1_000, Some(1_024)).is_err());
    }
}
