//! `/admin/v1/config`: the running config (`GET`), applying one or
//! starting a canary with it (`PUT`, `?canary=P&bake=D`), the version
//! history (`GET …/versions`) and rollback (`POST …/rollback/{version}`).
//!
//! Must not touch: the snapshot, except through [`Control`]'s writer
//! (run on tokio's blocking pool: a big config must not stall requests on
//! a single-threaded runtime).

use std::sync::Arc;
use std::time::Duration;

use http::header::CONTENT_TYPE;
use http::{HeaderMap, Request, StatusCode};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use serde_json::{json, Value};

use hopgate_core::config::{sniff_format, ConfigError, Format};

use super::query::Query;
use super::respond::{coded_errors, error_response, errors_response, ok, AdminResponse};
use super::Admin;
use crate::control::Source;

/// Largest config document the admin API accepts.
const MAX_CONFIG_BYTES: usize = 10 << 20;

/// `GET /admin/v1/config`: the running document, its version and hash.
pub(super) fn get(admin: &Admin) -> AdminResponse {
    let control = admin.control();
    let snap = control.snapshot().load();
    let hash = control
        .versions()
        .iter()
        .find(|v| v.version == snap.version)
        .map(|v| v.hash.clone());
    ok(&json!({ "version": snap.version, "hash": hash, "config": snap.config.raw }))
}

/// `PUT /admin/v1/config`: the body applied, or baked as a canary when the
/// query asks for one.
pub(super) async fn put(admin: &Admin, req: Request<Incoming>) -> AdminResponse {
    let format = format_of(req.headers());
    let canary = match canary_of(&Query::of(req.uri())) {
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
    match canary {
        Some((percent, bake)) => start_canary(admin, text.to_owned(), format, percent, bake).await,
        None => apply(admin, text.to_owned(), format).await,
    }
}

/// The format the `Content-Type` names, if it names one.
fn format_of(headers: &HeaderMap) -> Option<Format> {
    match headers.get(CONTENT_TYPE).and_then(|v| v.to_str().ok()) {
        Some(ct) if ct.contains("json") => Some(Format::Json),
        Some(ct) if ct.contains("yaml") => Some(Format::Yaml),
        _ => None,
    }
}

/// `?canary=P&bake=D`: the canary's share and bake time, `None` for a
/// plain apply. `bake` defaults to 60 s and needs `canary`.
pub(super) fn canary_of(query: &Query) -> Result<Option<(f64, Duration)>, ConfigError> {
    let (mut percent, mut bake) = (None, None);
    for (k, v) in query.pairs() {
        match k {
            "canary" => percent = Some(crate::control::canary::parse_percent(v)?),
            "bake" => bake = Some(crate::control::canary::parse_bake(v)?),
            _ => {}
        }
    }
    match (percent, bake) {
        (Some(p), b) => Ok(Some((p, b.unwrap_or(Duration::from_secs(60))))),
        (None, Some(_)) => Err(ConfigError::new(
            "bake",
            "bake is only meaningful with canary=P",
        )),
        (None, None) => Ok(None),
    }
}

/// The document as a canary: through etcd in fleet mode, else here.
async fn start_canary(
    admin: &Admin,
    text: String,
    format: Format,
    percent: f64,
    bake: Duration,
) -> AdminResponse {
    let control = admin.control();
    if let Some(etcd) = admin.fleet_etcd() {
        if let Some(why) = etcd.write_refusal() {
            return error_response(StatusCode::SERVICE_UNAVAILABLE, "", &why);
        }
        let started =
            crate::control::canary::fleet::start_from_admin(control, etcd, text, percent, bake);
        return match started.await {
            Ok(v) => ok(&v),
            Err((status, errors)) => coded_errors(status, StatusCode::BAD_REQUEST, &errors),
        };
    }
    match crate::control::canary::start_from_admin(control, text, format, percent, bake).await {
        Ok(v) => ok(&v),
        Err(errors) => errors_response(StatusCode::BAD_REQUEST, &errors),
    }
}

/// The document applied through the writer.
async fn apply(admin: &Admin, text: String, format: Format) -> AdminResponse {
    let c = Arc::clone(admin.control());
    let applied =
        tokio::task::spawn_blocking(move || c.apply_text(&text, format, Source::Admin)).await;
    let Ok(applied) = applied else {
        return error_response(
            StatusCode::INTERNAL_SERVER_ERROR,
            "",
            "the reload task failed",
        );
    };
    match applied {
        Ok(o) => ok(&json!(o)),
        Err(errors) => errors_response(StatusCode::BAD_REQUEST, &errors),
    }
}

/// `GET /admin/v1/config/versions`.
pub(super) fn versions(admin: &Admin) -> AdminResponse {
    let control = admin.control();
    let versions: Vec<Value> = control.versions().iter().map(|v| json!(v)).collect();
    ok(&json!({
        "current": control.snapshot().load().version,
        "versions": versions,
        "reload_failures": control.reload_failures(),
        "last_error": control.last_error(),
    }))
}

/// `POST /admin/v1/config/rollback/{version}`.
pub(super) async fn rollback(admin: &Admin, version: &str) -> AdminResponse {
    let Ok(v) = version.parse::<u64>() else {
        return error_response(
            StatusCode::BAD_REQUEST,
            "version",
            "version must be a number",
        );
    };
    let c = Arc::clone(admin.control());
    let done = tokio::task::spawn_blocking(move || c.rollback(v))
        .await
        .unwrap_or_else(|_| Err(vec![ConfigError::new("", "the reload task failed")]));
    match done {
        Ok(o) => ok(&json!(o)),
        Err(errors) => errors_response(StatusCode::BAD_REQUEST, &errors),
    }
}
