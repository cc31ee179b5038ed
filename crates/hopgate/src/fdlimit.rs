//! The process's file-descriptor budget.
//!
//! Owns raising `RLIMIT_NOFILE` to its hard limit at start (as nginx's
//! `worker_rlimit_nofile` and HAProxy do: the default soft limit of 1024
//! would let a few hundred idle clients starve upstream connects with
//! EMFILE), the per-listener `limits.max_connections` in force (the
//! configured one, which must fit in what the process may open, or one
//! derived from the limit when the config sets none) and the start-up log
//! line that says which. Must not touch: sockets.

use hopgate_core::config::{check_fd_fit, derive_max_connections, Limits, RESERVED_FDS};
use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};

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

/// The file-descriptor budget the process started with: the soft
/// `RLIMIT_NOFILE` after [`raise_nofile`] (`None`: unlimited). Read once
/// at start; reloads derive from the same figure.
#[derive(Clone, Copy, Debug)]
pub(crate) struct FdBudget {
    pub nofile: Option<u64>,
}

impl FdBudget {
    /// Raises the limit and keeps what is in force.
    pub(crate) fn at_start() -> FdBudget {
        FdBudget {
            nofile: raise_nofile(),
        }
    }

    /// `limits.max_connections` per listener for `listeners` listeners:
    /// the configured value, or the derived one when it is unset.
    pub(crate) fn max_connections(self, limits: &Limits, listeners: usize) -> usize {
        limits
            .max_connections
            .unwrap_or_else(|| derive_max_connections(listeners, self.nofile))
    }

    /// At start: an explicit `limits.max_connections` that cannot fit is
    /// an error with the arithmetic; an unset one is derived and logged.
    pub(crate) fn settle(self, limits: &Limits, listeners: usize) -> Result<usize, String> {
        let Some(explicit) = limits.max_connections else {
            let derived = derive_max_connections(listeners, self.nofile);
            let limit = self
                .nofile
                .map_or_else(|| "unlimited".to_owned(), |n| n.to_string());
            tracing::info!(
                max_connections = derived,
                listeners,
                nofile = %limit,
                reserved = RESERVED_FDS,
                "limits.max_connections not set; derived per listener from the open-file limit: (limit − reserved) ÷ (2 × listeners), at most 10000"
            );
            return Ok(derived);
        };
        check_fits(listeners, explicit, self.nofile)?;
        Ok(explicit)
    }
}

/// [`check_fd_fit`] as text, for the start-up error.
pub(crate) fn check_fits(
    listeners: usize,
    max_connections: usize,
    limit: Option<u64>,
) -> Result<(), String> {
    check_fd_fit(listeners, max_connections, limit).map_err(|e| e.to_string())
}

/// The hard `RLIMIT_NOFILE` (`None`: unlimited): what a started process
/// raises its soft limit to, so what `hopgate validate` checks against.
pub(crate) fn hard_nofile() -> Option<u64> {
    getrlimit(Resource::Nofile).maximum
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unset_value_is_derived_and_never_refused() {
        let budget = FdBudget {
            nofile: Some(20_000),
        };
        let unset = Limits::default();
        assert_eq!(budget.settle(&unset, 2), Ok(4_936));
        assert_eq!(budget.max_connections(&unset, 2), 4_936);
        let tiny = FdBudget { nofile: Some(64) };
        assert_eq!(tiny.settle(&unset, 2), Ok(1));
        let explicit = Limits {
            max_connections: Some(10_000),
            ..Limits::default()
        };
        assert_eq!(budget.max_connections(&explicit, 2), 10_000);
        let e = budget.settle(&explicit, 2).unwrap_err();
        assert!(e.contains("20256 file descriptors"), "{e}");
        assert_eq!(budget.settle(&explicit, 1), Ok(10_000));
    }

    #[test]
    fn max_connections_must_fit_in_the_descriptor_limit() {
        assert!(check_fits(1, 10_000, Some(20_000)).is_ok());
        assert!(check_fits(1, 10_000, None).is_ok());
        let e = check_fits(2, 10_000, Some(20_000)).unwrap_err();
        assert!(e.starts_with("limits.max_connections:"), "{e}");
        assert!(check_fits(1, 1_000, Some(1_024)).is_err());
    }
}
