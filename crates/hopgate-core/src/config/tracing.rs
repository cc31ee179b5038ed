//! The typed `tracing:` block: whether the gateway's own spans are exported
//! over OTLP/HTTP, where to, and how they are batched. The exporter itself
//! lives in the data plane (`hopgate_proxy::otlp`); this crate only holds
//! the validated values.

use std::time::Duration;

/// `tracing:`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TracingConfig {
    pub otlp: OtlpConfig,
}

/// `tracing.otlp:`.
#[derive(Clone, Debug, PartialEq)]
pub struct OtlpConfig {
    pub enabled: bool,
    /// An `http://` URL (scheme, authority and path checked).
    pub endpoint: http::Uri,
    /// `service.name` of the exported resource.
    pub service_name: String,
    /// 0 to 1: the share of gateway-started traces that are recorded.
    pub sample_ratio: f64,
    /// Spans waiting for export at most.
    pub queue: usize,
    /// Spans per export request at most (≤ `queue`).
    pub batch: usize,
    /// Longest wait before a partial batch is sent.
    pub interval: Duration,
    /// Bound of one export request (connect, send, answer).
    pub timeout: Duration,
    /// Extra request headers, in name order.
    pub headers: Vec<(http::HeaderName, http::HeaderValue)>,
}

pub const DEFAULT_OTLP_ENDPOINT: &str = "http://127.0.0.1:4318/v1/traces";

impl Default for OtlpConfig {
    fn default() -> Self {
        OtlpConfig {
            enabled: false,
            endpoint: http::Uri::from_static(DEFAULT_OTLP_ENDPOINT),
            service_name: "hopgate".to_owned(),
            sample_ratio: 1.0,
            queue: 4096,
            batch: 512,
            interval: Duration::from_secs(1),
            timeout: Duration::from_secs(5),
            headers: Vec::new(),
        }
    }
}
