//! Validation of `tracing:` (OTLP span export: `enabled`, `endpoint`,
//! `protocol`, `service_name`, `sample_ratio`, `queue`, `batch`,
//! `interval`, `timeout`, `headers`). Same contract as the parent module:
//! every error with its path, never a silent default for a present value,
//! no I/O (the endpoint's host is not resolved here), no panic.

use std::time::Duration;

use super::values::{int_in, parse_header_name, parse_header_value, positive_duration};
use super::Validator;
use crate::config::raw::{RawOtlp, RawTracing, Text};
use crate::config::{OtlpConfig, TracingConfig};
use crate::units;

/// Upper bound of `queue` (spans held in memory at most).
const MAX_QUEUE: i64 = 1_000_000;
/// Upper bound of `interval` and `timeout`.
const MAX_DURATION: Duration = Duration::from_secs(600);
/// The protocols offered.
const PROTOCOLS: [&str; 1] = ["http/protobuf"];
/// Headers the exporter sets itself.
const OWN_HEADERS: [&str; 4] = [
    "host",
    "content-type",
    "content-length",
    "transfer-encoding",
];

/// A share from 0 to 1.
fn ratio(t: &Text) -> Result<f64, String> {
    match t.0.trim().parse::<f64>() {
        Ok(n) if n.is_finite() && (0.0..=1.0).contains(&n) => Ok(n),
        Ok(_) => Err(format!(
            "{:?} is out of range: expected a number from 0 to 1",
            t.0
        )),
        Err(_) => Err(format!(
            "{:?} is not a number: expected a number from 0 to 1",
            t.0
        )),
    }
}

fn bounded_duration(t: &Text) -> Result<Duration, String> {
    let d = positive_duration(t)?;
    if d > MAX_DURATION {
        return Err(format!(
            "duration {:?} is too long: at most {}",
            t.0,
            units::format_duration(MAX_DURATION)
        ));
    }
    Ok(d)
}

/// An `http://host:port/path` URL (https is not offered: put a local
/// collector in between).
fn endpoint(s: &str) -> Result<http::Uri, String> {
    let uri: http::Uri = s
        .parse()
        .map_err(|_| format!("{s:?} is not a URL: expected http://HOST:PORT/v1/traces"))?;
    match uri.scheme_str() {
        Some("http") => {}
        Some("https") => {
            return Err(format!(
                "{s:?}: https is not offered; send to a collector over http (a local \
                 OpenTelemetry Collector can forward over TLS)"
            ))
        }
        Some(other) => {
            return Err(format!(
                "{s:?}: unknown scheme {other:?}: expected http://HOST:PORT/v1/traces"
            ))
        }
        None => {
            return Err(format!(
                "{s:?} has no scheme: expected http://HOST:PORT/v1/traces"
            ))
        }
    }
    let Some(auth) = uri.authority() else {
        return Err(format!(
            "{s:?} has no host: expected http://HOST:PORT/v1/traces"
        ));
    };
    if auth.host().is_empty() {
        return Err(format!(
            "{s:?} has no host: expected http://HOST:PORT/v1/traces"
        ));
    }
    if auth.as_str().contains('@') {
        return Err(format!(
            "{s:?}: credentials in the URL are not allowed (they would be logged); use headers"
        ));
    }
    if uri.path().is_empty() || uri.path() == "/" {
        return Err(format!(
            "{s:?} has no path: OTLP/HTTP collectors take traces at /v1/traces"
        ));
    }
    Ok(uri)
}

impl Validator {
    /// `tracing:`; defaults for the fields left out.
    pub(super) fn tracing(&mut self, raw: Option<&RawTracing>) -> TracingConfig {
        let mut c = TracingConfig::default();
        if let Some(o) = raw.and_then(|r| r.otlp.as_ref()) {
            c.otlp = self.otlp(o);
        }
        c
    }

    fn otlp(&mut self, raw: &RawOtlp) -> OtlpConfig {
        const P: &str = "tracing.otlp";
        let mut c = OtlpConfig::default();
        if let Some(e) = raw.enabled {
            c.enabled = e;
        }
        if let Some(s) = &raw.endpoint {
            if let Some(u) = self.check(format!("{P}.endpoint"), endpoint(s)) {
                c.endpoint = u;
            }
        }
        if let Some(p) = &raw.protocol {
            if !PROTOCOLS.contains(&p.as_str()) {
                let m = if p == "grpc" {
                    "\"grpc\" is not offered: use http/protobuf (collectors take it on port 4318)"
                        .to_owned()
                } else {
                    super::values::unknown_choice("OTLP protocol", p, &PROTOCOLS)
                };
                self.err(format!("{P}.protocol"), m);
            }
        }
        if let Some(n) = &raw.service_name {
            if n.is_empty() || n.chars().any(char::is_control) {
                self.err(
                    format!("{P}.service_name"),
                    "must be a non-empty name without control characters",
                );
            } else {
                c.service_name.clone_from(n);
            }
        }
        if let Some(t) = &raw.sample_ratio {
            if let Some(r) = self.check(format!("{P}.sample_ratio"), ratio(t)) {
                c.sample_ratio = r;
            }
        }
        let queue = raw
            .queue
            .as_ref()
            .and_then(|t| self.check(format!("{P}.queue"), int_in(t, 1, MAX_QUEUE)));
        if let Some(q) = queue {
            c.queue = super::values::to_usize(q);
        }
        let batch = raw
            .batch
            .as_ref()
            .and_then(|t| self.check(format!("{P}.batch"), int_in(t, 1, MAX_QUEUE)));
        if let Some(b) = batch {
            c.batch = super::values::to_usize(b);
        }
        // Only when both are known: a bad one is reported already.
        let queue_ok = raw.queue.is_none() || queue.is_some();
        let batch_ok = raw.batch.is_none() || batch.is_some();
        if queue_ok && batch_ok && c.batch > c.queue {
            self.err(
                format!("{P}.batch"),
                format!(
                    "batch {} is larger than queue {}: a batch is taken from the queue",
                    c.batch, c.queue
                ),
            );
        }
        if let Some(t) = &raw.interval {
            if let Some(d) = self.check(format!("{P}.interval"), bounded_duration(t)) {
                c.interval = d;
            }
        }
        if let Some(t) = &raw.timeout {
            if let Some(d) = self.check(format!("{P}.timeout"), bounded_duration(t)) {
                c.timeout = d;
            }
        }
        for (name, value) in &raw.headers {
            let path = format!("{P}.headers.{name}");
            let Some(n) = self.check(path.clone(), parse_header_name(name)) else {
                continue;
            };
            if OWN_HEADERS.contains(&n.as_str()) {
                self.err(path, format!("{name:?} is set by the exporter itself"));
                continue;
            }
            // Values may be secrets: the message never repeats them.
            let v = match parse_header_value(value) {
                Ok(mut v) => {
                    v.set_sensitive(true);
                    v
                }
                Err(_) => {
                    self.err(
                        path,
                        "invalid header value: control characters and leading or trailing \
                         whitespace are not allowed",
                    );
                    continue;
                }
            };
            c.headers.push((n, v));
        }
        c
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::config::{parse, validate, Format, OtlpConfig};

    const BASE: &str = "listeners: [{ name: public, address: 127.0.0.1:8080 }]\n\
                        services: [{ name: a, nodes: [{ id: a1, address: 127.0.0.1:9000 }] }]\n\
                        routes: [{ id: r, match: { path_prefix: / }, service: a }]\n";

    fn otlp(block: &str) -> OtlpConfig {
        let doc = format!("{BASE}tracing: {{ otlp: {block} }}\n");
        validate(&parse(&doc, Format::Yaml).expect("parses"))
            .expect("valid")
            .tracing
            .otlp
    }

    fn errors(block: &str) -> Vec<String> {
        let doc = format!("{BASE}tracing: {{ otlp: {block} }}\n");
        match validate(&parse(&doc, Format::Yaml).expect("parses")) {
            Ok(_) => Vec::new(),
            Err(e) => e.into_iter().map(|e| e.to_string()).collect(),
        }
    }

    #[test]
    fn defaults_and_values() {
        let c = validate(&parse(BASE, Format::Yaml).unwrap()).unwrap();
        assert_eq!(c.tracing.otlp, OtlpConfig::default());
        assert!(!c.tracing.otlp.enabled);
        let c = otlp(
            "{ enabled: true, endpoint: \"http://collector:4318/v1/traces\", \
             protocol: http/protobuf, service_name: edge, sample_ratio: 0.25, queue: 100, \
             batch: 10, interval: 250ms, timeout: 2s, headers: { X-Api-Key: s3cret } }",
        );
        assert!(c.enabled);
        assert_eq!(c.endpoint, "http://collector:4318/v1/traces");
        assert_eq!(c.service_name, "edge");
        assert_eq!(c.sample_ratio, 0.25);
        assert_eq!((c.queue, c.batch), (100, 10));
        assert_eq!(c.interval, Duration::from_millis(250));
        assert_eq!(c.timeout, Duration::from_secs(2));
        assert_eq!(c.headers.len(), 1);
        assert_eq!(c.headers[0].0, "x-api-key");
        assert!(c.headers[0].1.is_sensitive());
        assert_eq!(otlp("{ sample_ratio: 0 }").sample_ratio, 0.0);
        assert_eq!(otlp("{ sample_ratio: 1 }").sample_ratio, 1.0);
    }

    #[test]
    fn every_error_names_its_field() {
        let cases = [
            ("{ endpoint: \"127.0.0.1:4318\" }", "tracing.otlp.endpoint"),
            (
                "{ endpoint: \"ftp://c:1/v1/traces\" }",
                "tracing.otlp.endpoint",
            ),
            (
                "{ endpoint: \"https://c:1/v1/traces\" }",
                "tracing.otlp.endpoint",
            ),
            ("{ endpoint: \"http://c:4318\" }", "tracing.otlp.endpoint"),
            (
                "{ endpoint: \"http://u:p@c:4318/v1/traces\" }",
                "tracing.otlp.endpoint",
            ),
            ("{ endpoint: \"http://\" }", "tracing.otlp.endpoint"),
            ("{ protocol: grpc }", "tracing.otlp.protocol"),
            ("{ protocol: http/protobf }", "tracing.otlp.protocol"),
            ("{ service_name: \"\" }", "tracing.otlp.service_name"),
            ("{ sample_ratio: 1.5 }", "tracing.otlp.sample_ratio"),
            ("{ sample_ratio: -0.1 }", "tracing.otlp.sample_ratio"),
            ("{ sample_ratio: half }", "tracing.otlp.sample_ratio"),
            ("{ sample_ratio: .nan }", "tracing.otlp.sample_ratio"),
            ("{ queue: 0 }", "tracing.otlp.queue"),
            ("{ queue: 2000000 }", "tracing.otlp.queue"),
            ("{ batch: 0 }", "tracing.otlp.batch"),
            ("{ queue: 10, batch: 20 }", "tracing.otlp.batch"),
            ("{ batch: 5000 }", "tracing.otlp.batch"),
            ("{ interval: 0s }", "tracing.otlp.interval"),
            ("{ timeout: 1h }", "tracing.otlp.timeout"),
            ("{ timeout: soon }", "tracing.otlp.timeout"),
            (
                "{ headers: { \"bad name\": x } }",
                "tracing.otlp.headers.bad name",
            ),
            (
                "{ headers: { Content-Type: x } }",
                "tracing.otlp.headers.Content-Type",
            ),
            (
                "{ headers: { X-Key: \" s3cret\" } }",
                "tracing.otlp.headers.X-Key",
            ),
        ];
        for (block, path) in cases {
            let e = errors(block);
            assert_eq!(e.len(), 1, "{block}: {e:?}");
            assert!(e[0].starts_with(&format!("{path}: ")), "{block}: {e:?}");
            assert!(!e[0].contains("s3cret"), "a header value leaked: {e:?}");
        }
        // Several at once, each under its own path.
        let e = errors("{ queue: x, batch: y, sample_ratio: 2 }");
        assert_eq!(e.len(), 3, "{e:?}");
    }

    #[test]
    fn it_is_a_per_process_section_in_fleet_mode() {
        let e = crate::config::fleet::parse_runtime("tracing: { otlp: { enabled: true } }\n")
            .expect_err("a bootstrap section in the etcd document");
        assert_eq!(e[0].path, "tracing");
        let local = parse(
            &format!("{BASE}tracing: {{ otlp: {{ enabled: true }} }}\n"),
            Format::Yaml,
        )
        .unwrap();
        let composed = crate::config::fleet::compose(&local, &crate::config::RawConfig::default());
        assert_eq!(composed.tracing, local.tracing);
    }
}
