//! The one place where an error becomes a client response.
//!
//! Owns the status, body and headers of every answer hopgate writes itself:
//! a short text naming the reason and the request id, so a user can act on
//! it and an operator can find it in the logs. Must not touch: anything
//! else. Details of upstream failures stay in logs, never in bodies.

use http::header::{HeaderValue, CACHE_CONTROL, CONTENT_TYPE};
use http::{Response, StatusCode};

use hopgate_core::error::ErrorKind;

use crate::body::ProxyBody;
use crate::headers::X_REQUEST_ID;

/// The response for an error of `kind` on request `request_id`.
pub fn error_response(kind: ErrorKind, request_id: Option<&HeaderValue>) -> Response<ProxyBody> {
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
    if let Some(v) = request_id {
        h.insert(X_REQUEST_ID.clone(), v.clone());
    }
    if matches!(kind, ErrorKind::ShuttingDown) {
        h.insert(http::header::CONNECTION, HeaderValue::from_static("close"));
    }
    resp
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

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
