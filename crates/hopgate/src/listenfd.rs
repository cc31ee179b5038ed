//! Where listening sockets come from: inherited ones first — from systemd
//! socket activation (`LISTEN_FDS`) or from the running process during a
//! binary upgrade ([`crate::upgrade`]) — else a fresh `bind`.
//!
//! Owns matching inherited sockets to the config's listeners and admin API
//! and closing the ones no listener claims. Must not touch: serving (the
//! gateway starts the accept loops on whatever this returns).

use std::net::SocketAddr;
use std::os::fd::OwnedFd;

use anyhow::Context;
use hopgate_core::config::Health;
use tokio::net::TcpListener;

/// What an inherited socket serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Listener,
    Admin,
}

impl Kind {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Kind::Listener => "listener",
            Kind::Admin => "admin",
        }
    }

    pub(crate) fn parse(s: &str) -> Option<Kind> {
        match s {
            "listener" => Some(Kind::Listener),
            "admin" => Some(Kind::Admin),
            _ => None,
        }
    }
}

/// One listening socket this process did not bind.
pub(crate) struct Handed {
    pub(crate) kind: Kind,
    /// The listener's name (`admin` for the admin API).
    pub(crate) name: String,
    /// The address the previous process's config gave it (port 0 included);
    /// `None` from systemd, where only the name or the bound address count.
    pub(crate) configured: Option<SocketAddr>,
    pub(crate) sock: std::net::TcpListener,
}

/// A node's health verdict from the previous process: service, node id,
/// node address, health.
pub(crate) type HandedHealth = (String, String, SocketAddr, Health);

/// Sockets inherited at start, taken one by one as listeners claim them
/// (and, from a handover, the previous process's health verdicts).
#[derive(Default)]
pub(crate) struct Inherited {
    socks: Vec<Handed>,
    /// Where they came from, for the log.
    from: &'static str,
    health: Vec<HandedHealth>,
}

impl Inherited {
    pub(crate) fn none() -> Inherited {
        Inherited::default()
    }

    pub(crate) fn handed_over(socks: Vec<Handed>, health: Vec<HandedHealth>) -> Inherited {
        Inherited {
            socks,
            from: "the previous process",
            health,
        }
    }

    /// Starts each node the previous process had a verdict on (same
    /// service, id and address, still actively checked) with that verdict,
    /// so a node it knew to be down is not tried again until a check
    /// passes. Called before this process's first check, so the verdict
    /// also wins over `health.initial`. Returns how many were applied.
    pub(crate) fn apply_health<U>(&self, snap: &hopgate_core::snapshot::Snapshot<U>) -> usize {
        let mut applied = 0;
        for (service, id, addr, health) in &self.health {
            let node = snap
                .services
                .iter()
                .filter(|s| &s.name == service && s.health.is_some())
                .flat_map(|s| s.nodes.iter())
                .find(|n| &n.id == id && n.address == *addr);
            if let Some(n) = node {
                n.state.set_health(*health);
                applied += 1;
            }
        }
        if applied > 0 {
            tracing::info!(
                nodes = applied,
                "upgrade: node health carried over from the previous process"
            );
        }
        applied
    }

    /// systemd socket activation: `LISTEN_FDS` sockets from fd 3 on, for
    /// this process (`LISTEN_PID`), named by `LISTEN_FDNAMES`. A socket
    /// named like a listener serves it; one named `admin` serves the admin
    /// API; an unnamed one (systemd names it after the .socket unit) serves
    /// the listener whose configured address it is bound to. The
    /// `listenfd` crate removes `LISTEN_FDS` and `LISTEN_PID` from the
    /// environment (so processes this one starts do not take the sockets
    /// for theirs): call it before any other thread runs.
    pub(crate) fn from_systemd() -> Inherited {
        let mut fds = listenfd::ListenFd::from_env();
        if fds.len() == 0 {
            return Inherited::none();
        }
        let names: Vec<String> = std::env::var("LISTEN_FDNAMES")
            .map(|v| v.split(':').map(str::to_owned).collect())
            .unwrap_or_default();
        let mut socks = Vec::new();
        for i in 0..fds.len() {
            let name = names.get(i).cloned().unwrap_or_default();
            match fds.take_tcp_listener(i) {
                Ok(Some(sock)) => {
                    // Not for the processes this one starts (an upgrade's
                    // new process gets its sockets over the upgrade socket).
                    if let Err(e) = rustix::io::fcntl_setfd(&sock, rustix::io::FdFlags::CLOEXEC) {
                        tracing::warn!(fd = 3 + i, error = %e, "systemd socket: cannot set close-on-exec");
                    }
                    let kind = if name == "admin" {
                        Kind::Admin
                    } else {
                        Kind::Listener
                    };
                    socks.push(Handed {
                        kind,
                        name,
                        configured: None,
                        sock,
                    });
                }
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!(fd = 3 + i, name = %name, error = %e, "systemd socket: not a TCP listening socket; ignored")
                }
            }
        }
        tracing::info!(sockets = socks.len(), "systemd socket activation");
        Inherited {
            socks,
            from: "systemd",
            health: Vec::new(),
        }
    }

    /// The inherited socket for this listener or the admin API, if any:
    /// from a handover, the one with the same name and the same configured
    /// address; from systemd, the one with the name, else the one bound to
    /// `addr`.
    fn take(&mut self, kind: Kind, name: &str, addr: SocketAddr) -> Option<std::net::TcpListener> {
        let by_name = self.socks.iter().position(|h| {
            h.kind == kind
                && (kind == Kind::Admin || h.name == name)
                && h.configured.is_none_or(|c| c == addr)
        });
        let i = by_name.or_else(|| {
            self.socks.iter().position(|h| {
                h.configured.is_none()
                    && addr.port() != 0
                    && h.sock.local_addr().is_ok_and(|a| a == addr)
            })
        })?;
        Some(self.socks.swap_remove(i).sock)
    }

    /// Closes every socket no listener claimed (a listener the new config
    /// dropped or moved to another address).
    pub(crate) fn close_rest(&mut self) {
        for h in self.socks.drain(..) {
            let addr = h
                .sock
                .local_addr()
                .map_or_else(|_| "?".to_owned(), |a| a.to_string());
            tracing::info!(kind = h.kind.as_str(), name = %h.name, %addr, from = self.from, "inherited socket not in the config; closed");
        }
    }
}

/// The listening socket of a listener (or, with [`Kind::Admin`], of the
/// admin API): the inherited one when there is one, else a fresh bind.
/// Also returns a duplicate of its descriptor, for a later handover.
pub(crate) async fn obtain(
    inherited: &parking_lot::Mutex<Inherited>,
    kind: Kind,
    name: &str,
    addr: SocketAddr,
) -> anyhow::Result<(TcpListener, OwnedFd)> {
    let what = match kind {
        Kind::Admin => "admin".to_owned(),
        Kind::Listener => format!("listener {name:?}"),
    };
    let taken = inherited.lock().take(kind, name, addr);
    let sock = match taken {
        Some(sock) => {
            sock.set_nonblocking(true)
                .with_context(|| format!("inherited socket of {what}"))?;
            tracing::debug!(%what, "using an inherited socket");
            TcpListener::from_std(sock).with_context(|| format!("inherited socket of {what}"))?
        }
        None => TcpListener::bind(addr)
            .await
            .with_context(|| format!("cannot listen on {addr} ({what})"))?,
    };
    let dup = std::os::fd::AsFd::as_fd(&sock)
        .try_clone_to_owned()
        .with_context(|| format!("cannot duplicate the socket of {what}"))?;
    Ok((sock, dup))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sock() -> std::net::TcpListener {
        std::net::TcpListener::bind("127.0.0.1:0").unwrap()
    }

    fn handed(kind: Kind, name: &str, configured: Option<&str>) -> Handed {
        Handed {
            kind,
            name: name.to_owned(),
            configured: configured.map(|c| c.parse().unwrap()),
            sock: sock(),
        }
    }

    #[test]
    fn a_handover_matches_name_and_configured_address() {
        let any: SocketAddr = "127.0.0.1:0".parse().unwrap();
        let mut inh = Inherited::handed_over(
            vec![
                handed(Kind::Listener, "public", Some("127.0.0.1:0")),
                handed(Kind::Listener, "moved", Some("127.0.0.1:0")),
                handed(Kind::Admin, "admin", Some("127.0.0.1:0")),
            ],
            Vec::new(),
        );
        assert!(inh.take(Kind::Listener, "public", any).is_some());
        // Taken once only.
        assert!(inh.take(Kind::Listener, "public", any).is_none());
        // Same name, other address: bound afresh, the old socket stays
        // unclaimed (closed by `close_rest`).
        let elsewhere: SocketAddr = "127.0.0.2:0".parse().unwrap();
        assert!(inh.take(Kind::Listener, "moved", elsewhere).is_none());
        // An unknown name never takes a handed-over socket, even the admin's.
        assert!(inh.take(Kind::Listener, "admin", any).is_none());
        assert!(inh.take(Kind::Admin, "admin", any).is_some());
        assert_eq!(inh.socks.len(), 1);
        inh.close_rest();
        assert!(inh.socks.is_empty());
    }

    #[test]
    fn systemd_sockets_match_by_name_then_by_bound_address() {
        let unnamed = handed(Kind::Listener, "hopgate.socket", None);
        let bound = unnamed.sock.local_addr().unwrap();
        let mut inh = Inherited {
            socks: vec![
                handed(Kind::Listener, "public", None),
                handed(Kind::Admin, "admin", None),
                unnamed,
            ],
            from: "systemd",
            health: Vec::new(),
        };
        let any: SocketAddr = "127.0.0.1:0".parse().unwrap();
        // By name, whatever the configured address.
        assert!(inh
            .take(Kind::Listener, "public", "0.0.0.0:80".parse().unwrap())
            .is_some());
        assert!(inh.take(Kind::Admin, "admin", any).is_some());
        // Port 0 never matches by address.
        assert!(inh.take(Kind::Listener, "other", any).is_none());
        let s = inh
            .take(Kind::Listener, "other", bound)
            .expect("by address");
        assert_eq!(s.local_addr().unwrap(), bound);
    }
}
