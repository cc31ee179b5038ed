//! The export task: takes records from the queue in batches and posts each
//! batch to the collector (`POST endpoint`, `application/x-protobuf`) with
//! hyper's HTTP/1.1 client, bounded by `tracing.otlp.timeout`.
//!
//! A batch goes when `batch` records wait (the request path wakes the task)
//! or `interval` after the last one. A failed batch is dropped and counted
//! (never kept: memory stays bounded by the queue), and the next one waits
//! a backoff that doubles from `interval` up to [`MAX_BACKOFF`]; records
//! made meanwhile wait in the queue, and past its size are dropped and
//! counted. The config is read from the running snapshot before every
//! batch, so a reload applies (a new `queue` size swaps the queue, carrying
//! the waiting records over). On shutdown the queue is flushed, each batch
//! bounded by `timeout`, stopping at the first failure.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use crossbeam_queue::ArrayQueue;
use hopgate_core::config::OtlpConfig;
use http::header::{HeaderValue, CONTENT_TYPE, HOST, USER_AGENT};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;

use super::encode::{encode, Origin};
use super::{Exporter, Span, BATCHES_EXPORTED, BATCHES_FAILED, SPANS_DROPPED, SPANS_EXPORTED};
use crate::upstream::SharedSnapshot;

/// The longest wait after failed exports.
const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// The most of a collector's answer that is read.
const MAX_ANSWER: usize = 64 * 1024;

/// Starts the export task: it runs until `stop` turns true, then flushes
/// the queue and ends. The returned [`Exporter`] goes to
/// [`crate::Forwarder::with_otlp`].
pub fn start(
    snapshot: SharedSnapshot,
    mut stop: tokio::sync::watch::Receiver<bool>,
) -> (Arc<Exporter>, tokio::task::JoinHandle<()>) {
    let cfg = snapshot.load().config.tracing.otlp.clone();
    let (exporter, mut woken) = Exporter::new(cfg.queue, cfg.batch);
    let exporter = Arc::new(exporter);
    let ex = Arc::clone(&exporter);
    let task = tokio::spawn(async move {
        let mut failures: u32 = 0;
        let mut was_failing = false;
        loop {
            let cfg = snapshot.load().config.tracing.otlp.clone();
            resize(&ex, &cfg);
            let wait = if failures == 0 {
                cfg.interval
            } else {
                backoff(cfg.interval, failures)
            };
            let full = ex.queue.load().len() >= cfg.batch;
            if !(full && failures == 0) {
                tokio::select! {
                    () = tokio::time::sleep(wait) => {}
                    _ = woken.recv(), if failures == 0 => {}
                    _ = stop.wait_for(|s| *s) => break,
                }
            }
            let batch = take(&ex, cfg.batch);
            if batch.is_empty() {
                continue;
            }
            match send(&cfg, &batch).await {
                Ok(n) => {
                    failures = 0;
                    if was_failing {
                        was_failing = false;
                        tracing::info!(endpoint = %cfg.endpoint, "OTLP export works again");
                    }
                    SPANS_EXPORTED.fetch_add(n, Ordering::Relaxed);
                    BATCHES_EXPORTED.fetch_add(1, Ordering::Relaxed);
                }
                Err(e) => {
                    failures = failures.saturating_add(1);
                    was_failing = true;
                    let lost: u64 = batch.iter().map(|s| s.count()).sum();
                    SPANS_DROPPED.fetch_add(lost, Ordering::Relaxed);
                    let failed = BATCHES_FAILED.fetch_add(1, Ordering::Relaxed) + 1;
                    tracing::warn!(
                        endpoint = %cfg.endpoint,
                        error = %e,
                        spans = lost,
                        batches_failed = failed,
                        retry_in_ms = backoff(cfg.interval, failures).as_millis() as u64,
                        "OTLP export failed; the batch is dropped"
                    );
                }
            }
        }
        flush(&snapshot, &ex).await;
    });
    (exporter, task)
}

/// `interval × 2^(failures-1)`, at most [`MAX_BACKOFF`] (and never less
/// than `interval`).
fn backoff(interval: Duration, failures: u32) -> Duration {
    let factor = 1u32 << failures.saturating_sub(1).min(16);
    interval
        .saturating_mul(factor)
        .min(MAX_BACKOFF.max(interval))
}

/// A new queue when `queue` changed; waiting records move over (those past
/// the new size are dropped and counted).
fn resize(ex: &Exporter, cfg: &OtlpConfig) {
    ex.batch.store(cfg.batch.max(1), Ordering::Relaxed);
    if ex.queue.load().capacity() == cfg.queue.max(1) {
        return;
    }
    let old = ex.queue.swap(Arc::new(ArrayQueue::new(cfg.queue.max(1))));
    let new = ex.queue.load();
    while let Some(s) = old.pop() {
        if let Err(s) = new.push(s) {
            SPANS_DROPPED.fetch_add(s.count(), Ordering::Relaxed);
        }
    }
}

// The records stay in the boxes the request path made (no copy).
#[allow(clippy::vec_box)]
fn take(ex: &Exporter, max: usize) -> Vec<Box<Span>> {
    let q = ex.queue.load();
    let mut batch = Vec::with_capacity(max.min(q.len()));
    while batch.len() < max {
        match q.pop() {
            Some(s) => batch.push(s),
            None => break,
        }
    }
    batch
}

/// Everything still queued, batch by batch, until the first failure.
async fn flush(snapshot: &SharedSnapshot, ex: &Exporter) {
    let cfg = snapshot.load().config.tracing.otlp.clone();
    let mut sent = 0u64;
    loop {
        let batch = take(ex, cfg.batch.max(1));
        if batch.is_empty() {
            break;
        }
        match send(&cfg, &batch).await {
            Ok(n) => {
                sent += n;
                SPANS_EXPORTED.fetch_add(n, Ordering::Relaxed);
                BATCHES_EXPORTED.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => {
                let mut lost: u64 = batch.iter().map(|s| s.count()).sum();
                while let Some(s) = ex.queue.load().pop() {
                    lost += s.count();
                }
                SPANS_DROPPED.fetch_add(lost, Ordering::Relaxed);
                BATCHES_FAILED.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(endpoint = %cfg.endpoint, error = %e, spans = lost, "OTLP: final flush failed; spans dropped");
                return;
            }
        }
    }
    if sent > 0 {
        tracing::info!(spans = sent, "OTLP: final flush done");
    }
}

/// Posts one batch; the number of spans the collector took.
async fn send(cfg: &OtlpConfig, batch: &[Box<Span>]) -> Result<u64, String> {
    let origin = Origin {
        service_name: &cfg.service_name,
    };
    let (body, n) = encode(batch, &origin);
    match tokio::time::timeout(cfg.timeout, post(cfg, Bytes::from(body))).await {
        Ok(Ok(())) => Ok(n),
        Ok(Err(e)) => Err(e),
        Err(_) => Err(format!("no answer within {:?}", cfg.timeout)),
    }
}

async fn post(cfg: &OtlpConfig, body: Bytes) -> Result<(), String> {
    let auth = cfg
        .endpoint
        .authority()
        .ok_or_else(|| "the endpoint has no host".to_owned())?;
    let port = auth.port_u16().unwrap_or(80);
    // IPv6 literals come bracketed in the URL.
    let host = auth.host().trim_start_matches('[').trim_end_matches(']');
    let stream = tokio::net::TcpStream::connect((host, port))
        .await
        .map_err(|e| format!("connect: {e}"))?;
    let _ = stream.set_nodelay(true);
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| format!("handshake: {e}"))?;
    let driver = tokio::spawn(conn);
    let path = cfg
        .endpoint
        .path_and_query()
        .map_or("/v1/traces", |p| p.as_str());
    let mut req = http::Request::post(path)
        .header(HOST, auth.as_str())
        .header(
            CONTENT_TYPE,
            HeaderValue::from_static("application/x-protobuf"),
        )
        .header(
            USER_AGENT,
            HeaderValue::from_static(concat!("hopgate/", env!("CARGO_PKG_VERSION"))),
        )
        .body(Full::new(body))
        .map_err(|e| format!("request: {e}"))?;
    for (name, value) in &cfg.headers {
        req.headers_mut().insert(name.clone(), value.clone());
    }
    let result = async {
        let resp = sender
            .send_request(req)
            .await
            .map_err(|e| format!("send: {e}"))?;
        let status = resp.status();
        // The answer is read (bounded) so the collector sees a clean close.
        let _ = http_body_util::Limited::new(resp.into_body(), MAX_ANSWER)
            .collect()
            .await;
        if status.is_success() {
            Ok(())
        } else {
            Err(format!("the collector answered {status}"))
        }
    }
    .await;
    drop(sender);
    driver.abort();
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_its_bound() {
        let s = Duration::from_secs(1);
        assert_eq!(backoff(s, 1), s);
        assert_eq!(backoff(s, 2), 2 * s);
        assert_eq!(backoff(s, 4), 8 * s);
        assert_eq!(backoff(s, 9), MAX_BACKOFF);
        assert_eq!(backoff(s, u32::MAX), MAX_BACKOFF);
        // An interval past the bound is never shortened.
        assert_eq!(backoff(Duration::from_secs(60), 3), Duration::from_secs(60));
    }
}
