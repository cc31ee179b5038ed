//! Fleet-wide operator actions through etcd.
//!
//! A drain posted to any replica's admin API becomes the key
//! `<prefix>actions/drain/<service>/<node>`; an undrain deletes it. Drain
//! state is thus a set of keys, which survives reconnects and restarts:
//! after a full re-read every replica drains exactly the nodes named there.
//! A maintenance notice becomes `<prefix>actions/maintenance/<service>/
//! <node>/<seq>` on a lease of [`NOTICE_TTL_SECS`]; every replica, the
//! poster included, feeds it to its maintenance intake, which drops a
//! sequence number it has already seen — so a re-read replays notices
//! harmlessly.
//!
//! When etcd cannot take an action (no quorum, unreachable) it holds on the
//! receiving replica only, and the admin API says so. A drain or undrain
//! is state: it is remembered ([`Unshared`]) and published as soon as this
//! replica reconnects, before the re-read, unless the key was written
//! since this replica last saw etcd (the later action wins). A maintenance
//! notice is an event bound to a time (`in`): it is never published late.
//!
//! Must not touch: the snapshot (node state only, like the admin API).

use std::collections::BTreeSet;

use etcd_client::{Client, Compare, CompareOp, PutOptions, Txn, TxnOp};
use serde_json::{json, Value};

use super::{EtcdHandle, CALL_TIMEOUT};
use crate::control::Control;
use crate::maintenance::{Maintenance, Refused};

/// How long a maintenance notice stays in etcd for replicas that reconnect.
pub(super) const NOTICE_TTL_SECS: i64 = 300;

/// A drain (`true`) or undrain applied here that etcd did not take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Unshared {
    pub(crate) drain: bool,
    /// The last etcd revision this replica had seen then: a write of the
    /// key after it wins over this action.
    pub(crate) revision: i64,
    /// Unix seconds.
    pub(crate) at: u64,
}

impl EtcdHandle {
    /// Publishes a drain (`true`) or undrain of one node to the fleet. When
    /// etcd does not take it, it is kept to publish on reconnect, and the
    /// error says why (the quorum when that is the cause).
    pub async fn post_drain(&self, service: &str, node: &str, drain: bool) -> Result<(), String> {
        let name = format!("{service}/{node}");
        let written = match self.client() {
            Some(mut client) => {
                let call = client.txn(Txn::new().and_then([self.drain_op(&name, drain)]));
                tokio::time::timeout(CALL_TIMEOUT, call)
                    .await
                    .map_err(|_| "etcd write timed out".to_owned())
                    .and_then(|r| r.map(|_| ()).map_err(|e| e.to_string()))
            }
            None => Err("etcd is not connected".to_owned()),
        };
        let mut unshared = self.unshared.lock();
        match written {
            Ok(()) => {
                unshared.remove(&name);
                Ok(())
            }
            Err(e) => {
                let u = Unshared {
                    drain,
                    revision: self.revision(),
                    at: hopgate_core::session::unix_now(),
                };
                unshared.insert(name, u);
                Err(self.not_taken(e))
            }
        }
    }

    /// The write of one drain key: a put for a drain, a delete for an undrain.
    fn drain_op(&self, name: &str, drain: bool) -> TxnOp {
        let key = self.key(&format!("actions/drain/{name}"));
        if drain {
            let value = json!({
                "by": self.replica_id,
                "at": hopgate_core::session::unix_now(),
            })
            .to_string();
            TxnOp::put(key, value, None)
        } else {
            TxnOp::delete(key, None)
        }
    }

    /// Publishes the drains and undrains applied here while etcd could not
    /// take them; each in one transaction that writes only when the key has
    /// not been written since the action. Stops at the first failure (the
    /// rest wait for the next connection).
    pub(crate) async fn publish_unshared(&self, client: &mut Client) {
        let pending: Vec<(String, Unshared)> = self
            .unshared
            .lock()
            .iter()
            .map(|(k, u)| (k.clone(), *u))
            .collect();
        for (name, u) in pending {
            let key = self.key(&format!("actions/drain/{name}"));
            let txn = Txn::new()
                .when([Compare::mod_revision(key, CompareOp::Less, u.revision + 1)])
                .and_then([self.drain_op(&name, u.drain)]);
            let done = tokio::time::timeout(CALL_TIMEOUT, client.txn(txn)).await;
            let succeeded = match done {
                Ok(Ok(r)) => r.succeeded(),
                Ok(Err(e)) => {
                    tracing::warn!(node = %name, error = %e, "etcd: cannot publish a drain made while etcd was away; retried on the next connection");
                    return;
                }
                Err(_) => {
                    tracing::warn!(node = %name, "etcd: publishing a drain made while etcd was away timed out; retried on the next connection");
                    return;
                }
            };
            if succeeded {
                tracing::info!(node = %name, drain = u.drain, "etcd: drain made while etcd was away published to the fleet");
            } else {
                tracing::info!(node = %name, drain = u.drain, "etcd: drain made while etcd was away not published: the fleet changed that node's drain since");
            }
            let mut unshared = self.unshared.lock();
            if unshared.get(&name) == Some(&u) {
                unshared.remove(&name);
            }
        }
    }

    /// The drains waiting to be published, for `GET /admin/v1/fleet`.
    pub(crate) fn unshared_json(&self) -> Value {
        let list: Vec<Value> = self
            .unshared
            .lock()
            .iter()
            .map(|(name, u)| json!({ "node": name, "draining": u.drain, "at": u.at }))
            .collect();
        Value::Array(list)
    }

    /// Publishes a maintenance notice (the admin API's JSON body, already
    /// checked) to the fleet.
    pub async fn post_maintenance(
        &self,
        service: &str,
        node: &str,
        seq: u64,
        body: &Value,
    ) -> Result<(), String> {
        let mut client = self
            .client()
            .ok_or_else(|| self.not_taken("etcd is not connected".to_owned()))?;
        let key = self.key(&format!("actions/maintenance/{service}/{node}/{seq}"));
        let call = async {
            let lease = client.lease_grant(NOTICE_TTL_SECS, None).await?;
            client
                .put(
                    key,
                    body.to_string(),
                    Some(PutOptions::new().with_lease(lease.id())),
                )
                .await
                .map(|_| ())
        };
        tokio::time::timeout(CALL_TIMEOUT, call)
            .await
            .map_err(|_| self.not_taken("etcd write timed out".to_owned()))?
            .map_err(|e| self.not_taken(e.to_string()))
    }
}

/// Makes node drain state match `desired` (`service/node` names): nodes
/// named there drain, nodes that were named at the last call and are not
/// any more are undrained. Nodes not in the running snapshot are skipped
/// (they are applied when a reload brings them).
pub(crate) fn apply_drains(
    control: &Control,
    desired: &BTreeSet<String>,
    applied: &mut BTreeSet<String>,
) {
    let snap = control.snapshot().load();
    let find = |name: &str| {
        let (service, node) = name.split_once('/')?;
        snap.services
            .iter()
            .find(|s| s.name == service)?
            .nodes
            .iter()
            .find(|n| n.id == node)
    };
    for name in desired {
        if let Some(n) = find(name) {
            if !n.state.is_draining() {
                n.state.set_draining(true);
                tracing::info!(node = %name, "node drained (fleet action from etcd)");
            }
        }
    }
    for name in applied.difference(desired) {
        if let Some(n) = find(name) {
            n.state.set_draining(false);
            tracing::info!(node = %name, "node undrained (fleet action from etcd)");
        }
    }
    *applied = desired.clone();
}

/// Feeds one notice from etcd to the maintenance intake.
pub(crate) fn intake_notice(maintenance: &std::sync::Arc<Maintenance>, key: &str, value: &str) {
    let parsed = serde_json::from_str::<Value>(value)
        .map_err(|e| vec![hopgate_core::config::ConfigError::new("", e.to_string())])
        .and_then(|v| crate::maintenance::notice::parse(&v));
    match parsed {
        Ok(n) => match maintenance.intake(n) {
            Ok(_) => tracing::debug!(key, "maintenance notice from etcd applied"),
            Err(Refused::Duplicate { .. }) => {}
            Err(r) => tracing::info!(
                key,
                refused = r.label(),
                "maintenance notice from etcd not applied"
            ),
        },
        Err(errors) => {
            for e in errors {
                tracing::warn!(key, error = %e, "etcd: ignoring a bad maintenance notice");
            }
        }
    }
}
