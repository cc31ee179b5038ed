//! The etcd cluster's members as this replica sees them, and the choice of
//! the one the watch loop reads and watches through.
//!
//! Owns one client per configured endpoint and the last answer of each to
//! a `Status` call (reachable, its member id, the leader it knows, its raft
//! term). The watch loop asks ([`Members::probe`]) before each session and
//! every 2 s during one, all endpoints at once, each bounded by
//! [`STATUS_TIMEOUT`]: a member that lost its peers still answers `Status`
//! and keeps a watch open without a word, so quorum is judged from what
//! the members say, not from the watch. **Quorum** is "some reachable
//! member knows a leader": a member forgets its leader one election
//! timeout after it stops hearing from it (a leader without a majority
//! steps down just as fast).
//!
//! Must not touch: the view, the snapshot; it reads etcd's own status only.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use etcd_client::Client;
use parking_lot::Mutex;
use serde::Serialize;

use super::connect;

/// Bound on one member's `Status` answer.
pub(crate) const STATUS_TIMEOUT: Duration = Duration::from_secs(1);

/// One member's last answer, as `GET /admin/v1/fleet` shows it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub(crate) struct Member {
    pub(crate) endpoint: String,
    pub(crate) reachable: bool,
    /// Its member id (hex), once it answered.
    pub(crate) id: Option<String>,
    /// The leader it knows (hex); `None` when it knows none (no quorum, or
    /// an election under way).
    pub(crate) leader: Option<String>,
    pub(crate) raft_term: u64,
    pub(crate) error: Option<String>,
}

impl Member {
    fn usable(&self) -> bool {
        self.reachable && self.leader.is_some()
    }
}

/// The members of the configured endpoints.
pub(crate) struct Members {
    /// One client per endpoint (lazy channels: they reconnect by themselves).
    clients: Mutex<Vec<Option<Client>>>,
    seen: Mutex<Vec<Member>>,
    probed: AtomicBool,
}

impl Members {
    pub(crate) fn new(endpoints: &[String]) -> Members {
        Members {
            clients: Mutex::new(vec![None; endpoints.len()]),
            seen: Mutex::new(
                endpoints
                    .iter()
                    .map(|e| Member {
                        endpoint: e.clone(),
                        ..Member::default()
                    })
                    .collect(),
            ),
            probed: AtomicBool::new(false),
        }
    }

    /// Asks every endpoint for its status at once; the answers, in the
    /// order of `endpoints`.
    pub(crate) async fn probe(&self, endpoints: &[String]) -> Vec<Member> {
        let tasks: Vec<_> = endpoints
            .iter()
            .enumerate()
            .map(|(i, ep)| {
                let cached = self.clients.lock().get(i).cloned().flatten();
                tokio::spawn(status_of(ep.clone(), cached))
            })
            .collect();
        let mut out = Vec::with_capacity(tasks.len());
        for (i, (task, ep)) in tasks.into_iter().zip(endpoints).enumerate() {
            let (member, client) = task.await.unwrap_or_else(|_| {
                let m = Member {
                    endpoint: ep.clone(),
                    error: Some("status task failed".to_owned()),
                    ..Member::default()
                };
                (m, None)
            });
            if let Some(slot) = self.clients.lock().get_mut(i) {
                *slot = client;
            }
            out.push(member);
        }
        *self.seen.lock() = out.clone();
        self.probed.store(true, Ordering::Relaxed);
        out
    }

    /// The last answers.
    pub(crate) fn seen(&self) -> Vec<Member> {
        self.seen.lock().clone()
    }

    /// Whether the cluster has quorum; `None` before the first probe.
    pub(crate) fn quorum(&self) -> Option<bool> {
        self.probed
            .load(Ordering::Relaxed)
            .then(|| self.seen.lock().iter().any(Member::usable))
    }

    /// Why the cluster cannot take a write now, for answers and logs:
    /// `etcd has no quorum (1 of 3 members reachable, none knows a leader)`.
    pub(crate) fn summary(&self) -> String {
        summary(&self.seen.lock())
    }
}

/// See [`Members::summary`].
pub(crate) fn summary(members: &[Member]) -> String {
    let reachable = members.iter().filter(|m| m.reachable).count();
    let total = members.len();
    if reachable == 0 {
        format!("etcd is unreachable (0 of {total} members reachable)")
    } else if members.iter().any(Member::usable) {
        format!("etcd has quorum ({reachable} of {total} members reachable)")
    } else {
        format!(
            "etcd has no quorum ({reachable} of {total} members reachable, none knows a leader)"
        )
    }
}

/// The endpoint to read and watch through: `prefer` while it is reachable
/// and knows a leader, else the first that does.
pub(crate) fn pick(members: &[Member], prefer: Option<&str>) -> Option<String> {
    let usable = || members.iter().filter(|m| m.usable());
    usable()
        .find(|m| Some(m.endpoint.as_str()) == prefer)
        .or_else(|| usable().next())
        .map(|m| m.endpoint.clone())
}

/// Why the session through `endpoint` must end, if it must: the member
/// stopped answering, or knows no leader any more.
pub(crate) fn lost(members: &[Member], endpoint: &str) -> Option<String> {
    let m = members.iter().find(|m| m.endpoint == endpoint)?;
    if !m.reachable {
        Some(format!(
            "etcd member {endpoint} stopped answering ({})",
            m.error.as_deref().unwrap_or("no answer")
        ))
    } else if m.leader.is_none() {
        Some(format!(
            "etcd member {endpoint} knows no leader: {}",
            summary(members)
        ))
    } else {
        None
    }
}

/// One endpoint's status, with the client to keep for the next probe.
async fn status_of(endpoint: String, cached: Option<Client>) -> (Member, Option<Client>) {
    let mut member = Member {
        endpoint: endpoint.clone(),
        ..Member::default()
    };
    let client = match cached {
        Some(c) => c,
        None => match connect(std::slice::from_ref(&endpoint), false).await {
            Ok(c) => c,
            Err(e) => {
                member.error = Some(e);
                return (member, None);
            }
        },
    };
    let mut c = client.clone();
    match tokio::time::timeout(STATUS_TIMEOUT, c.status()).await {
        Ok(Ok(s)) => {
            member.reachable = true;
            member.id = s.header().map(|h| format!("{:x}", h.member_id()));
            member.leader = (s.leader() != 0).then(|| format!("{:x}", s.leader()));
            member.raft_term = s.raft_term();
        }
        Ok(Err(e)) => member.error = Some(e.to_string()),
        Err(_) => member.error = Some("status timed out".to_owned()),
    }
    (member, Some(client))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(endpoint: &str, reachable: bool, leader: Option<&str>) -> Member {
        Member {
            endpoint: endpoint.to_owned(),
            reachable,
            leader: leader.map(str::to_owned),
            ..Member::default()
        }
    }

    #[test]
    fn the_session_stays_on_its_member_while_it_knows_a_leader() {
        let all = [m("a", true, Some("1")), m("b", true, Some("1"))];
        assert_eq!(pick(&all, Some("b")).as_deref(), Some("b"));
        assert_eq!(pick(&all, None).as_deref(), Some("a"));
        let b_lost = [m("a", true, Some("2")), m("b", false, None)];
        assert_eq!(pick(&b_lost, Some("b")).as_deref(), Some("a"));
        assert!(lost(&b_lost, "b").unwrap().contains("stopped answering"));
        assert_eq!(lost(&b_lost, "a"), None);
    }

    #[test]
    fn a_lone_member_without_a_leader_is_no_quorum() {
        let alone = [m("a", false, None), m("b", true, None), m("c", false, None)];
        assert_eq!(pick(&alone, Some("b")), None);
        assert_eq!(
            summary(&alone),
            "etcd has no quorum (1 of 3 members reachable, none knows a leader)"
        );
        assert!(lost(&alone, "b").unwrap().contains("knows no leader"));
        let none = [m("a", false, None)];
        assert_eq!(
            summary(&none),
            "etcd is unreachable (0 of 1 members reachable)"
        );
    }
}
