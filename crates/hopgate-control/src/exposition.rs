//! The `/metrics` wire format, on `prometheus-client`: the content
//! negotiation (OpenMetrics 1.0.0 or Prometheus text 0.0.4), the response,
//! and the few adapters the collectors share — constant counter and gauge
//! families, and hopgate's lock-free histograms as `EncodeMetric`s.
//!
//! The library encodes (names, `_total`/`_info`/`_bucket` suffixes, units,
//! label escaping, `# EOF`); hopgate's relaxed atomics hold the values and
//! are read at scrape time. Nothing here runs on the request path.
//!
//! Must not touch: metric names and values (the collectors in
//! [`crate::metrics`], `hopgate_proxy::tls::metrics` and [`crate::control::canary`]
//! own them).

use std::fmt;

use bytes::Bytes;
use http::header::{HeaderMap, HeaderValue, ACCEPT, CONTENT_TYPE};
use http::{Response, StatusCode};
use http_body_util::Full;
use prometheus_client::encoding::{
    DescriptorEncoder, EncodeLabelSet, EncodeMetric, MetricEncoder, NoLabelSet,
};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Registry, Unit};

use hopgate_core::stats::{AtomicHistogram, DURATION_BUCKETS};

/// The content type of the OpenMetrics text format this module serves.
pub(crate) const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The content type of the Prometheus text format (version 0.0.4).
pub(crate) const PROMETHEUS_TEXT: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

/// Whether an `Accept` header prefers OpenMetrics: an
/// `application/openmetrics-text` range (version 1.0.0 or none, or 0.0.1,
/// which has the same text) whose quality is above 0 and not below the
/// best of `text/plain`, `text/*` and `*/*`. No header: Prometheus text.
pub(crate) fn wants_openmetrics(accept: &str) -> bool {
    let mut openmetrics = 0.0f32;
    let mut text = 0.0f32;
    for range in accept.split(',') {
        let mut parts = range.split(';').map(str::trim);
        let media = parts.next().unwrap_or("").to_ascii_lowercase();
        let mut q = 1.0f32;
        let mut version_ok = true;
        for p in parts {
            let Some((k, v)) = p.split_once('=') else {
                continue;
            };
            let v = v.trim().trim_matches('"');
            match k.trim().to_ascii_lowercase().as_str() {
                "q" => {
                    q = v
                        .parse()
                        .ok()
                        .filter(|q: &f32| q.is_finite())
                        .unwrap_or(0.0)
                }
                "version" => version_ok = matches!(v, "1.0.0" | "0.0.1"),
                _ => {}
            }
        }
        match media.as_str() {
            "application/openmetrics-text" if version_ok => openmetrics = openmetrics.max(q),
            "text/plain" | "text/*" | "*/*" => text = text.max(q),
            _ => {}
        }
    }
    openmetrics > 0.0 && openmetrics >= text
}

/// The whole exposition of `registry`, in the format the request's
/// `Accept` asks for.
pub(crate) fn respond(registry: &Registry, headers: &HeaderMap) -> Response<Full<Bytes>> {
    let openmetrics = headers
        .get_all(ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(wants_openmetrics);
    let mut body = String::with_capacity(16 << 10);
    let (encoded, content_type) = if openmetrics {
        (
            prometheus_client::encoding::text::encode(&mut body, registry),
            OPENMETRICS,
        )
    } else {
        (
            prometheus_client::encoding::prometheus_text::encode(&mut body, registry),
            PROMETHEUS_TEXT,
        )
    };
    let (status, body, content_type) = match encoded {
        Ok(()) => (StatusCode::OK, body, content_type),
        Err(fmt::Error) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            "metrics could not be encoded\n".to_owned(),
            "text/plain; charset=utf-8",
        ),
    };
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    r
}

/// A family of one unlabelled counter; `name` without `_total` (the
/// encoder appends it).
pub(crate) fn counter(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    value: u64,
) -> fmt::Result {
    let me = enc.encode_descriptor(name, help, None, MetricType::Counter)?;
    ConstCounter::new(value).encode(me)
}

/// A counter family, one series per row; `name` without `_total`.
pub(crate) fn counters<L: EncodeLabelSet>(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    rows: impl IntoIterator<Item = (L, u64)>,
) -> fmt::Result {
    let mut me = enc.encode_descriptor(name, help, None, MetricType::Counter)?;
    for (labels, value) in rows {
        ConstCounter::new(value).encode(me.encode_family(&labels)?)?;
    }
    Ok(())
}

/// A family of one unlabelled gauge.
pub(crate) fn gauge(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    value: i64,
) -> fmt::Result {
    let me = enc.encode_descriptor(name, help, None, MetricType::Gauge)?;
    ConstGauge::new(value).encode(me)
}

/// A gauge family, one series per row.
pub(crate) fn gauges<L: EncodeLabelSet>(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    unit: Option<&Unit>,
    rows: impl IntoIterator<Item = (L, i64)>,
) -> fmt::Result {
    let mut me = enc.encode_descriptor(name, help, unit, MetricType::Gauge)?;
    for (labels, value) in rows {
        ConstGauge::new(value).encode(me.encode_family(&labels)?)?;
    }
    Ok(())
}

/// A histogram read from cumulative bucket counts (Prometheus `le`
/// semantics, as hopgate's histograms keep or return them).
#[derive(Debug)]
pub(crate) struct Cumulative<'a> {
    /// Upper bounds, without `+Inf`.
    pub(crate) bounds: &'a [f64],
    /// One cumulative count per bound.
    pub(crate) cumulative: &'a [u64],
    /// All observations (the `+Inf` bucket).
    pub(crate) count: u64,
    pub(crate) sum: f64,
}

/// The most finite bounds a [`Cumulative`] has (room on the stack).
const MAX_BOUNDS: usize = 15;

impl EncodeMetric for Cumulative<'_> {
    fn encode(&self, mut encoder: MetricEncoder) -> fmt::Result {
        // The encoder takes per-bucket counts and accumulates them itself.
        let n = self.bounds.len().min(self.cumulative.len()).min(MAX_BOUNDS);
        let mut buckets = [(0.0f64, 0u64); MAX_BOUNDS + 1];
        let mut below = 0u64;
        let rows = self.bounds.iter().zip(self.cumulative).take(n);
        for (slot, (le, c)) in buckets.iter_mut().zip(rows) {
            // A racing scrape may read a bucket a little ahead of the one
            // below it; never a negative count.
            let c = (*c).max(below);
            *slot = (*le, c - below);
            below = c;
        }
        let count = self.count.max(below);
        buckets[n] = (f64::INFINITY, count - below);
        encoder.encode_histogram::<NoLabelSet>(self.sum, count, &buckets[..=n], None)
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Histogram
    }
}

/// A route's duration histogram ([`AtomicHistogram`]), read at scrape time.
#[derive(Debug)]
pub(crate) struct Durations<'a>(pub(crate) &'a AtomicHistogram);

impl EncodeMetric for Durations<'_> {
    fn encode(&self, encoder: MetricEncoder) -> fmt::Result {
        let (cumulative, count, sum) = self.0.read();
        Cumulative {
            bounds: &DURATION_BUCKETS,
            cumulative: &cumulative,
            count,
            sum,
        }
        .encode(encoder)
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Histogram
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::collector::Collector;
    use std::time::Duration;

    #[test]
    fn accept_negotiation() {
        // What Prometheus 2.x and 3.x send.
        assert!(wants_openmetrics(
            "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
        ));
        assert!(wants_openmetrics("application/openmetrics-text"));
        assert!(wants_openmetrics(
            "text/plain;q=0.5, application/openmetrics-text; version=\"1.0.0\""
        ));
        for text in [
            "",
            "*/*",
            "text/plain; version=0.0.4",
            "text/plain, application/openmetrics-text;q=0.5",
            "application/openmetrics-text;q=0",
            "application/openmetrics-text;version=2.0.0",
            "application/openmetrics-text;q=nonsense",
            ";;,=,;q=",
        ] {
            assert!(!wants_openmetrics(text), "{text:?}");
        }
    }

    #[derive(Debug)]
    struct Fixture(AtomicHistogram);

    impl Collector for Fixture {
        fn encode(&self, mut enc: DescriptorEncoder) -> fmt::Result {
            counter(&mut enc, "t_requests", "Requests.", 7)?;
            counters(
                &mut enc,
                "t_responses",
                "By class.",
                [([("class", "2xx")], 5u64), ([("class", "a\"b\\c\nd")], 1)],
            )?;
            gauge(&mut enc, "t_up", "Up.", 1)?;
            let mut me = enc.encode_descriptor(
                "t_duration",
                "Durations.",
                Some(&Unit::Seconds),
                MetricType::Histogram,
            )?;
            Durations(&self.0).encode(me.encode_family(&[("route", "r")])?)
        }
    }

    fn fixture() -> Registry {
        let h = AtomicHistogram::default();
        h.observe(Duration::from_micros(700));
        h.observe(Duration::from_secs(60));
        let mut r = Registry::default();
        r.register_collector(Box::new(Fixture(h)));
        r
    }

    async fn body(r: Response<Full<Bytes>>) -> (String, String) {
        use http_body_util::BodyExt;
        let ct = r.headers()[CONTENT_TYPE].to_str().unwrap().to_owned();
        let b = r.into_body().collect().await.unwrap().to_bytes();
        (ct, String::from_utf8(b.to_vec()).unwrap())
    }

    #[tokio::test]
    async fn prometheus_text_keeps_the_names_and_escapes_labels() {
        let (ct, text) = body(respond(&fixture(), &HeaderMap::new())).await;
        assert_eq!(ct, PROMETHEUS_TEXT);
        for line in [
            "# TYPE t_requests_total counter",
            "t_requests_total 7",
            "t_responses_total{class=\"2xx\"} 5",
            "t_responses_total{class=\"a\\\"b\\\\c\\nd\"} 1",
            "t_up 1",
            "# TYPE t_duration_seconds histogram",
            "t_duration_seconds_bucket{route=\"r\",le=\"0.0005\"} 0",
            "t_duration_seconds_bucket{route=\"r\",le=\"0.001\"} 1",
            "t_duration_seconds_bucket{route=\"r\",le=\"10\"} 1",
            "t_duration_seconds_bucket{route=\"r\",le=\"+Inf\"} 2",
            "t_duration_seconds_count{route=\"r\"} 2",
        ] {
            assert!(text.lines().any(|l| l == line), "{line:?} not in\n{text}");
        }
        assert!(!text.contains("# EOF"), "{text}");
    }

    #[tokio::test]
    async fn openmetrics_when_asked() {
        let mut h = HeaderMap::new();
        h.insert(
            ACCEPT,
            HeaderValue::from_static("application/openmetrics-text;version=1.0.0"),
        );
        let (ct, text) = body(respond(&fixture(), &h)).await;
        assert_eq!(ct, OPENMETRICS);
        for line in [
            "# TYPE t_requests counter",
            "t_requests_total 7",
            "# UNIT t_duration_seconds seconds",
            "t_duration_seconds_bucket{le=\"+Inf\",route=\"r\"} 2",
            "t_duration_seconds_count{route=\"r\"} 2",
        ] {
            assert!(text.lines().any(|l| l == line), "{line:?} not in\n{text}");
        }
        assert!(text.ends_with("# EOF\n"), "{text}");
    }

    #[test]
    fn a_racing_read_never_goes_negative() {
        let mut out = String::new();
        #[derive(Debug)]
        struct Racy;
        impl Collector for Racy {
            fn encode(&self, mut enc: DescriptorEncoder) -> fmt::Result {
                let me = enc.encode_descriptor("racy", "h", None, MetricType::Histogram)?;
                Cumulative {
                    bounds: &[1.0, 2.0],
                    cumulative: &[3, 2],
                    count: 1,
                    sum: 1.0,
                }
                .encode(me)
            }
        }
        let mut r = Registry::default();
        r.register_collector(Box::new(Racy));
        prometheus_client::encoding::prometheus_text::encode(&mut out, &r).unwrap();
        assert!(out.contains("racy_bucket{le=\"2\"} 3\n"), "{out}");
        assert!(out.contains("racy_bucket{le=\"+Inf\"} 3\n"), "{out}");
        assert!(out.contains("racy_count 3\n"), "{out}");
    }
}
