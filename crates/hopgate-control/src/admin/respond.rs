//! The admin API's answers: JSON bodies, the `{"errors":[{"path","message"}]}`
//! shape of every refusal, plain-text probes, and the 401/404/405 the router
//! gives.
//!
//! Must not touch: what an endpoint does (its handler decides the status
//! and the body; this only builds the response).

use bytes::Bytes;
use http::header::{HeaderValue, ALLOW, CONTENT_TYPE, WWW_AUTHENTICATE};
use http::{Method, Response, StatusCode};
use http_body_util::Full;
use serde_json::{json, Value};

use hopgate_core::config::ConfigError;

/// A whole answer (the event stream is the one endpoint that streams).
pub(crate) type AdminResponse = Response<Full<Bytes>>;

pub(crate) fn json_response(status: StatusCode, v: &Value) -> AdminResponse {
    let mut r = Response::new(Full::new(Bytes::from(
        serde_json::to_vec_pretty(v).unwrap_or_default(),
    )));
    *r.status_mut() = status;
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r
}

/// 200 with `v` as the body.
pub(crate) fn ok(v: &Value) -> AdminResponse {
    json_response(StatusCode::OK, v)
}

pub(crate) fn errors_response(status: StatusCode, errors: &[ConfigError]) -> AdminResponse {
    json_response(status, &json!({ "errors": errors }))
}

pub(crate) fn error_response(status: StatusCode, path: &str, message: &str) -> AdminResponse {
    errors_response(status, &[ConfigError::new(path, message)])
}

/// `status` (from a handler that names it as a number) with `errors`;
/// `fallback` when the number is not a status.
pub(crate) fn coded_errors(
    status: u16,
    fallback: StatusCode,
    errors: &[ConfigError],
) -> AdminResponse {
    errors_response(StatusCode::from_u16(status).unwrap_or(fallback), errors)
}

pub(crate) fn text_response(status: StatusCode, text: &'static str) -> AdminResponse {
    let mut r = Response::new(Full::new(Bytes::from_static(text.as_bytes())));
    *r.status_mut() = status;
    r.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

/// 401 with the bearer challenge.
pub(crate) fn unauthorized() -> AdminResponse {
    let mut r = error_response(
        StatusCode::UNAUTHORIZED,
        "authorization",
        "a valid bearer token is required",
    );
    r.headers_mut().insert(
        WWW_AUTHENTICATE,
        HeaderValue::from_static("Bearer realm=\"hopgate-admin\""),
    );
    r
}

/// 405 naming the methods the path answers (`allow`), or 404 when no
/// endpoint has the path.
pub(crate) fn not_routed(method: &Method, allow: Option<&'static str>) -> AdminResponse {
    match allow {
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
    }
}
