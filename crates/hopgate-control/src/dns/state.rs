//! DNS discovery's state: per service the last good set of resolved
//! addresses, the last result and when it succeeded, and the resolution
//! counts; read by the writer's merge, the admin API and `/metrics`.
//!
//! Must not touch: [`crate::control::Control`] (it holds this state; the
//! parent module drives it), DNS, the clock (times come in).

use std::collections::{BTreeMap, HashMap};
use std::fmt;

use parking_lot::Mutex;
use prometheus_client::encoding::DescriptorEncoder;
use serde_json::{json, Value};

use hopgate_core::config::discovery::{DnsDiscovery, Resolved};

use super::resolve::Answer;
use crate::exposition::{counters, gauges};

/// What DNS discovery knows, shared by the resolver tasks, the writer's
/// merge, the admin API and `/metrics`.
#[derive(Debug, Default)]
pub(crate) struct Dns {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    services: BTreeMap<String, ServiceDns>,
    /// `(service, result)` → resolutions; kept across restarts of a task.
    counts: BTreeMap<(String, &'static str), u64>,
}

#[derive(Debug)]
struct ServiceDns {
    config: DnsDiscovery,
    /// The last good set; `None` before the first answer with an address.
    set: Option<Vec<Resolved>>,
    last_result: &'static str,
    last_error: Option<String>,
    last_attempt_at: Option<u64>,
    last_success_at: Option<u64>,
    /// Failed resolutions since the last good one.
    failures_in_a_row: u64,
}

impl Dns {
    /// The last good sets, keyed by service, each with the name it was
    /// resolved for.
    pub(super) fn resolved(&self) -> BTreeMap<String, (String, Vec<Resolved>)> {
        self.inner
            .lock()
            .services
            .iter()
            .filter_map(|(s, d)| Some((s.clone(), (d.config.name.clone(), d.set.clone()?))))
            .collect()
    }

    /// Records one resolution made at `now` (Unix seconds); true when the
    /// set of addresses changed.
    pub(super) fn record(
        &self,
        service: &str,
        cfg: &DnsDiscovery,
        answer: &Answer,
        now: u64,
    ) -> bool {
        let mut inner = self.inner.lock();
        let result = match answer {
            Answer::Ok(..) => "ok",
            Answer::Failed { result, .. } => result,
        };
        *inner
            .counts
            .entry((service.to_owned(), result))
            .or_default() += 1;
        let entry = inner
            .services
            .entry(service.to_owned())
            .or_insert_with(|| ServiceDns {
                config: cfg.clone(),
                set: None,
                last_result: result,
                last_error: None,
                last_attempt_at: None,
                last_success_at: None,
                failures_in_a_row: 0,
            });
        entry.config = cfg.clone();
        entry.last_result = result;
        entry.last_attempt_at = Some(now);
        match answer {
            Answer::Ok(set, _) => {
                entry.last_success_at = Some(now);
                entry.last_error = None;
                entry.failures_in_a_row = 0;
                if entry.set.as_ref() == Some(set) {
                    return false;
                }
                entry.set = Some(set.clone());
                true
            }
            Answer::Failed { detail, .. } => {
                entry.failures_in_a_row += 1;
                entry.last_error = Some(detail.clone());
                false
            }
        }
    }

    /// Forgets services that no longer have `discovery.dns`.
    pub(super) fn retain(&self, keep: &HashMap<String, DnsDiscovery>) {
        self.inner
            .lock()
            .services
            .retain(|s, _| keep.contains_key(s));
    }

    /// Per service: name, type, last result (and error), last attempt and
    /// success (Unix seconds), failures in a row, the addresses in use.
    pub(super) fn admin_json(&self) -> Value {
        let inner = self.inner.lock();
        let services: Vec<Value> = inner
            .services
            .iter()
            .map(|(service, d)| {
                json!({
                    "service": service,
                    "name": d.config.name,
                    "type": d.config.kind.as_str(),
                    "last_result": d.last_result,
                    "last_error": d.last_error,
                    "last_attempt_at": d.last_attempt_at,
                    "last_success_at": d.last_success_at,
                    "failures_in_a_row": d.failures_in_a_row,
                    "addresses": d.set.iter().flatten().map(|r| r.addr.to_string()).collect::<Vec<_>>(),
                })
            })
            .collect();
        Value::Array(services)
    }

    /// `hopgate_dns_*` (nothing before the first resolution).
    pub(super) fn encode(&self, mut enc: DescriptorEncoder) -> fmt::Result {
        let inner = self.inner.lock();
        if inner.counts.is_empty() {
            return Ok(());
        }
        counters(
            &mut enc,
            "hopgate_dns_resolutions",
            "DNS discovery resolutions by service and result (ok, empty, nxdomain, servfail, refused, timeout, error); any but ok keeps the last good set.",
            inner.counts.iter().map(|((s, r), n)| {
                ([("service", s.clone()), ("result", (*r).to_owned())], *n)
            }),
        )?;
        gauges(
            &mut enc,
            "hopgate_dns_nodes",
            "Addresses in a service's last good DNS set.",
            None,
            inner.services.iter().map(|(s, d)| {
                let n = d.set.as_ref().map_or(0, Vec::len);
                (
                    [("service", s.clone())],
                    i64::try_from(n).unwrap_or(i64::MAX),
                )
            }),
        )?;
        gauges(
            &mut enc,
            "hopgate_dns_failures_in_a_row",
            "Failed DNS resolutions of a service since its last good one.",
            None,
            inner.services.iter().map(|(s, d)| {
                (
                    [("service", s.clone())],
                    i64::try_from(d.failures_in_a_row).unwrap_or(i64::MAX),
                )
            }),
        )
    }
}
