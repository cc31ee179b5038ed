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
//! Must not touch: the snapshot (node state only, like the admin API).

use std::collections::BTreeSet;

use etcd_client::PutOptions;
use serde_json::Value;

use super::{EtcdHandle, CALL_TIMEOUT};
use crate::control::Control;
use crate::maintenance::{Maintenance, Refused};

/// How long a maintenance notice stays in etcd for replicas that reconnect.
pub(super) const NOTICE_TTL_SECS: i64 = 300;

impl EtcdHandle {
    /// Publishes a drain (`true`) or undrain of one node to the fleet.
    pub async fn post_drain(&self, service: &str, node: &str, drain: bool) -> Result<(), String> {
        let mut client = self.client().ok_or("etcd is not connected")?;
        let key = self.key(&format!("actions/drain/{service}/{node}"));
        let call = async {
            if drain {
                let value = serde_json::json!({
                    "by": self.replica_id,
                    "at": hopgate_core::session::unix_now(),
                })
                .to_string();
                client.put(key, value, None).await.map(|_| ())
            } else {
                client.delete(key, None).await.map(|_| ())
            }
        };
        tokio::time::timeout(CALL_TIMEOUT, call)
            .await
            .map_err(|_| "etcd write timed out".to_owned())?
            .map_err(|e| e.to_string())
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
        let mut client = self.client().ok_or("etcd is not connected")?;
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
            .map_err(|_| "etcd write timed out".to_owned())?
            .map_err(|e| e.to_string())
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
