//! The event journal behind `Last-Event-ID`: one per admin API.
//!
//! Owns the numbering and the ring of recent `hop`, `node` and `config`
//! events. Every such event gets the next id of a per-process sequence
//! (1, 2, 3, ...) and is kept, already rendered as an SSE frame, in a ring
//! of the last [`RING`] events; live subscribers receive the same frames
//! through a broadcast. The journal also holds the current state (the
//! config and the last view of every node) so that a new subscriber starts
//! from exactly the state as of the last id, and a reconnecting one gets
//! exactly the events after the id it saw, no more, no fewer.
//!
//! The journal starts with the first subscriber ([`start`]) and runs until
//! the admin API shuts down, so that events that happen while nobody is
//! connected can be replayed later. `stats` events are per subscriber and
//! carry no id.
//!
//! Must not touch: the request path (it reads the hop feed and the
//! snapshot), the subscriber's queue (`super` owns it).

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use bytes::Bytes;
use parking_lot::{Mutex, MutexGuard};
use serde_json::{json, Value};
use tokio::sync::{broadcast, watch};

use hopgate_proxy::telemetry;

use super::{applied_config, config_json, NodeWatch, SESSION_COUNT_TICKS, TICK};
use crate::admin::query::Query;
use crate::admin::Admin;

/// Events kept for replay.
pub(crate) const RING: usize = 512;
/// Live frames a subscriber may fall behind before it misses some.
const LIVE: usize = 1024;

/// One journal event: its id and its rendered frame.
#[derive(Debug)]
pub(crate) struct Entry {
    pub(crate) id: u64,
    pub(crate) frame: Bytes,
}

/// Where a subscriber wants its stream to start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Resume {
    /// A new subscriber: the current state, then live events.
    Start,
    /// A reconnecting one: the events after this id, then live events.
    After(u64),
    /// An id this process never gave (it restarted, or the id is garbage).
    Unknown,
}

/// `Last-Event-ID` (the header wins) or `?last_event_id=` → where to start.
pub(crate) fn from_request(header: Option<&[u8]>, query: &Query) -> Resume {
    let value = match header {
        Some(h) => Some(std::str::from_utf8(h).unwrap_or("?")),
        None => query.first("last_event_id"),
    };
    match value.map(str::trim) {
        None | Some("") => Resume::Start,
        Some(v) => v.parse().map_or(Resume::Unknown, Resume::After),
    }
}

/// `id: N`, `event: kind`, `data: JSON` as one frame.
fn frame(id: u64, kind: &str, data: &Value) -> Bytes {
    Bytes::from(format!("id: {id}\nevent: {kind}\ndata: {data}\n\n"))
}

struct Ring {
    /// The last id given (0: none yet).
    last: u64,
    entries: VecDeque<Arc<Entry>>,
    /// The config as of `last`.
    config: Value,
    /// The nodes as of `last`.
    nodes: NodeWatch,
}

pub(crate) struct Journal {
    ring: Mutex<Ring>,
    live: broadcast::Sender<Arc<Entry>>,
}

/// What a subscriber sends first, and the id its live stream follows.
pub(crate) struct Opening {
    pub(crate) frames: Vec<Bytes>,
    pub(crate) head: u64,
    pub(crate) live: broadcast::Receiver<Arc<Entry>>,
}

impl Journal {
    fn new(admin: &Admin) -> Journal {
        let mut nodes = NodeWatch::default();
        nodes.recount(admin);
        // The nodes as they are now: the state, not events.
        nodes.changed(admin);
        Journal {
            ring: Mutex::new(Ring {
                last: 0,
                entries: VecDeque::with_capacity(RING),
                config: config_json(admin),
                nodes,
            }),
            live: broadcast::channel(LIVE).0,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Ring> {
        self.ring.lock()
    }

    /// Gives `kind`/`data` the next id, keeps it, and sends it live.
    fn append(ring: &mut Ring, live: &broadcast::Sender<Arc<Entry>>, kind: &str, data: &Value) {
        ring.last += 1;
        let entry = Arc::new(Entry {
            id: ring.last,
            frame: frame(ring.last, kind, data),
        });
        if ring.entries.len() == RING {
            ring.entries.pop_front();
        }
        ring.entries.push_back(Arc::clone(&entry));
        // No live subscriber is no error: the ring keeps it.
        let _ = live.send(entry);
    }

    pub(crate) fn record(&self, kind: &str, data: &Value) {
        let mut ring = self.lock();
        if kind == "config" {
            ring.config = data.clone();
        }
        Journal::append(&mut ring, &self.live, kind, data);
    }

    /// Records a `node` event for every node whose view changed.
    fn nodes_changed(ring: &mut Ring, live: &broadcast::Sender<Arc<Entry>>, admin: &Admin) {
        for (_, v) in ring.nodes.changed(admin) {
            Journal::append(ring, live, "node", &v);
        }
    }

    /// A subscriber's start: the frames owed before live events, and the
    /// live feed after them.
    pub(crate) fn open(&self, admin: &Admin, from: Resume) -> Opening {
        let mut ring = self.lock();
        // Node changes not yet recorded go first, so the state is current.
        Journal::nodes_changed(&mut ring, &self.live, admin);
        let live = self.live.subscribe();
        let head = ring.last;
        let oldest = ring.entries.front().map_or(head + 1, |e| e.id);
        let frames = match from {
            Resume::Start => state(&ring, admin, head),
            Resume::After(id) if id <= head && id + 1 >= oldest => ring
                .entries
                .iter()
                .filter(|e| e.id > id)
                .map(|e| e.frame.clone())
                .collect(),
            Resume::After(id) if id <= head => {
                let mut f = vec![lagged(Some(head - id))];
                f.extend(state(&ring, admin, head));
                f
            }
            Resume::After(_) | Resume::Unknown => {
                let mut f = vec![lagged(None)];
                f.extend(state(&ring, admin, head));
                f
            }
        };
        Opening { frames, head, live }
    }
}

/// `lagged` with how many events were lost (`null`: unknown).
fn lagged(missed: Option<u64>) -> Bytes {
    Bytes::from(format!(
        "event: lagged\ndata: {}\n\n",
        json!({ "missed": missed })
    ))
}

/// The config and every node (in config order), as of `head`.
fn state(ring: &Ring, admin: &Admin, head: u64) -> Vec<Bytes> {
    let mut frames = vec![frame(head, "config", &ring.config)];
    let snap = admin.control().snapshot().load();
    let views: HashMap<(&str, &str), &Value> = ring
        .nodes
        .sent
        .iter()
        .map(|((s, id), v)| ((s.as_str(), id.as_str()), v))
        .collect();
    for svc in &snap.services {
        for n in &svc.nodes {
            if let Some(v) = views.get(&(&*svc.name, &*n.id)) {
                frames.push(frame(head, "node", v));
            }
        }
    }
    frames
}

/// The admin API's journal, started (with its recording task) on first use.
pub(crate) fn start(admin: &Arc<Admin>, shutdown: &watch::Receiver<bool>) -> Arc<Journal> {
    Arc::clone(admin.journal().get_or_init(|| {
        let journal = Arc::new(Journal::new(admin));
        tokio::spawn(record(
            Arc::clone(admin),
            Arc::clone(&journal),
            shutdown.clone(),
        ));
        journal
    }))
}

/// Records hops as the data plane publishes them, each applied config, and
/// node changes (compared every [`TICK`]) until shutdown.
async fn record(admin: Arc<Admin>, journal: Arc<Journal>, mut shutdown: watch::Receiver<bool>) {
    let mut hops = telemetry::subscribe_hops();
    let mut applied = admin.control().subscribe();
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + TICK, TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut ticks = 0u64;
    loop {
        let mut config_due = false;
        tokio::select! {
            biased;
            _ = shutdown.wait_for(|s| *s) => break,
            r = hops.rx.recv() => match r {
                Ok(h) => journal.record("hop", &json!(*h)),
                // The journal itself fell behind the hop feed: the loss is
                // an event too, so that every subscriber learns of it.
                Err(broadcast::error::RecvError::Lagged(n)) => {
                    journal.record("lagged", &json!({ "missed": n }));
                }
                Err(broadcast::error::RecvError::Closed) => break,
            },
            r = applied.changed() => {
                if r.is_err() {
                    break;
                }
                config_due = true;
            }
            _ = tick.tick() => {
                ticks += 1;
                if ticks.is_multiple_of(SESSION_COUNT_TICKS) {
                    // The pass over the store runs outside the lock.
                    let mut counted = NodeWatch::default();
                    counted.recount(&admin);
                    journal.lock().nodes.bound = counted.bound;
                }
                let mut ring = journal.lock();
                Journal::nodes_changed(&mut ring, &journal.live, &admin);
            }
        }
        if config_due {
            let v = applied_config(&admin).await;
            journal.record("config", &v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_start_point_comes_from_the_header_or_the_query() {
        assert_eq!(from_request(None, &Query::default()), Resume::Start);
        assert_eq!(
            from_request(Some(b"12"), &Query::default()),
            Resume::After(12)
        );
        assert_eq!(
            from_request(Some(b" 7 "), &Query::default()),
            Resume::After(7)
        );
        assert_eq!(from_request(Some(b""), &Query::default()), Resume::Start);
        assert_eq!(from_request(Some(b"x"), &Query::default()), Resume::Unknown);
        assert_eq!(
            from_request(Some(b"\xff"), &Query::default()),
            Resume::Unknown
        );
        assert_eq!(
            from_request(Some(b"-1"), &Query::default()),
            Resume::Unknown
        );
        assert_eq!(
            from_request(None, &Query::parse(Some("ticket=t&last_event_id=9"))),
            Resume::After(9)
        );
        assert_eq!(
            from_request(Some(b"3"), &Query::parse(Some("last_event_id=9"))),
            Resume::After(3),
            "the header wins"
        );
        assert_eq!(
            from_request(None, &Query::parse(Some("ticket=t"))),
            Resume::Start
        );
    }

    fn admin() -> Arc<Admin> {
        use crate::control::{Control, Source};
        let yaml = "listeners:\n  - { name: public, address: 127.0.0.1:0 }\nadmin: { address: 127.0.0.1:0 }\nservices:\n  - name: s\n    nodes:\n      - { id: a, address: \"127.0.0.1:1\" }\n      - { id: b, address: \"127.0.0.1:2\" }\nroutes:\n  - { id: r, match: { path_prefix: / }, service: s }\n";
        let cfg = hopgate_core::config::load(yaml, hopgate_core::config::Format::Yaml)
            .expect("a valid config");
        Admin::new(Control::new(cfg, Source::Embedded), None, None)
    }

    fn text(frames: &[Bytes]) -> Vec<String> {
        frames
            .iter()
            .map(|f| String::from_utf8(f.to_vec()).unwrap())
            .collect()
    }

    #[test]
    fn a_new_subscriber_gets_the_state_as_of_the_last_id() {
        let admin = admin();
        let j = Journal::new(&admin);
        let o = j.open(&admin, Resume::Start);
        assert_eq!(o.head, 0);
        let f = text(&o.frames);
        assert_eq!(f.len(), 3, "{f:?}");
        assert!(f[0].starts_with("id: 0\nevent: config\ndata: {"), "{f:?}");
        assert!(f[1].starts_with("id: 0\nevent: node\n") && f[1].contains("\"id\":\"a\""));
        assert!(f[2].contains("\"id\":\"b\""), "config order: {f:?}");
        j.record("hop", &json!(1));
        j.record("config", &json!({ "version": 2 }));
        let o = j.open(&admin, Resume::Start);
        assert_eq!(o.head, 2);
        let f = text(&o.frames);
        assert_eq!(f[0], "id: 2\nevent: config\ndata: {\"version\":2}\n\n");
    }

    #[tokio::test]
    async fn a_resume_replays_exactly_the_events_after_the_id_then_goes_live() {
        let admin = admin();
        let j = Journal::new(&admin);
        for i in 1..=5 {
            j.record("hop", &json!(i));
        }
        let mut o = j.open(&admin, Resume::After(2));
        assert_eq!(o.head, 5);
        assert_eq!(
            text(&o.frames),
            (3..=5)
                .map(|i| format!("id: {i}\nevent: hop\ndata: {i}\n\n"))
                .collect::<Vec<_>>()
        );
        j.record("hop", &json!(6));
        let e = o.live.recv().await.unwrap();
        assert_eq!(e.id, 6, "live after the replay, nothing twice");
        assert!(
            j.open(&admin, Resume::After(6)).frames.is_empty(),
            "up to date"
        );
    }

    #[test]
    fn an_id_older_than_the_ring_or_unknown_is_a_lag_then_the_state() {
        let admin = admin();
        let j = Journal::new(&admin);
        for i in 0..RING as u64 + 10 {
            j.record("hop", &json!(i));
        }
        let head = RING as u64 + 10;
        // The oldest kept is 11: 10 still replays in full.
        let f = j.open(&admin, Resume::After(10)).frames;
        assert_eq!(f.len(), RING);
        assert!(text(&f)[0].starts_with("id: 11\n"));
        let f = text(&j.open(&admin, Resume::After(9)).frames);
        assert_eq!(
            f[0],
            format!("event: lagged\ndata: {{\"missed\":{}}}\n\n", head - 9)
        );
        assert!(f[1].starts_with(&format!("id: {head}\nevent: config\n")));
        assert_eq!(f.len(), 4, "lagged, config, two nodes");
        for from in [Resume::After(head + 1), Resume::Unknown] {
            let f = text(&j.open(&admin, from).frames);
            assert_eq!(f[0], "event: lagged\ndata: {\"missed\":null}\n\n");
            assert_eq!(f.len(), 4);
        }
    }
}
