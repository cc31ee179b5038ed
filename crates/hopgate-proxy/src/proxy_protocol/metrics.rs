//! `hopgate_proxy_protocol_total{listener,result}`: what became of each
//! connection to a listener with `proxy_protocol`.
//!
//! Owns the per-listener counters (relaxed atomic adds; a listener finds
//! its counters once, when its settings are built) and their collector for
//! `/metrics`, read at scrape time, as the TLS families are. A listener's
//! counters outlive it (a listener re-added under its name goes on
//! counting). Must not touch: the exposition format.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::MetricType;

/// What became of one connection's header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// A header carrying the client's address.
    Ok = 0,
    /// v2 `LOCAL` or v1 `UNKNOWN` (a balancer's health check): the socket's
    /// address is used.
    Local,
    /// The source is not in `trusted_cidrs`: closed at accept.
    Untrusted,
    /// Not a valid header.
    Malformed,
    /// No whole header within `timeout`.
    Timeout,
    /// A valid header of a version not in `versions`.
    Version,
    /// The peer closed (or reset) before a whole header arrived.
    Closed,
}

const OUTCOMES: [Outcome; 7] = [
    Outcome::Ok,
    Outcome::Local,
    Outcome::Untrusted,
    Outcome::Malformed,
    Outcome::Timeout,
    Outcome::Version,
    Outcome::Closed,
];

impl Outcome {
    pub(crate) fn label(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::Local => "local",
            Outcome::Untrusted => "untrusted",
            Outcome::Malformed => "malformed",
            Outcome::Timeout => "timeout",
            Outcome::Version => "version",
            Outcome::Closed => "closed",
        }
    }
}

/// One listener's counters, by [`Outcome`].
#[derive(Debug, Default)]
pub(crate) struct Counters([AtomicU64; OUTCOMES.len()]);

impl Counters {
    pub(crate) fn add(&self, o: Outcome) {
        self.0[o as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// The count of one outcome.
    pub(crate) fn get(&self, o: Outcome) -> u64 {
        self.0[o as usize].load(Ordering::Relaxed)
    }
}

/// Every listener's counters that ever had `proxy_protocol`, by name.
static LISTENERS: Mutex<BTreeMap<String, Arc<Counters>>> = Mutex::new(BTreeMap::new());

/// The counters of listener `name`, created on first use.
pub(crate) fn counters(name: &str) -> Arc<Counters> {
    Arc::clone(LISTENERS.lock().entry(name.to_owned()).or_default())
}

/// The `hopgate_proxy_protocol_total` family; registered in the admin
/// API's `/metrics` registry. Only listeners that have had
/// `proxy_protocol` appear.
#[derive(Debug)]
pub struct ProxyProtocolCollector;

impl Collector for ProxyProtocolCollector {
    fn encode(&self, mut enc: DescriptorEncoder) -> fmt::Result {
        let listeners: Vec<(String, Arc<Counters>)> = LISTENERS
            .lock()
            .iter()
            .map(|(k, v)| (k.clone(), Arc::clone(v)))
            .collect();
        if listeners.is_empty() {
            return Ok(());
        }
        let mut me = enc.encode_descriptor(
            "hopgate_proxy_protocol",
            "Connections to listeners with proxy_protocol, by what their PROXY header did: ok, local (the socket's address used), untrusted, malformed, timeout, version, closed.",
            None,
            MetricType::Counter,
        )?;
        for (name, c) in &listeners {
            for o in OUTCOMES {
                let labels = [("listener", name.as_str()), ("result", o.label())];
                ConstCounter::new(c.get(o)).encode(me.encode_family(&labels)?)?;
            }
        }
        Ok(())
    }
}
