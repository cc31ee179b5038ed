//! The admin API, on its own listener (loopback by default).
//!
//! Owns the HTTP surface operators and tests use: gateway health
//! (`/livez`, `/readyz`), config read/apply/versions/rollback, node state and
//! drain/undrain. Answers JSON; errors as `{"errors":[{"path","message"}]}`.
//! When a token is configured every request needs `Authorization: Bearer`.
//!
//! Must not touch: the request path, and never the snapshot directly —
//! changes go through [`Control`]'s single writer.

use std::convert::Infallible;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use http::header::{HeaderValue, ALLOW, AUTHORIZATION, CONTENT_TYPE, WWW_AUTHENTICATE};
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Either, Full, Limited};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use serde_json::{json, Value};
use tokio::net::TcpListener;
use tokio::sync::watch;

use hopgate_core::config::{sniff_format, ConfigError, Format};
use hopgate_core::session::SessionId;
use hopgate_core::session::{binding_key, unix_now};
use hopgate_proxy::metrics::METRICS;
use hopgate_proxy::ClientIo;
use hopgate_store::Sessions;

use crate::control::{Control, Source};
use crate::fleet::Fleet;
use crate::maintenance::{Maintenance, Refused};

/// Largest config document the admin API accepts.
const MAX_CONFIG_BYTES: usize = 10 << 20;

/// State the admin handlers share.
pub struct Admin {
    control: Arc<Control>,
    token: Option<String>,
    ready: AtomicBool,
    sessions: Option<Arc<Sessions>>,
    maintenance: Option<Arc<Maintenance>>,
    /// Shared with the `/metrics` collector, which sees it once set.
    fleet: Arc<OnceLock<Arc<Fleet>>>,
    /// Signs event-stream tickets (`crate::events`).
    ticket_key: [u8; 32],
    /// The event stream's journal, from its first subscriber on.
    journal: OnceLock<Arc<crate::events::journal::Journal>>,
    /// The `/metrics` registry, built at the first scrape
    /// (`crate::metrics::registry`).
    metrics: OnceLock<prometheus_client::registry::Registry>,
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
            ticket_key: crate::events::ticket_key(),
            journal: OnceLock::new(),
            metrics: OnceLock::new(),
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

    pub(crate) fn journal(&self) -> &OnceLock<Arc<crate::events::journal::Journal>> {
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
}

type AdminResponse = Response<Full<Bytes>>;
/// A whole answer, or an event stream.
type AdminBody = Either<Full<Bytes>, crate::events::SseBody>;

fn json_response(status: StatusCode, v: &Value) -> AdminResponse {
    let mut r = Response::new(Full::new(Bytes::from(
        serde_json::to_vec_pretty(v).unwrap_or_default(),
    )));
    *r.status_mut() = status;
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r
}

fn errors_response(status: StatusCode, errors: &[ConfigError]) -> AdminResponse {
    json_response(status, &json!({ "errors": errors }))
}

fn error_response(status: StatusCode, path: &str, message: &str) -> AdminResponse {
    errors_response(status, &[ConfigError::new(path, message)])
}

fn text_response(status: StatusCode, text: &'static str) -> AdminResponse {
    let mut r = Response::new(Full::new(Bytes::from_static(text.as_bytes())));
    *r.status_mut() = status;
    r.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

/// Serves the admin API on `listener` until `shutdown` turns true.
pub async fn serve_admin(
    listener: TcpListener,
    admin: Arc<Admin>,
    mut shutdown: watch::Receiver<bool>,
) {
    let open = Arc::new(AtomicUsize::new(0));
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(ADMIN_HEADER_READ);
    let builder = Arc::new(builder);
    loop {
        let accepted = tokio::select! {
            r = listener.accept() => r,
            _ = stopped(&mut shutdown) => break,
        };
        let stream = match accepted {
            Ok((s, _)) => s,
            Err(e) => {
                tracing::warn!(error = %e, "admin accept failed");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        // Admin connections are few (scrapers, operators); a flood of idle
        // ones must not eat the process's file descriptors.
        if open.load(Ordering::Relaxed) >= ADMIN_MAX_CONNECTIONS {
            if !ADMIN_FULL_WARNED.swap(true, Ordering::Relaxed) {
                tracing::warn!(
                    limit = ADMIN_MAX_CONNECTIONS,
                    "admin API: connection limit reached; closing new connections"
                );
            }
            continue;
        }
        ADMIN_FULL_WARNED.store(false, Ordering::Relaxed);
        open.fetch_add(1, Ordering::Relaxed);
        let open = Arc::clone(&open);
        let admin = Arc::clone(&admin);
        let builder = Arc::clone(&builder);
        let stop = shutdown.clone();
        let mut conn_stop = shutdown.clone();
        tokio::spawn(async move {
            // Told when the connection's first request arrives.
            let first = Arc::new(tokio::sync::Notify::new());
            let told = Arc::clone(&first);
            let svc = hyper::service::service_fn(move |req| {
                told.notify_one();
                let (admin, stop) = (Arc::clone(&admin), stop.clone());
                async move { Ok::<_, Infallible>(route(admin, req, stop).await) }
            });
            let io = TokioIo::new(ClientIo::new(stream, ADMIN_HEADER_READ, ADMIN_WRITE_STALL));
            let conn = builder.serve_connection(io, svc);
            tokio::pin!(conn);
            // At shutdown: answers in progress finish (event streams end
            // themselves), idle connections close. A connection accepted
            // just before the stop (during a handover both processes
            // accept from the socket for a moment) gets its first request
            // answered first: closed unread, its client would see the
            // connection drop under a request it just sent.
            tokio::select! {
                _ = conn.as_mut() => {}
                _ = stopped(&mut conn_stop) => {
                    let ended = tokio::select! {
                        _ = conn.as_mut() => true,
                        _ = first.notified() => false,
                        _ = tokio::time::sleep(ADMIN_FIRST_REQUEST_GRACE) => false,
                    };
                    if !ended {
                        conn.as_mut().graceful_shutdown();
                        let _ = conn.await;
                    }
                }
            }
            open.fetch_sub(1, Ordering::Relaxed);
        });
    }
    // Let the connections finish what they are writing (an event stream's
    // end), up to a bound.
    let deadline = tokio::time::Instant::now() + ADMIN_SHUTDOWN_BOUND;
    while open.load(Ordering::Relaxed) > 0 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}

/// How long a connection accepted just before shutdown has to send its
/// first request (it is answered, then closed).
const ADMIN_FIRST_REQUEST_GRACE: std::time::Duration = std::time::Duration::from_secs(2);

/// How long the admin API waits for its connections at shutdown.
const ADMIN_SHUTDOWN_BOUND: std::time::Duration = std::time::Duration::from_secs(5);

/// Open admin connections at most; more are closed at once.
pub(crate) const ADMIN_MAX_CONNECTIONS: usize = 128;
/// How long an admin client has to send a request head (and, before that,
/// its first bytes).
pub(crate) const ADMIN_HEADER_READ: std::time::Duration = std::time::Duration::from_secs(10);
/// How long an admin client may leave a response unread.
pub(crate) const ADMIN_WRITE_STALL: std::time::Duration = std::time::Duration::from_secs(60);
/// One warning per burst of refused admin connections, not one per refusal.
static ADMIN_FULL_WARNED: AtomicBool = AtomicBool::new(false);

/// Resolves once shutdown has been requested.
async fn stopped(rx: &mut watch::Receiver<bool>) {
    let _ = rx.wait_for(|s| *s).await;
}

/// Whether `req` may use the API: no token configured, or it carries it.
fn bearer_ok(admin: &Admin, req: &Request<Incoming>) -> bool {
    admin.token.as_ref().is_none_or(|token| {
        req.headers()
            .get(AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .is_some_and(|t| constant_time_eq(t.as_bytes(), token.as_bytes()))
    })
}

/// The dashboard (`GET /`, no token needed: it shows state only to a
/// request that may see it) and the event stream (the bearer token or an
/// event ticket) before the rest of the API.
async fn route(
    admin: Arc<Admin>,
    req: Request<Incoming>,
    shutdown: watch::Receiver<bool>,
) -> Response<AdminBody> {
    let path = req.uri().path();
    if req.method() == Method::GET && path == "/" {
        let show = bearer_ok(&admin, &req);
        return crate::dashboard::page(&admin, admin.token.is_some(), show).map(Either::Left);
    }
    if req.method() == Method::GET && path.trim_end_matches('/') == "/admin/v1/events" {
        let ticket = crate::events::ticket_of(req.uri().query())
            .is_some_and(|t| crate::events::ticket_valid(&admin.ticket_key, t, unix_now()));
        if ticket || bearer_ok(&admin, &req) {
            let from = crate::events::journal::from_request(
                req.headers().get("last-event-id").map(|v| v.as_bytes()),
                req.uri().query(),
            );
            return crate::events::stream(admin, shutdown, from).map(Either::Right);
        }
    }
    handle(&admin, req).await.map(Either::Left)
}

async fn handle(admin: &Admin, req: Request<Incoming>) -> AdminResponse {
    if !bearer_ok(admin, &req) {
        let mut r = error_response(
            StatusCode::UNAUTHORIZED,
            "authorization",
            "a valid bearer token is required",
        );
        r.headers_mut().insert(
            WWW_AUTHENTICATE,
            HeaderValue::from_static("Bearer realm=\"hopgate-admin\""),
        );
        return r;
    }
    let path = req.uri().path().to_owned();
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    let control = &admin.control;
    match (req.method().clone(), segments.as_slice()) {
        (Method::GET, ["livez"]) => text_response(StatusCode::OK, "ok\n"),
        (Method::GET, ["readyz"]) => {
            if admin.ready.load(Ordering::Relaxed) {
                text_response(StatusCode::OK, "ready\n")
            } else {
                text_response(StatusCode::SERVICE_UNAVAILABLE, "shutting down\n")
            }
        }
        (Method::GET, ["admin", "v1", "config"]) => {
            let snap = control.snapshot().load();
            let hash = control
                .versions()
                .iter()
                .find(|v| v.version == snap.version)
                .map(|v| v.hash.clone());
            json_response(
                StatusCode::OK,
                &json!({ "version": snap.version, "hash": hash, "config": snap.config.raw }),
            )
        }
        (Method::PUT, ["admin", "v1", "config"]) => {
            let format = match req
                .headers()
                .get(CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
            {
                Some(ct) if ct.contains("json") => Some(Format::Json),
                Some(ct) if ct.contains("yaml") => Some(Format::Yaml),
                _ => None,
            };
            let canary = match crate::canary::from_query(req.uri().query()) {
                Ok(c) => c,
                Err(e) => return errors_response(StatusCode::BAD_REQUEST, &[e]),
            };
            let body = match Limited::new(req.into_body(), MAX_CONFIG_BYTES)
                .collect()
                .await
            {
                Ok(b) => b.to_bytes(),
                Err(_) => {
                    return error_response(
                        StatusCode::PAYLOAD_TOO_LARGE,
                        "",
                        "config body unreadable or larger than 10 MiB",
                    )
                }
            };
            let Ok(text) = std::str::from_utf8(&body) else {
                return error_response(StatusCode::BAD_REQUEST, "", "config body is not UTF-8");
            };
            let format = format.unwrap_or_else(|| sniff_format(text));
            if let Some((percent, bake)) = canary {
                if let Some(etcd) = admin.fleet_etcd() {
                    let started = crate::canary::fleet::start_from_admin(
                        control,
                        etcd,
                        text.to_owned(),
                        percent,
                        bake,
                    );
                    return match started.await {
                        Ok(v) => json_response(StatusCode::OK, &v),
                        Err((status, errors)) => errors_response(
                            StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_REQUEST),
                            &errors,
                        ),
                    };
                }
                let started = crate::canary::start_from_admin(
                    control,
                    text.to_owned(),
                    format,
                    percent,
                    bake,
                );
                return match started.await {
                    Ok(v) => json_response(StatusCode::OK, &v),
                    Err(errors) => errors_response(StatusCode::BAD_REQUEST, &errors),
                };
            }
            // Validate and compile off the runtime's threads: a big config
            // must not stall requests on a single-threaded runtime.
            let (c, text) = (Arc::clone(control), text.to_owned());
            let applied =
                tokio::task::spawn_blocking(move || c.apply_text(&text, format, Source::Admin))
                    .await;
            let Ok(applied) = applied else {
                return error_response(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "",
                    "the reload task failed",
                );
            };
            match applied {
                Ok(o) => json_response(StatusCode::OK, &json!(o)),
                Err(errors) => errors_response(StatusCode::BAD_REQUEST, &errors),
            }
        }
        (Method::GET, ["admin", "v1", "config", "versions"]) => {
            let versions: Vec<Value> = control.versions().iter().map(|v| json!(v)).collect();
            json_response(
                StatusCode::OK,
                &json!({
                    "current": control.snapshot().load().version,
                    "versions": versions,
                    "reload_failures": control.reload_failures(),
                    "last_error": control.last_error(),
                }),
            )
        }
        (Method::POST, ["admin", "v1", "config", "rollback", v]) => match v.parse::<u64>() {
            Ok(v) => {
                let c = Arc::clone(control);
                let done = tokio::task::spawn_blocking(move || c.rollback(v))
                    .await
                    .unwrap_or_else(|_| Err(vec![ConfigError::new("", "the reload task failed")]));
                match done {
                    Ok(o) => json_response(StatusCode::OK, &json!(o)),
                    Err(errors) => errors_response(StatusCode::BAD_REQUEST, &errors),
                }
            }
            Err(_) => error_response(
                StatusCode::BAD_REQUEST,
                "version",
                "version must be a number",
            ),
        },
        (Method::GET, ["admin", "v1", "config", "canary"]) => {
            match crate::canary::status_json(control) {
                Some(v) => json_response(StatusCode::OK, &v),
                None => error_response(StatusCode::NOT_FOUND, "canary", "no canary"),
            }
        }
        (Method::POST, ["admin", "v1", "config", "canary", action @ ("promote" | "abort")]) => {
            let promote = *action == "promote";
            if let (Some(etcd), Some(_)) = (admin.fleet_etcd(), control.canary.baking_fleet()) {
                return match crate::canary::fleet::decide_from_admin(control, etcd, promote).await {
                    Ok(v) => json_response(StatusCode::OK, &v),
                    Err((status, errors)) => errors_response(
                        StatusCode::from_u16(status).unwrap_or(StatusCode::CONFLICT),
                        &errors,
                    ),
                };
            }
            match crate::canary::decide_from_admin(control, promote).await {
                Some(v) => json_response(StatusCode::OK, &v),
                None => error_response(StatusCode::CONFLICT, "canary", "no canary is baking"),
            }
        }
        (Method::GET, ["admin", "v1", "nodes"]) => json_response(
            StatusCode::OK,
            &nodes_json(control, admin.sessions.as_deref()),
        ),
        (Method::GET, ["admin", "v1", "sessions", id]) => session_json(admin, id),
        (Method::POST, ["admin", "v1", "maintenance"]) => {
            let body = match Limited::new(req.into_body(), 64 << 10).collect().await {
                Ok(b) => b.to_bytes(),
                Err(_) => {
                    return error_response(
                        StatusCode::PAYLOAD_TOO_LARGE,
                        "",
                        "body unreadable or larger than 64 KiB",
                    )
                }
            };
            maintenance_post(admin, &body).await
        }
        (Method::GET, ["admin", "v1", "fleet"]) => {
            let version = control.snapshot().load().version;
            let body = match admin.fleet.get() {
                Some(f) => f.json(version),
                None => json!({
                    "replica_id": null,
                    "redis": { "state": "off" },
                    "etcd": { "state": "off" },
                    "config_version": version,
                }),
            };
            json_response(StatusCode::OK, &body)
        }
        (Method::GET, ["admin", "v1", "hops"]) => {
            let limit = req
                .uri()
                .query()
                .and_then(|q| q.split('&').find_map(|kv| kv.strip_prefix("limit=")))
                .and_then(|v| v.parse::<usize>().ok())
                .unwrap_or(100)
                .min(hopgate_proxy::metrics::RECENT_HOPS);
            json_response(
                StatusCode::OK,
                &json!({ "hops": METRICS.recent_hops(limit) }),
            )
        }
        (Method::POST, ["admin", "v1", "events", "ticket"]) => json_response(
            StatusCode::OK,
            &json!({
                "ticket": crate::events::mint_ticket(&admin.ticket_key, unix_now()),
                "expires_in": crate::events::TICKET_TTL_SECS,
            }),
        ),
        (Method::GET, ["metrics"]) => {
            let registry = admin.metrics.get_or_init(|| {
                crate::metrics::registry(
                    admin.control.clone(),
                    admin.sessions.clone(),
                    admin.maintenance.clone(),
                    admin.fleet.clone(),
                )
            });
            crate::exposition::respond(registry, req.headers())
        }
        (Method::POST, ["admin", "v1", "nodes", service, node, action @ ("drain" | "undrain")]) => {
            let snap = control.snapshot().load();
            let found = snap
                .services
                .iter()
                .find(|s| s.name == *service)
                .and_then(|s| s.nodes.iter().find(|n| n.id == *node));
            match found {
                None => error_response(
                    StatusCode::NOT_FOUND,
                    "node",
                    &format!("no node {node:?} in service {service:?}"),
                ),
                Some(n) => {
                    let drain = *action == "drain";
                    n.state.set_draining(drain);
                    tracing::info!(service, node, drain, "node drain state changed by admin");
                    let state = n.state.clone();
                    drop(snap);
                    // Fleet mode: every replica (this one too) applies it
                    // from its etcd watch; the local change above makes
                    // this replica's answer true at once.
                    let fleet = match admin.fleet_etcd() {
                        None => json!(false),
                        Some(etcd) => match etcd.post_drain(service, node, drain).await {
                            Ok(()) => json!(true),
                            Err(e) => {
                                tracing::warn!(service, node, error = %e, "drain not published to the fleet; applied on this replica only");
                                json!({ "error": e })
                            }
                        },
                    };
                    json_response(
                        StatusCode::OK,
                        &json!({ "service": service, "node": node, "draining": state.is_draining(), "fleet": fleet }),
                    )
                }
            }
        }
        (method, segments) => match allowed_methods(segments) {
            Some(allow) => {
                let mut r = error_response(
                    StatusCode::METHOD_NOT_ALLOWED,
                    "",
                    &format!("{method} is not allowed on this path (allowed: {allow})"),
                );
                r.headers_mut()
                    .insert(ALLOW, HeaderValue::from_static(allow));
                r
            }
            None => error_response(StatusCode::NOT_FOUND, "", "no such admin endpoint"),
        },
    }
}

/// The methods an admin path answers (the `Allow` header of a 405), or
/// `None` when no endpoint has that path (a 404). Kept next to the router
/// above: a new endpoint goes into both.
fn allowed_methods(segments: &[&str]) -> Option<&'static str> {
    Some(match segments {
        [""] | ["livez"] | ["readyz"] | ["metrics"] | ["admin", "v1", "events"] => "GET",
        ["admin", "v1", "events", "ticket"] => "POST",
        ["admin", "v1", "config"] => "GET, PUT",
        ["admin", "v1", "config", "versions"]
        | ["admin", "v1", "config", "canary"]
        | ["admin", "v1", "nodes"]
        | ["admin", "v1", "sessions", _]
        | ["admin", "v1", "fleet"]
        | ["admin", "v1", "hops"] => "GET",
        ["admin", "v1", "config", "rollback", _]
        | ["admin", "v1", "config", "canary", "promote" | "abort"]
        | ["admin", "v1", "maintenance"]
        | ["admin", "v1", "nodes", _, _, "drain" | "undrain"] => "POST",
        _ => return None,
    })
}

/// `POST /admin/v1/maintenance` with `{"service","node","kind","seq","to","in"}`.
async fn maintenance_post(admin: &Admin, body: &[u8]) -> AdminResponse {
    let Some(m) = &admin.maintenance else {
        return error_response(StatusCode::NOT_FOUND, "", "maintenance intake not running");
    };
    let v: Value = match serde_json::from_slice(body) {
        Ok(v) => v,
        Err(e) => return error_response(StatusCode::BAD_REQUEST, "", &format!("not JSON: {e}")),
    };
    let n = match parse_notification(&v) {
        Ok(n) => n,
        Err(errors) => return errors_response(StatusCode::BAD_REQUEST, &errors),
    };
    let (service, node, seq) = (n.service.clone(), n.node.clone(), n.seq);
    match m.intake(n) {
        Ok(applied) => {
            // Fleet mode: publish it once applied here; every replica's
            // watch feeds it to its intake, and this one drops it (same seq).
            if let Some(etcd) = admin.fleet_etcd() {
                if let Err(e) = etcd.post_maintenance(&service, &node, seq, &v).await {
                    tracing::warn!(service, node, error = %e, "maintenance notice not published to the fleet; applied on this replica only");
                }
            }
            json_response(StatusCode::OK, &json!({ "applied": applied }))
        }
        Err(Refused::Invalid(msg)) => error_response(StatusCode::BAD_REQUEST, "", &msg),
        Err(Refused::UnknownNode) => error_response(
            StatusCode::NOT_FOUND,
            "node",
            "no such node in that service",
        ),
        Err(r @ Refused::Duplicate { .. }) => json_response(
            StatusCode::CONFLICT,
            &json!({ "errors": [{ "path": "seq", "message": "duplicate: sequence number already seen for this node" }], "refused": r }),
        ),
        Err(r) => json_response(
            StatusCode::CONFLICT,
            &json!({ "errors": [{ "path": "", "message": format!("not applied: {}", r.label()) }], "refused": r }),
        ),
    }
}

/// The admin API's maintenance body (also the value of a fleet notice in
/// etcd), every problem with its field.
pub(crate) fn parse_notification(
    v: &Value,
) -> Result<hopgate_core::maintenance::Notification, Vec<ConfigError>> {
    let mut errors = Vec::new();
    let text = |errors: &mut Vec<ConfigError>, k: &str| -> String {
        match v.get(k).and_then(Value::as_str) {
            Some(s) if !s.is_empty() => s.to_owned(),
            _ => {
                errors.push(ConfigError::new(k, "required, a non-empty string"));
                String::new()
            }
        }
    };
    let service = text(&mut errors, "service");
    let node = text(&mut errors, "node");
    let kind = match v
        .get("kind")
        .and_then(Value::as_str)
        .map(hopgate_core::maintenance::Kind::parse)
    {
        Some(Some(k)) => Some(k),
        _ => {
            errors.push(ConfigError::new(
                "kind",
                "one of MIGRATING, MOVING, MIGRATED, FAILING_OVER, FAILED_OVER",
            ));
            None
        }
    };
    let seq = match v.get("seq").and_then(Value::as_u64) {
        Some(n) => n,
        None => {
            errors.push(ConfigError::new("seq", "required, a positive integer"));
            0
        }
    };
    let to = match v.get("to") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => match hopgate_core::maintenance::parse_endpoint(s) {
            Ok(a) => Some(a),
            Err(e) => {
                errors.push(ConfigError::new("to", e));
                None
            }
        },
        Some(_) => {
            errors.push(ConfigError::new("to", "an \"ip:port\" string"));
            None
        }
    };
    let in_secs = match v.get("in") {
        None | Some(Value::Null) => None,
        Some(x) => match x.as_u64() {
            Some(n) => Some(n),
            None => {
                errors.push(ConfigError::new("in", "a number of seconds"));
                None
            }
        },
    };
    let Some(kind) = kind.filter(|_| errors.is_empty()) else {
        return Err(errors);
    };
    Ok(hopgate_core::maintenance::Notification {
        service,
        node,
        kind,
        seq,
        to,
        in_secs,
    })
}

/// A session's bindings (one per service it talked to). `id` is the
/// session id (32 hex digits) or a token.
fn session_json(admin: &Admin, id: &str) -> AdminResponse {
    let Some(sessions) = &admin.sessions else {
        return error_response(
            StatusCode::NOT_FOUND,
            "sessions",
            "sessions are not enabled",
        );
    };
    let parsed = SessionId::parse_hex(id).ok().or_else(|| {
        let snap = admin.control.snapshot().load();
        hopgate_core::session::verify(
            &sessions.keys,
            id,
            unix_now(),
            snap.config.sessions.ttl.as_secs(),
        )
        .ok()
        .map(|t| t.id)
    });
    let Some(sid) = parsed else {
        return error_response(
            StatusCode::BAD_REQUEST,
            "id",
            "not a session id (32 hex digits) or a valid token",
        );
    };
    let snap = admin.control.snapshot().load();
    let now = unix_now();
    let bindings: Vec<Value> = snap
        .services
        .iter()
        .filter_map(|svc| {
            let b = sessions.store.get(&binding_key(&sid, &svc.name), now)?;
            Some(json!({
                "service": &*b.service,
                "node": &*b.node,
                "bound_at": b.bound_at,
                "hops": b.hops,
                "context_bytes": b.context_len(),
                "expires_at": b.expires_at,
            }))
        })
        .collect();
    if bindings.is_empty() {
        return error_response(StatusCode::NOT_FOUND, "id", "no binding for this session");
    }
    json_response(
        StatusCode::OK,
        &json!({ "session": sid.to_string(), "bindings": bindings }),
    )
}

fn nodes_json(control: &Control, sessions: Option<&Sessions>) -> Value {
    let snap = control.snapshot().load();
    let now = hopgate_core::node::now_ms();
    let nodes: Vec<Value> = snap
        .services
        .iter()
        .flat_map(|svc| {
            svc.nodes.iter().map(move |n| {
                let s = &n.state;
                json!({
                    "service": svc.name,
                    "id": n.id,
                    "address": n.address.to_string(),
                    "version": n.version,
                    "weight": n.weight,
                    "health": s.health(),
                    "draining": s.is_draining(),
                    "ejected": s.is_ejected(now),
                    "available": s.is_available(now),
                    "circuit": s.circuit(),
                    "circuit_opened": s.circuit_opened(),
                    "ejections": s.ejected_total(),
                    "in_flight": s.in_flight(),
                    "requests": s.requests(),
                    "failures": s.failures(),
                    "latency_ewma_us": s.ewma_us(),
                    "pool": n.upstream.pool_if_set().map(|p| p.stats()),
                    "sessions_bound": sessions.map_or(0, |x| x.store.bindings_to(&svc.name, &n.id)),
                    "maintenance": {
                        "relaxed": s.is_relaxed(now),
                        "moved_to": s.moved_to().map(|a| a.to_string()),
                        "unreachable": s.is_unreachable(),
                    },
                })
            })
        })
        .collect();
    json!({ "version": snap.version, "nodes": nodes, "dns": crate::dns::admin_json(control) })
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}
