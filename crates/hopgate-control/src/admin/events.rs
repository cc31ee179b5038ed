//! `GET /admin/v1/events`: the admin API's live feed, as Server-Sent Events.
//!
//! Owns the per-subscriber stream: first a `retry:` (the reconnection
//! delay), then on a new connection a `config` event and one `node` event
//! per node (the state); then `hop` events as the data plane records hops
//! (its broadcast, `hopgate_proxy::telemetry::subscribe_hops`), `config` when a version is
//! applied, `node` when a node's state changes (compared every second),
//! `stats` every second (request and error rates, p50/p99 of that second,
//! in-flight requests, the fleet), a `: keep-alive` comment every 15 s.
//! `hop`, `node` and `config` events carry an `id:` from the process's
//! journal (`admin/events/journal.rs`); a client that reconnects with
//! `Last-Event-ID` (or `?last_event_id=`) gets exactly the events after that
//! id, then the live stream, or a `lagged` event and the state when the id
//! is older than the journal's ring. A subscriber that does not read fast
//! enough loses events (its queue is bounded) and then gets a `lagged`
//! event with how many it missed. Streams end when the admin API shuts
//! down or the client goes away.
//!
//! Also owns event tickets: browsers' `EventSource` cannot send an
//! `Authorization` header, so a client holding the admin token asks
//! `POST /admin/v1/events/ticket` for a ticket (60 s, HMAC-SHA256 under a
//! per-process random key) and opens `/admin/v1/events?ticket=...`. The
//! token itself never travels in a URL.
//!
//! Must not touch: the request path (it only reads counters and the feed),
//! the snapshot (read only).

use std::collections::HashMap;
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use hmac::{Hmac, Mac};
use http::header::{HeaderValue, CACHE_CONTROL, CONTENT_TYPE};
use http::Response;
use hyper::body::{Body, Frame};
use serde_json::{json, Value};
use sha2::Sha256;
use tokio::sync::{broadcast, mpsc, watch};

use hopgate_core::session::unix_now;
use hopgate_proxy::telemetry::{self, Reading};

use crate::admin::query::Query;
use crate::admin::respond::{ok, AdminResponse};
use crate::admin::Admin;

pub(crate) mod journal;

/// How long a ticket opens streams for.
pub(crate) const TICKET_TTL_SECS: u64 = 60;
/// Frames queued for one subscriber before it starts losing events.
const QUEUE: usize = 64;
/// How often `stats` goes out and node states are compared.
const TICK: Duration = Duration::from_secs(1);
/// When the first `stats` goes out after connect.
const FIRST_TICK: Duration = Duration::from_millis(250);
/// Ticks between keep-alive comments.
const KEEP_ALIVE_TICKS: u64 = 15;
/// The reconnection delay a client is asked to use (`retry:`).
const RETRY_MS: u64 = 2000;
/// Ticks between recounts of the sessions bound to each node (a pass over
/// the session store).
const SESSION_COUNT_TICKS: u64 = 5;

type HmacSha256 = Hmac<Sha256>;

/// The key tickets are signed with: random, per process.
pub(crate) fn ticket_key() -> [u8; 32] {
    let mut key = [0u8; 32];
    if getrandom::fill(&mut key).is_err() {
        // No randomness: a key nobody can know beforehand is still needed;
        // tickets then fail to verify and only the bearer token works.
        key = [0; 32];
        key[0] = 1;
    }
    key
}

fn ticket_mac(key: &[u8; 32], expires: u64) -> HmacSha256 {
    let mut mac = <HmacSha256 as Mac>::new_from_slice(key).expect("HMAC takes any key length");
    mac.update(b"hopgate-events:");
    mac.update(expires.to_string().as_bytes());
    mac
}

/// A ticket valid until `now + TICKET_TTL_SECS`: `EXPIRES.HEXMAC`.
pub(crate) fn mint_ticket(key: &[u8; 32], now: u64) -> String {
    let expires = now + TICKET_TTL_SECS;
    let tag = ticket_mac(key, expires).finalize().into_bytes();
    let mut s = format!("{expires}.");
    for b in tag {
        s.push_str(&format!("{b:02x}"));
    }
    s
}

/// Whether `ticket` was minted with `key` and has not expired at `now`
/// (compared in constant time).
pub(crate) fn ticket_valid(key: &[u8; 32], ticket: &str, now: u64) -> bool {
    let Some((expires, hex)) = ticket.split_once('.') else {
        return false;
    };
    let Ok(expires) = expires.parse::<u64>() else {
        return false;
    };
    if expires < now || expires > now + TICKET_TTL_SECS || hex.len() != 64 {
        return false;
    }
    let mut tag = [0u8; 32];
    for (i, chunk) in hex.as_bytes().chunks(2).enumerate() {
        let Some(b) = std::str::from_utf8(chunk)
            .ok()
            .and_then(|c| u8::from_str_radix(c, 16).ok())
        else {
            return false;
        };
        tag[i] = b;
    }
    ticket_mac(key, expires).verify_slice(&tag).is_ok()
}

/// The `ticket` query parameter of a request target, if any.
pub(crate) fn ticket_of(query: &Query) -> Option<&str> {
    query.first("ticket")
}

/// `POST /admin/v1/events/ticket`: a ticket for `?ticket=`.
pub(crate) fn ticket(admin: &Admin) -> AdminResponse {
    ok(&json!({
        "ticket": mint_ticket(&admin.ticket_key, unix_now()),
        "expires_in": TICKET_TTL_SECS,
    }))
}

/// The body of an event stream: frames from the subscriber's task.
pub(crate) struct SseBody {
    rx: mpsc::Receiver<Bytes>,
}

impl Body for SseBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.rx.poll_recv(cx).map(|f| f.map(|b| Ok(Frame::data(b))))
    }
}

/// Starts a subscriber's stream from `from` (see [`journal`]); it ends when
/// `shutdown` turns true or the client goes away.
pub(crate) fn stream(
    admin: Arc<Admin>,
    shutdown: watch::Receiver<bool>,
    from: journal::Resume,
) -> Response<SseBody> {
    let (tx, rx) = mpsc::channel(QUEUE);
    let journal = journal::start(&admin, &shutdown);
    tokio::spawn(run(admin, journal, from, tx, shutdown));
    let mut r = Response::new(SseBody { rx });
    let h = r.headers_mut();
    h.insert(CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    h.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert("x-accel-buffering", HeaderValue::from_static("no"));
    r
}

/// One subscriber's outgoing queue, counting what it could not take.
struct Out {
    tx: mpsc::Sender<Bytes>,
    missed: u64,
}

impl Out {
    fn frame(&mut self, frame: Bytes) -> bool {
        match self.tx.try_send(frame) {
            Ok(()) => true,
            Err(_) => {
                self.missed += 1;
                false
            }
        }
    }

    /// Queues `frame`, after the `lagged` notice owed.
    fn push(&mut self, frame: Bytes) {
        if !self.flush_lagged() {
            self.missed += 1;
            return;
        }
        self.frame(frame);
    }

    /// Queues `event: kind` with `data` (no id: not in the journal).
    fn send(&mut self, kind: &str, data: &Value) {
        self.push(Bytes::from(format!("event: {kind}\ndata: {data}\n\n")));
    }

    fn flush_lagged(&mut self) -> bool {
        if self.missed == 0 {
            return true;
        }
        let notice = format!("event: lagged\ndata: {{\"missed\":{}}}\n\n", self.missed);
        match self.tx.try_send(Bytes::from(notice)) {
            Ok(()) => {
                self.missed = 0;
                true
            }
            Err(_) => false,
        }
    }
}

async fn run(
    admin: Arc<Admin>,
    journal: Arc<journal::Journal>,
    from: journal::Resume,
    tx: mpsc::Sender<Bytes>,
    mut shutdown: watch::Receiver<bool>,
) {
    let opening = journal.open(&admin, from);
    let mut live = opening.live;
    let mut last = opening.head;
    // The reconnection delay once, then what is owed: waiting for room
    // (a replay may be longer than the queue).
    let first = std::iter::once(Bytes::from(format!("retry: {RETRY_MS}\n\n")));
    for f in first.chain(opening.frames) {
        if tx.send(f).await.is_err() {
            return;
        }
    }
    drop(journal);
    let mut out = Out { tx, missed: 0 };
    let mut stats = Window::now();
    // The first stats soon after connect (over a short window), then every TICK.
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + FIRST_TICK, TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut ticks = 0u64;
    loop {
        tokio::select! {
            biased;
            _ = shutdown.wait_for(|s| *s) => break,
            () = out.tx.closed() => break,
            r = live.recv() => match r {
                // Ids only grow; the check keeps a replayed event from
                // going out twice whatever the timing.
                Ok(e) if e.id > last => {
                    last = e.id;
                    out.push(e.frame.clone());
                }
                Ok(_) => {}
                Err(broadcast::error::RecvError::Lagged(n)) => {
                    out.missed += n;
                    out.flush_lagged();
                }
                Err(broadcast::error::RecvError::Closed) => break,
            },
            _ = tick.tick() => {
                ticks += 1;
                out.send("stats", &stats.next(&admin));
                if ticks.is_multiple_of(KEEP_ALIVE_TICKS) && out.flush_lagged() {
                    out.frame(Bytes::from_static(b": keep-alive\n\n"));
                }
            }
        }
    }
}

/// [`config_json`] once the applied version's record is in the history
/// (the version is announced just before its record is written).
async fn applied_config(admin: &Admin) -> Value {
    for _ in 0..100 {
        let v = config_json(admin);
        if !v["source"].is_null() {
            return v;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    config_json(admin)
}

/// The current config version, where it came from, and reload trouble.
pub(crate) fn config_json(admin: &Admin) -> Value {
    let control = admin.control();
    let version = control.snapshot().load().version;
    let record = control
        .versions()
        .into_iter()
        .find(|v| v.version == version);
    json!({
        "version": version,
        "hash": record.as_ref().map(|r| r.hash.clone()),
        "source": record.as_ref().map(|r| r.source.clone()),
        "applied_at": record.as_ref().map(|r| r.applied_at),
        "reload_failures": control.reload_failures(),
        "last_error": control.last_error(),
    })
}

/// Counters at the start of a stats window.
pub(crate) struct Window {
    at: Instant,
    requests: u64,
    errors: u64,
    latency: Reading,
}

impl Window {
    pub(crate) fn now() -> Window {
        let counters = telemetry::counters();
        Window {
            at: Instant::now(),
            requests: counters.requests,
            errors: counters.responses[5],
            latency: telemetry::request_latency(),
        }
    }

    /// The `stats` event for the window since the last call.
    pub(crate) fn next(&mut self, admin: &Admin) -> Value {
        let now = Window::now();
        let secs = now.at.duration_since(self.at).as_secs_f64().max(1e-3);
        let window = now.latency.since(&self.latency);
        let ms = |q| window.quantile(q).map(|d| d.as_micros() as f64 / 1e3);
        let snap = admin.control().snapshot().load();
        let in_flight: u64 = snap
            .services
            .iter()
            .flat_map(|s| s.nodes.iter())
            .map(|n| u64::from(n.state.in_flight()))
            .sum();
        let v = json!({
            "at": unix_now(),
            "window_s": secs,
            "rps": now.requests.saturating_sub(self.requests) as f64 / secs,
            "errors_per_s": now.errors.saturating_sub(self.errors) as f64 / secs,
            "p50_ms": ms(0.5),
            "p99_ms": ms(0.99),
            "requests_total": now.requests,
            "errors_total": now.errors,
            "in_flight": in_flight,
            "fleet": admin.fleet().map(|f| f.json(snap.version)),
        });
        *self = now;
        v
    }
}

/// What a subscriber last sent for each node, to send only changes.
#[derive(Default)]
struct NodeWatch {
    sent: HashMap<(String, String), Value>,
    bound: HashMap<(Arc<str>, Arc<str>), usize>,
}

impl NodeWatch {
    /// Counts the sessions bound to each node (one pass over the store).
    fn recount(&mut self, admin: &Admin) {
        self.bound.clear();
        if let Some(s) = admin.sessions() {
            s.store.for_each(&mut |_, b| {
                *self
                    .bound
                    .entry((Arc::clone(&b.service), Arc::clone(&b.node)))
                    .or_insert(0) += 1;
            });
        }
    }

    /// Every node whose view changed since the last call (and every node
    /// that is gone, as `{"service","id","removed":true}`).
    fn changed(&mut self, admin: &Admin) -> Vec<((String, String), Value)> {
        let snap = admin.control().snapshot().load();
        let now_ms = hopgate_core::node::now_ms();
        let mut seen = HashMap::with_capacity(self.sent.len());
        let mut changed = Vec::new();
        for svc in &snap.services {
            for (i, n) in svc.nodes.iter().enumerate() {
                let key = (svc.name.clone(), n.id.clone());
                let bound = self
                    .bound
                    .iter()
                    .find(|((s, id), _)| **s == *svc.name && **id == *n.id)
                    .map_or(0, |(_, c)| *c);
                let s = &n.state;
                let relaxed_left = s
                    .is_relaxed(now_ms)
                    .then(|| s.relaxed_until().saturating_sub(now_ms) / 1000);
                let v = json!({
                    "service": svc.name,
                    "id": n.id,
                    "address": n.address.to_string(),
                    "version": n.version,
                    "health": s.health(),
                    "draining": s.is_draining(),
                    "ejected": s.is_ejected(now_ms),
                    "available": s.is_available(now_ms),
                    "circuit": s.circuit(),
                    // Slow start in steps of 10 %: an event per step, not
                    // per percent (100: warm or off).
                    "slow_start_percent": svc.all.balancer.ramp_of(i, now_ms) / 100 * 10,
                    "in_flight": s.in_flight(),
                    "requests": s.requests(),
                    "failures": s.failures(),
                    "sessions_bound": bound,
                    "maintenance": {
                        "relaxed_left_s": relaxed_left,
                        "moved_to": s.moved_to().map(|a| a.to_string()),
                        "unreachable": s.is_unreachable(),
                    },
                });
                // `requests`/`failures` move with every request: a change
                // there alone is no event.
                if self.sent.get(&key).is_none_or(|old| differs(old, &v)) {
                    changed.push((key.clone(), v.clone()));
                    seen.insert(key, v);
                } else if let Some(old) = self.sent.remove(&key) {
                    seen.insert(key, old);
                }
            }
        }
        for (service, id) in self.sent.keys() {
            if !seen.contains_key(&(service.clone(), id.clone())) {
                changed.push((
                    (service.clone(), id.clone()),
                    json!({ "service": service, "id": id, "removed": true }),
                ));
            }
        }
        self.sent = seen;
        changed
    }
}

/// Whether a node's view changed in a way worth an event: anything but
/// its running request and failure counts.
fn differs(old: &Value, new: &Value) -> bool {
    let (Some(o), Some(n)) = (old.as_object(), new.as_object()) else {
        return true;
    };
    o.iter()
        .any(|(k, v)| !matches!(k.as_str(), "requests" | "failures") && n.get(k) != Some(v))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tickets_verify_expire_and_resist_tampering() {
        let key = [7u8; 32];
        let t = mint_ticket(&key, 1000);
        assert!(ticket_valid(&key, &t, 1000));
        assert!(ticket_valid(&key, &t, 1000 + TICKET_TTL_SECS));
        assert!(!ticket_valid(&key, &t, 1001 + TICKET_TTL_SECS), "expired");
        assert!(!ticket_valid(&[8u8; 32], &t, 1000), "other key");
        let (_, mac) = t.split_once('.').unwrap();
        let later = format!("{}.{mac}", 1000 + TICKET_TTL_SECS + 5);
        assert!(!ticket_valid(&key, &later, 1000), "expiry moved");
        for bad in [
            "",
            ".",
            "x.y",
            "1060.zz",
            "1060.",
            &t[..t.len() - 1],
            &format!("{t}0"),
        ] {
            assert!(!ticket_valid(&key, bad, 1000), "{bad:?}");
        }
        assert_eq!(
            ticket_of(&Query::parse(Some("a=1&ticket=abc"))),
            Some("abc")
        );
        assert_eq!(ticket_of(&Query::default()), None);
    }

    #[tokio::test]
    async fn a_slow_subscriber_loses_events_and_is_told_how_many() {
        let (tx, mut rx) = mpsc::channel(2);
        let mut out = Out { tx, missed: 0 };
        for i in 0..5 {
            out.send("hop", &json!(i));
        }
        assert_eq!(rx.recv().await.unwrap(), "event: hop\ndata: 0\n\n");
        assert_eq!(rx.recv().await.unwrap(), "event: hop\ndata: 1\n\n");
        out.send("hop", &json!(5));
        assert_eq!(
            rx.recv().await.unwrap(),
            "event: lagged\ndata: {\"missed\":3}\n\n"
        );
        assert_eq!(rx.recv().await.unwrap(), "event: hop\ndata: 5\n\n");
        assert_eq!(out.missed, 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_stream_starts_with_the_state_keeps_alive_and_ends_at_shutdown() {
        use http_body_util::BodyExt;

        use crate::control::{Control, Source};

        let yaml = "listeners:\n  - { name: public, address: 127.0.0.1:0 }\nadmin: { address: 127.0.0.1:0 }\nservices:\n  - name: s\n    nodes:\n      - { id: a, address: \"127.0.0.1:1\" }\nroutes:\n  - { id: r, match: { path_prefix: / }, service: s }\n";
        let cfg = hopgate_core::config::load(yaml, hopgate_core::config::Format::Yaml)
            .expect("a valid config");
        let admin = Admin::new(Control::new(cfg, Source::Embedded), None, None);
        let (stop, rx) = watch::channel(false);
        let mut frames: Vec<String> = Vec::new();
        let mut body = stream(admin, rx, journal::Resume::Start).into_body();
        while !frames.iter().any(|f| f.starts_with(": keep-alive")) {
            let f = body.frame().await.expect("a frame").expect("no error");
            frames.push(String::from_utf8(f.into_data().expect("data").to_vec()).unwrap());
        }
        assert_eq!(frames[0], format!("retry: {RETRY_MS}\n\n"));
        assert!(
            frames[1].starts_with("id: 0\nevent: config\ndata: {"),
            "{frames:?}"
        );
        assert!(frames[1].contains("\"source\":\"embedded\""), "{frames:?}");
        assert!(
            frames[2].starts_with("id: 0\nevent: node\n") && frames[2].contains("\"id\":\"a\"")
        );
        // 250 ms, then every second: the keep-alive follows the 15th.
        let stats = frames
            .iter()
            .filter(|f| f.starts_with("event: stats\n"))
            .count();
        assert_eq!(stats, KEEP_ALIVE_TICKS as usize, "{frames:?}");
        assert_eq!(frames.last().unwrap(), ": keep-alive\n\n");
        stop.send(true).unwrap();
        assert!(body.frame().await.is_none(), "the stream ends at shutdown");
    }

    #[test]
    fn running_counts_alone_are_no_node_change() {
        let a = json!({ "id": "n", "requests": 1, "failures": 0, "draining": false });
        let b = json!({ "id": "n", "requests": 9, "failures": 2, "draining": false });
        let c = json!({ "id": "n", "requests": 9, "failures": 2, "draining": true });
        assert!(!differs(&a, &b));
        assert!(differs(&b, &c));
    }
}
