//! TLS counters (atomics) and their collector for `/metrics`: handshakes,
//! handshake failures by reason, upstream handshakes, and each loaded
//! certificate's expiry time as a gauge.
//!
//! Owns the TLS family names and the counters the handshake code bumps
//! (relaxed atomic adds, no lock); [`TlsCollector`] reads them at scrape
//! time and `prometheus-client` encodes them (the admin API serves the
//! registry). Must not touch: the exposition format.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Unit;

/// Why a client handshake failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Failure {
    /// Not finished within the header-read timeout.
    Timeout,
    /// The client closed or reset the connection mid-handshake.
    Closed,
    /// No certificate to offer (the listener turned plain meanwhile).
    NoCertificate,
    /// No common protocol version, cipher suite or ALPN protocol.
    Incompatible,
    /// The client sent an alert (it refused our certificate, say).
    Alert,
    /// Malformed or unexpected TLS messages (not TLS at all, say).
    Protocol,
    /// A socket error.
    Io,
}

const FAILURES: [Failure; 7] = [
    Failure::Timeout,
    Failure::Closed,
    Failure::NoCertificate,
    Failure::Incompatible,
    Failure::Alert,
    Failure::Protocol,
    Failure::Io,
];

impl Failure {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Failure::Timeout => "timeout",
            Failure::Closed => "closed",
            Failure::NoCertificate => "no_certificate",
            Failure::Incompatible => "incompatible",
            Failure::Alert => "alert",
            Failure::Protocol => "protocol",
            Failure::Io => "io",
        }
    }
}

/// A loaded certificate's notAfter.
#[derive(Clone, Debug)]
pub(crate) struct Expiry {
    /// `listener` or `service` (a client certificate).
    pub(crate) scope: &'static str,
    pub(crate) owner: String,
    /// Its place in `certificates`.
    pub(crate) index: usize,
    /// Unix seconds.
    pub(crate) not_after: i64,
}

/// The TLS counters.
#[derive(Debug)]
pub(crate) struct TlsMetrics {
    handshakes: AtomicU64,
    failures: [AtomicU64; 7],
    upstream_handshakes: AtomicU64,
    upstream_failures: AtomicU64,
    expiry: Mutex<Vec<Expiry>>,
}

pub(crate) static TLS_METRICS: TlsMetrics = TlsMetrics {
    handshakes: AtomicU64::new(0),
    failures: [const { AtomicU64::new(0) }; 7],
    upstream_handshakes: AtomicU64::new(0),
    upstream_failures: AtomicU64::new(0),
    expiry: Mutex::new(Vec::new()),
};

impl TlsMetrics {
    pub(crate) fn handshake_ok(&self) {
        self.handshakes.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn handshake_failed(&self, why: Failure) {
        let i = FAILURES.iter().position(|f| *f == why).unwrap_or(0);
        self.failures[i].fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn upstream(&self, ok: bool) {
        self.upstream_handshakes.fetch_add(1, Ordering::Relaxed);
        if !ok {
            self.upstream_failures.fetch_add(1, Ordering::Relaxed);
        }
    }

    pub(crate) fn set_expiry(&self, e: Vec<Expiry>) {
        *self.expiry.lock() = e;
    }
}

/// The TLS families, read from [`TLS_METRICS`] at scrape time; registered
/// in the admin API's `/metrics` registry. Counter names are given without
/// `_total`, which the encoder appends.
#[derive(Debug)]
pub struct TlsCollector;

impl Collector for TlsCollector {
    fn encode(&self, mut enc: DescriptorEncoder) -> fmt::Result {
        let m = &TLS_METRICS;
        let counter = |enc: &mut DescriptorEncoder, name: &str, help: &str, n: &AtomicU64| {
            let me = enc.encode_descriptor(name, help, None, MetricType::Counter)?;
            ConstCounter::new(n.load(Ordering::Relaxed)).encode(me)
        };
        counter(
            &mut enc,
            "hopgate_tls_handshakes",
            "TLS handshakes completed on listeners.",
            &m.handshakes,
        )?;
        let mut me = enc.encode_descriptor(
            "hopgate_tls_handshake_failures",
            "TLS handshakes on listeners that failed, by reason.",
            None,
            MetricType::Counter,
        )?;
        for (f, n) in FAILURES.iter().zip(&m.failures) {
            ConstCounter::new(n.load(Ordering::Relaxed))
                .encode(me.encode_family(&[("reason", f.name())])?)?;
        }
        counter(
            &mut enc,
            "hopgate_tls_upstream_handshakes",
            "TLS handshakes with upstream nodes (failed ones included).",
            &m.upstream_handshakes,
        )?;
        counter(
            &mut enc,
            "hopgate_tls_upstream_handshake_failures",
            "TLS handshakes with upstream nodes that failed.",
            &m.upstream_failures,
        )?;
        let mut me = enc.encode_descriptor(
            "hopgate_tls_certificate_expiry_timestamp",
            "notAfter of each loaded certificate (Unix seconds): listeners' certificates and services' client certificates.",
            Some(&Unit::Seconds),
            MetricType::Gauge,
        )?;
        for e in m.expiry.lock().iter() {
            let labels = ([(e.scope, e.owner.as_str())], [("certificate", e.index)]);
            ConstGauge::new(e.not_after).encode(me.encode_family(&labels)?)?;
        }
        Ok(())
    }
}
