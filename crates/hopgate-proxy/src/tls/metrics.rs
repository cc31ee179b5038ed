//! TLS counters (atomics) and their Prometheus text: handshakes,
//! handshake failures by reason, upstream handshakes, and each loaded
//! certificate's expiry time as a gauge.

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

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

fn head(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

fn esc(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Appends the TLS metrics in Prometheus text format.
pub fn render(out: &mut String) {
    let m = &TLS_METRICS;
    head(
        out,
        "hopgate_tls_handshakes_total",
        "counter",
        "TLS handshakes completed on listeners.",
    );
    let _ = writeln!(
        out,
        "hopgate_tls_handshakes_total {}",
        m.handshakes.load(Ordering::Relaxed)
    );
    head(
        out,
        "hopgate_tls_handshake_failures_total",
        "counter",
        "TLS handshakes on listeners that failed, by reason.",
    );
    for (f, n) in FAILURES.iter().zip(&m.failures) {
        let _ = writeln!(
            out,
            "hopgate_tls_handshake_failures_total{{reason=\"{}\"}} {}",
            f.name(),
            n.load(Ordering::Relaxed)
        );
    }
    head(
        out,
        "hopgate_tls_upstream_handshakes_total",
        "counter",
        "TLS handshakes with upstream nodes (failed ones included).",
    );
    let _ = writeln!(
        out,
        "hopgate_tls_upstream_handshakes_total {}",
        m.upstream_handshakes.load(Ordering::Relaxed)
    );
    head(
        out,
        "hopgate_tls_upstream_handshake_failures_total",
        "counter",
        "TLS handshakes with upstream nodes that failed.",
    );
    let _ = writeln!(
        out,
        "hopgate_tls_upstream_handshake_failures_total {}",
        m.upstream_failures.load(Ordering::Relaxed)
    );
    head(
        out,
        "hopgate_tls_certificate_expiry_timestamp_seconds",
        "gauge",
        "notAfter of each loaded certificate (Unix seconds): listeners' certificates and services' client certificates.",
    );
    for e in m.expiry.lock().iter() {
        let _ = writeln!(
            out,
            "hopgate_tls_certificate_expiry_timestamp_seconds{{{}=\"{}\",certificate=\"{}\"}} {}",
            e.scope,
            esc(&e.owner),
            e.index,
            e.not_after
        );
    }
}
