//! The one place where an error becomes a client response.
//!
//! Owns the status, body and headers of every answer hopgate writes itself:
//! a short text naming the reason and the request id, so a user can act on
//! it and an operator can find it in the logs. Must not touch: anything
//! else. Details of upstream failures stay in logs, never in bodies.

use http::header::{HeaderValue, CACHE_CONTROL, CONTENT_TYPE, X_CONTENT_TYPE_OPTIONS};
use http::{Response, StatusCode};

use hopgate_core::error::ErrorKind;

use crate::body::ProxyBody;
use crate::headers::X_REQUEST_ID;

/// The methods a 405 names: every standard method the gateway forwards.
const ALLOWED: &str = "GET, HEAD, POST, PUT, DELETE, PATCH, OPTIONS, CONNECT";

/// The response for an error of `kind` on request `request_id`.
pub(crate) fn error_response(
    kind: ErrorKind,
    request_id: Option<&HeaderValue>,
) -> Response<ProxyBody> {
    let id = request_id.and_then(|v| v.to_str().ok()).unwrap_or("-");
    let body = format!("hopgate: {} (request id {id})\n", kind.reason());
    let mut resp = Response::new(ProxyBody::full(body));
    *resp.status_mut() =
        StatusCode::from_u16(kind.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let h = resp.headers_mut();
    h.insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    h.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    if let Some(v) = request_id {
        h.insert(X_REQUEST_ID.clone(), v.clone());
    }
    if kind == ErrorKind::MethodNotAllowed {
        h.insert(http::header::ALLOW, HeaderValue::from_static(ALLOWED));
    }
    if matches!(kind, ErrorKind::ShuttingDown) {
        h.insert(http::header::CONNECTION, HeaderValue::from_static("close"));
    }
    resp
}

/// The gRPC status code for an error kind.
pub(crate) fn grpc_status(kind: ErrorKind) -> u8 {
    match kind {
        ErrorKind::NoRoute => 12,  // UNIMPLEMENTED
        ErrorKind::Forbidden => 7, // PERMISSION_DENIED
        ErrorKind::ConnectTimeout | ErrorKind::UpstreamTimeout => 4, // DEADLINE_EXCEEDED
        ErrorKind::HeadersTooLarge | ErrorKind::BodyTooLarge | ErrorKind::UriTooLong => 8, // RESOURCE_EXHAUSTED
        ErrorKind::BadRequest | ErrorKind::MalformedBody => 3, // INVALID_ARGUMENT
        ErrorKind::ClientAborted => 1,                         // CANCELLED
        ErrorKind::ClientTimeout => 4,                         // DEADLINE_EXCEEDED
        ErrorKind::UpstreamProtocol | ErrorKind::GrpcNeedsHttp2 => 13, // INTERNAL
        ErrorKind::MethodNotAllowed => 12,                     // UNIMPLEMENTED
        ErrorKind::RateLimited => 8,                           // RESOURCE_EXHAUSTED
        _ => 14,                                               // UNAVAILABLE
    }
}

/// The answer to a gRPC client: a trailers-only response (HTTP 200 with
/// `grpc-status` and `grpc-message`), which gRPC clients read as a status,
/// where a plain-text 502 would be a protocol error to them.
pub(crate) fn grpc_error_response(
    kind: ErrorKind,
    request_id: Option<&HeaderValue>,
) -> Response<ProxyBody> {
    let mut resp = Response::new(ProxyBody::Empty);
    let h = resp.headers_mut();
    h.insert(CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
    h.insert(
        "grpc-status",
        HeaderValue::from(u16::from(grpc_status(kind))),
    );
    let msg: String = format!("hopgate: {}", kind.reason())
        .bytes()
        .map(|b| match b {
            b' ' => "%20".to_owned(),
            b if b.is_ascii_alphanumeric() || b":-_.".contains(&b) => (b as char).to_string(),
            b => format!("%{b:02X}"),
        })
        .collect();
    if let Ok(v) = HeaderValue::from_str(&msg) {
        h.insert("grpc-message", v);
    }
    if let Some(v) = request_id {
        h.insert(X_REQUEST_ID.clone(), v.clone());
    }
    resp
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    #[test]
    fn grpc_errors_are_trailers_only_statuses() {
        let r = grpc_error_response(ErrorKind::ConnectFailed, None);
        assert_eq!(r.status(), 200);
        assert_eq!(r.headers()["grpc-status"], "14");
        assert_eq!(r.headers()["content-type"], "application/grpc");
        assert!(r.headers()["grpc-message"]
            .to_str()
            .unwrap()
            .starts_with("hopgate:%20could%20not"));
        assert_eq!(
            grpc_error_response(ErrorKind::UpstreamTimeout, None).headers()["grpc-status"],
            "4"
        );
        assert_eq!(
            grpc_error_response(ErrorKind::NoRoute, None).headers()["grpc-status"],
            "12"
        );
    }

    #[tokio::test]
    async fn bodies_name_reason_and_id() {
        let id = HeaderValue::from_static("abc123");
        for (kind, status) in [
            (ErrorKind::NoRoute, 404),
            (ErrorKind::NoLiveNode, 503),
            (ErrorKind::ConnectFailed, 502),
            (ErrorKind::UpstreamTimeout, 504),
            (ErrorKind::HeadersTooLarge, 431),
            (ErrorKind::BodyTooLarge, 413),
            (ErrorKind::UriTooLong, 414),
            (ErrorKind::Forbidden, 403),
        ] {
            let r = error_response(kind, Some(&id));
            assert_eq!(r.status().as_u16(), status);
            assert_eq!(r.headers().get(&X_REQUEST_ID).unwrap(), "abc123");
            let body = r.into_body().collect().await.unwrap().to_bytes();
            let text = String::from_utf8(body.to_vec()).unwrap();
            assert!(text.contains(kind.reason()), "{text}");
            assert!(text.contains("abc123"), "{text}");
        }
    }
}
