//! The WebSocket echo at `/ws` (HTTP/1.1 Upgrade): every text and binary
//! message goes back unchanged, pings are answered, and on shutdown the
//! socket is closed with 1001 (going away).

use std::sync::Arc;
use std::time::Duration;

use futures_util::{SinkExt as _, StreamExt as _};
use http::header::{self, HeaderValue};
use http::{Method, Request, Response, StatusCode, Version};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::sync::watch;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, Role};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;

use super::body::RespBody;
use super::{json_response, State};

/// How long we wait for the peer's close frame after sending ours.
const CLOSE_WAIT: Duration = Duration::from_secs(2);

/// Whether the request asks for a WebSocket upgrade.
pub(super) fn is_upgrade(req: &Request<Incoming>) -> bool {
    let has_token = |name: header::HeaderName, token: &str| {
        req.headers()
            .get_all(name)
            .iter()
            .filter_map(|value| value.to_str().ok())
            .flat_map(|value| value.split(','))
            .any(|item| item.trim().eq_ignore_ascii_case(token))
    };
    req.method() == Method::GET
        && req.version() == Version::HTTP_11
        && has_token(header::CONNECTION, "upgrade")
        && has_token(header::UPGRADE, "websocket")
}

/// Answers the handshake with 101 and spawns the echo on the upgraded
/// connection.
pub(super) fn accept(state: &Arc<State>, mut req: Request<Incoming>) -> Response<RespBody> {
    let bad = |status: StatusCode, message: &str| {
        json_response(
            status,
            &serde_json::json!({"node": state.id, "error": message}),
            false,
        )
    };
    let version_ok = req
        .headers()
        .get(header::SEC_WEBSOCKET_VERSION)
        .is_some_and(|v| v.as_bytes() == b"13");
    if !version_ok {
        let mut response = bad(StatusCode::UPGRADE_REQUIRED, "websocket version 13 only");
        response.headers_mut().insert(
            header::SEC_WEBSOCKET_VERSION,
            HeaderValue::from_static("13"),
        );
        return response;
    }
    let Some(key) = req.headers().get(header::SEC_WEBSOCKET_KEY) else {
        return bad(StatusCode::BAD_REQUEST, "missing Sec-WebSocket-Key");
    };
    let accept_key = derive_accept_key(key.as_bytes());
    let Ok(accept_key) = HeaderValue::from_str(&accept_key) else {
        return bad(StatusCode::BAD_REQUEST, "bad Sec-WebSocket-Key");
    };
    // Pick the first subprotocol offered: browsers refuse a handshake that
    // ignores the protocols they asked for.
    let protocol = req
        .headers()
        .get(header::SEC_WEBSOCKET_PROTOCOL)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.split(',').next())
        .map(str::trim)
        .filter(|value| !value.is_empty())
        .and_then(|value| HeaderValue::from_str(value).ok());

    let on_upgrade = hyper::upgrade::on(&mut req);
    let open = Open::new(state);
    let shutting_down = state.shutting_down.subscribe();
    tokio::spawn(async move {
        let _open = open;
        match on_upgrade.await {
            Ok(upgraded) => {
                let socket =
                    WebSocketStream::from_raw_socket(TokioIo::new(upgraded), Role::Server, None)
                        .await;
                echo(socket, shutting_down).await;
            }
            Err(error) => tracing::debug!(%error, "backend websocket upgrade failed"),
        }
    });

    let mut response = Response::new(RespBody::empty());
    *response.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let headers = response.headers_mut();
    headers.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
    headers.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
    headers.insert(header::SEC_WEBSOCKET_ACCEPT, accept_key);
    if let Some(protocol) = protocol {
        headers.insert(header::SEC_WEBSOCKET_PROTOCOL, protocol);
    }
    response
}

async fn echo<S>(mut socket: WebSocketStream<S>, mut shutting_down: watch::Receiver<bool>)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    loop {
        tokio::select! {
            message = socket.next() => match message {
                Some(Ok(message @ (Message::Text(_) | Message::Binary(_)))) => {
                    if socket.send(message).await.is_err() {
                        return;
                    }
                }
                // tungstenite queues the pong; push it out now.
                Some(Ok(Message::Ping(_))) => {
                    if socket.flush().await.is_err() {
                        return;
                    }
                }
                // Pongs, raw frames; a close is answered by tungstenite and
                // the stream then ends.
                Some(Ok(_)) => {}
                Some(Err(_)) | None => return,
            },
            () = shutdown_started(&mut shutting_down) => {
                let close = CloseFrame {
                    code: CloseCode::Away,
                    reason: "backend shutting down".into(),
                };
                if socket.close(Some(close)).await.is_ok() {
                    let drain = async { while let Some(Ok(_)) = socket.next().await {} };
                    let _ = tokio::time::timeout(CLOSE_WAIT, drain).await;
                }
                return;
            }
        }
    }
}

/// Resolves once shutdown has started (or the state is gone).
async fn shutdown_started(rx: &mut watch::Receiver<bool>) {
    let _ = rx.wait_for(|started| *started).await;
}

/// Counts an open WebSocket until dropped; shutdown waits for zero.
struct Open(Arc<State>);

impl Open {
    fn new(state: &Arc<State>) -> Self {
        state.websockets.send_modify(|open| *open += 1);
        Self(Arc::clone(state))
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        self.0
            .websockets
            .send_modify(|open| *open = open.saturating_sub(1));
    }
}
