//! The admin API, on its own listener (loopback by default).
//!
//! Owns the HTTP surface operators and tests use, as one table
//! ([`handle`]) whose arms call the handlers in `admin/`. Every endpoint:
//!
//! | method | path | handler |
//! | --- | --- | --- |
//! | GET | `/` | `dashboard::page`: the dashboard (no token needed; state only for a request that may use the API) |
//! | GET | `/admin/v1/events` | `events::stream`: Server-Sent Events (the bearer token, or `?ticket=`; `Last-Event-ID` / `?last_event_id=` resumes) |
//! | POST | `/admin/v1/events/ticket` | `events::ticket`: a 60 s ticket for `EventSource` |
//! | GET | `/livez` | `probes::livez` (no token needed) |
//! | GET | `/readyz` | `probes::readyz`: 503 once shutdown has begun (no token needed) |
//! | GET | `/metrics` | `scrape::metrics`: OpenMetrics or Prometheus text, by `Accept` |
//! | GET | `/admin/v1/config` | `config::get`: the running document, version, hash |
//! | PUT | `/admin/v1/config` | `config::put`: apply (`?canary=P&bake=D`: bake it as a canary) |
//! | GET | `/admin/v1/config/versions` | `config::versions`: the history, reload failures, last error |
//! | POST | `/admin/v1/config/rollback/{version}` | `config::rollback` |
//! | GET | `/admin/v1/config/canary` | `canary::status` |
//! | POST | `/admin/v1/config/canary/promote`, `…/abort` | `canary::decide` |
//! | GET | `/admin/v1/nodes` | `nodes::list`: every node's live state |
//! | GET | `/admin/v1/routes` | `routes::list`: every route with its effective policy |
//! | POST | `/admin/v1/nodes/{service}/{node}/drain`, `…/undrain` | `nodes::drain` |
//! | GET | `/admin/v1/sessions/{id}` | `sessions::get`: a session's bindings |
//! | POST | `/admin/v1/maintenance` | `maintenance::post`: a notification to the intake |
//! | GET | `/admin/v1/fleet` | `fleet::get`: this replica's view of the fleet |
//! | GET | `/admin/v1/hops?limit=N` | `hops::recent`: the latest hops, newest first |
//! | GET | `/admin/v1/limits?top=N` | `limits::list`: rate-limit policies and their fullest keys |
//!
//! A path no endpoint has is a 404; a known path with another method a
//! 405 with `Allow` ([`allowed_methods`]). Answers are JSON; errors
//! `{"errors":[{"path","message"}]}` (`respond`). When a token is
//! configured every request but `GET /`, `GET /livez`, `GET /readyz` (and
//! the event stream with a ticket) needs `Authorization: Bearer` (`auth`, constant-time), else 401.
//! Queries are read by one parser (`query`). The listener, its connection
//! limit and its graceful end are `serve`.
//!
//! Must not touch: the request path, and never the snapshot directly —
//! changes go through [`Control`]'s single writer.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use http::{Method, Request, Response};
use http_body_util::{Either, Full};
use hyper::body::Incoming;
use tokio::sync::watch;

use hopgate_core::session::unix_now;
use hopgate_store::Sessions;

use crate::control::Control;
use crate::fleet::Fleet;
use crate::maintenance::Maintenance;

mod auth;
mod canary;
mod config;
mod dashboard;
mod events;
mod fleet;
mod hops;
mod limits;
mod maintenance;
mod nodes;
mod probes;
mod query;
mod respond;
mod routes;
mod scrape;
mod serve;
mod sessions;

pub use serve::serve_admin;

use query::Query;
use respond::{not_routed, unauthorized, AdminResponse};

/// State the admin handlers share.
pub struct Admin {
    control: Arc<Control>,
    token: Option<String>,
    ready: AtomicBool,
    sessions: Option<Arc<Sessions>>,
    maintenance: Option<Arc<Maintenance>>,
    /// Shared with the `/metrics` collector, which sees it once set.
    fleet: Arc<OnceLock<Arc<Fleet>>>,
    /// Signs event-stream tickets (`events`).
    ticket_key: [u8; 32],
    /// The event stream's journal, from its first subscriber on.
    journal: OnceLock<Arc<events::journal::Journal>>,
    /// The `/metrics` registry, built at the first scrape
    /// (`crate::metrics::registry`).
    metrics: OnceLock<prometheus_client::registry::Registry>,
    /// The dashboard's traffic figures at the last page served: the next
    /// page shows the rates since then.
    page_window: parking_lot::Mutex<events::Window>,
}

impl std::fmt::Debug for Admin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Admin").finish_non_exhaustive()
    }
}

impl Admin {
    /// `token`: the bearer token required on every request, if any.
    pub fn new(
        control: Arc<Control>,
        token: Option<String>,
        sessions: Option<Arc<Sessions>>,
    ) -> Arc<Admin> {
        Arc::new(Admin::plain(control, token, sessions))
    }

    fn plain(
        control: Arc<Control>,
        token: Option<String>,
        sessions: Option<Arc<Sessions>>,
    ) -> Admin {
        Admin {
            control,
            token,
            ready: AtomicBool::new(true),
            sessions,
            maintenance: None,
            fleet: Arc::default(),
            ticket_key: events::ticket_key(),
            journal: OnceLock::new(),
            metrics: OnceLock::new(),
            page_window: parking_lot::Mutex::new(events::Window::now()),
        }
    }

    /// The same, with the maintenance intake behind `POST /admin/v1/maintenance`.
    pub fn with_maintenance(
        control: Arc<Control>,
        token: Option<String>,
        sessions: Option<Arc<Sessions>>,
        maintenance: Arc<Maintenance>,
    ) -> Arc<Admin> {
        Arc::new(Admin {
            maintenance: Some(maintenance),
            ..Admin::plain(control, token, sessions)
        })
    }

    /// Installs the fleet view (`GET /admin/v1/fleet`); with an etcd source
    /// in it, drains and maintenance notices go to the whole fleet.
    pub fn set_fleet(&self, fleet: Arc<Fleet>) {
        let _ = self.fleet.set(fleet);
    }

    /// The etcd source, when fleet actions go through etcd.
    fn fleet_etcd(&self) -> Option<&Arc<crate::etcd::EtcdHandle>> {
        self.fleet.get().and_then(|f| f.etcd())
    }

    pub(crate) fn journal(&self) -> &OnceLock<Arc<events::journal::Journal>> {
        &self.journal
    }

    pub(crate) fn control(&self) -> &Arc<Control> {
        &self.control
    }

    pub(crate) fn sessions(&self) -> Option<&Sessions> {
        self.sessions.as_deref()
    }

    pub(crate) fn fleet(&self) -> Option<&Fleet> {
        self.fleet.get().map(|f| &**f)
    }

    /// `/readyz` answers 503 once this is false (shutdown has begun).
    pub fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::Relaxed);
    }

    fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Relaxed)
    }

    fn maintenance(&self) -> Option<&Arc<Maintenance>> {
        self.maintenance.as_ref()
    }
}

/// A whole answer, or an event stream.
type AdminBody = Either<Full<Bytes>, events::SseBody>;

/// The probes and the dashboard (`GET /`, no token needed: it shows state
/// only to a request that may see it) and the event stream (the bearer token or an
/// event ticket) before the rest of the API.
async fn route(
    admin: Arc<Admin>,
    req: Request<Incoming>,
    shutdown: watch::Receiver<bool>,
) -> Response<AdminBody> {
    let path = req.uri().path();
    if req.method() == Method::GET {
        // The probes answer without the token: a kubelet or load-balancer
        // health check cannot send one, and they tell nothing but
        // "alive" and "ready".
        match path {
            "/livez" => return probes::livez().map(Either::Left),
            "/readyz" => return probes::readyz(&admin).map(Either::Left),
            _ => {}
        }
    }
    if req.method() == Method::GET && path == "/" {
        let show = auth::bearer_ok(&admin, &req);
        return dashboard::page(&admin, admin.token.is_some(), show).map(Either::Left);
    }
    if req.method() == Method::GET && path.trim_end_matches('/') == "/admin/v1/events" {
        let query = Query::of(req.uri());
        let ticket = events::ticket_of(&query)
            .is_some_and(|t| events::ticket_valid(&admin.ticket_key, t, unix_now()));
        if ticket || auth::bearer_ok(&admin, &req) {
            let last_id = req.headers().get("last-event-id").map(|v| v.as_bytes());
            let from = events::journal::from_request(last_id, &query);
            return events::stream(admin, shutdown, from).map(Either::Right);
        }
    }
    handle(&admin, req).await.map(Either::Left)
}

/// The API behind the bearer token: one arm per endpoint (those under
/// `/admin/v1/` in [`v1`]).
async fn handle(admin: &Admin, req: Request<Incoming>) -> AdminResponse {
    if !auth::bearer_ok(admin, &req) {
        return unauthorized();
    }
    let method = req.method().clone();
    let path = req.uri().path().to_owned();
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    match (method.as_str(), segments.as_slice()) {
        ("GET", ["metrics"]) => scrape::metrics(admin, req.headers()),
        (_, ["admin", "v1", rest @ ..]) => v1(admin, &method, rest, req).await,
        (_, segments) => not_routed(&method, allowed_methods(segments)),
    }
}

/// `/admin/v1/{rest}`.
async fn v1(
    admin: &Admin,
    method: &Method,
    rest: &[&str],
    req: Request<Incoming>,
) -> AdminResponse {
    match (method.as_str(), rest) {
        ("GET", ["config"]) => config::get(admin),
        ("PUT", ["config"]) => config::put(admin, req).await,
        ("GET", ["config", "versions"]) => config::versions(admin),
        ("POST", ["config", "rollback", version]) => config::rollback(admin, version).await,
        ("GET", ["config", "canary"]) => canary::status(admin),
        ("POST", ["config", "canary", a @ ("promote" | "abort")]) => canary::decide(admin, a).await,
        ("GET", ["nodes"]) => nodes::list(admin),
        ("GET", ["routes"]) => routes::list(admin),
        ("POST", ["nodes", s, n, a @ ("drain" | "undrain")]) => nodes::drain(admin, s, n, a).await,
        ("GET", ["sessions", id]) => sessions::get(admin, id),
        ("POST", ["maintenance"]) => maintenance::post(admin, req).await,
        ("GET", ["fleet"]) => fleet::get(admin),
        ("GET", ["hops"]) => hops::recent(req.uri()),
        ("GET", ["limits"]) => limits::list(admin, req.uri()),
        ("POST", ["events", "ticket"]) => events::ticket(admin),
        (_, rest) => not_routed(method, allowed_v1(rest)),
    }
}

/// The methods a path answers (the `Allow` header of a 405), or `None`
/// when no endpoint has that path (a 404). Kept next to the tables above:
/// a new endpoint goes into both.
fn allowed_methods(segments: &[&str]) -> Option<&'static str> {
    match segments {
        [""] | ["livez"] | ["readyz"] | ["metrics"] => Some("GET"),
        ["admin", "v1", rest @ ..] => allowed_v1(rest),
        _ => None,
    }
}

/// [`allowed_methods`] under `/admin/v1/`.
fn allowed_v1(rest: &[&str]) -> Option<&'static str> {
    Some(match rest {
        ["events"] => "GET",
        ["events", "ticket"] => "POST",
        ["config"] => "GET, PUT",
        ["config", "versions"]
        | ["config", "canary"]
        | ["nodes"]
        | ["routes"]
        | ["sessions", _]
        | ["fleet"]
        | ["hops"]
        | ["limits"] => "GET",
        ["config", "rollback", _]
        | ["config", "canary", "promote" | "abort"]
        | ["maintenance"]
        | ["nodes", _, _, "drain" | "undrain"] => "POST",
        _ => return None,
    })
}
