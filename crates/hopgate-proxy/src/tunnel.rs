//! Upgraded connections (WebSocket over HTTP/1.1 `Upgrade`): once the
//! backend answers 101, the client's and the backend's connections are
//! joined and bytes flow both ways until either side closes or the tunnel
//! has been idle for `timeouts.idle`.
//!
//! Owns the upgrade detection, the header restoration (hop-by-hop stripping
//! removes `Upgrade`/`Connection`, which an upgrade needs end to end) and
//! the copy loop. Must not touch: routing or pools (the backend connection
//! left its pool the moment it was upgraded).

use std::time::Duration;

use http::header::{HeaderMap, HeaderValue, CONNECTION, UPGRADE};
use http::Request;
use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use hopgate_core::node::InFlight;

/// The `Upgrade` protocol of a request asking for one (HTTP/1.1 only).
pub fn upgrade_request<B>(req: &Request<B>) -> Option<HeaderValue> {
    if req.version() != http::Version::HTTP_11 {
        return None;
    }
    let asks = req
        .headers()
        .get_all(CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|t| t.trim().eq_ignore_ascii_case("upgrade"));
    if !asks {
        return None;
    }
    req.headers().get(UPGRADE).cloned()
}

/// Puts back the two headers an upgrade needs on both hops.
pub fn restore_upgrade_headers(headers: &mut HeaderMap, proto: &HeaderValue) {
    headers.insert(CONNECTION, HeaderValue::from_static("upgrade"));
    headers.insert(UPGRADE, proto.clone());
}

/// Joins the client and backend once both upgrades complete. The node's
/// in-flight count includes the tunnel until it ends.
pub fn spawn(client: OnUpgrade, upstream: OnUpgrade, idle: Duration, inflight: InFlight) {
    tokio::spawn(async move {
        let _inflight = inflight;
        let (client, upstream) = match tokio::try_join!(client, upstream) {
            Ok(pair) => pair,
            Err(e) => {
                tracing::debug!(error = %e, "upgrade did not complete");
                return;
            }
        };
        let mut client = TokioIo::new(client);
        let mut upstream = TokioIo::new(upstream);
        let (up, down) = copy_with_idle_timeout(&mut client, &mut upstream, idle).await;
        tracing::debug!(bytes_up = up, bytes_down = down, "tunnel closed");
    });
}

/// Copies both ways until both directions finish, one side fails, or no
/// byte moved for `idle`.
async fn copy_with_idle_timeout<A, B>(a: &mut A, b: &mut B, idle: Duration) -> (u64, u64)
where
    A: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    B: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let (mut ar, mut aw) = tokio::io::split(a);
    let (mut br, mut bw) = tokio::io::split(b);
    let mut buf_a = vec![0u8; 16 << 10];
    let mut buf_b = vec![0u8; 16 << 10];
    let (mut up, mut down) = (0u64, 0u64);
    let (mut a_open, mut b_open) = (true, true);
    while a_open || b_open {
        let step = tokio::time::timeout(idle, async {
            tokio::select! {
                r = ar.read(&mut buf_a), if a_open => (true, r),
                r = br.read(&mut buf_b), if b_open => (false, r),
            }
        })
        .await;
        let Ok((from_a, read)) = step else {
            tracing::debug!("tunnel idle timeout");
            break;
        };
        match read {
            Ok(0) => {
                if from_a {
                    a_open = false;
                    let _ = bw.shutdown().await;
                } else {
                    b_open = false;
                    let _ = aw.shutdown().await;
                }
            }
            Ok(n) => {
                let written = if from_a {
                    up += n as u64;
                    bw.write_all(&buf_a[..n]).await
                } else {
                    down += n as u64;
                    aw.write_all(&buf_b[..n]).await
                };
                if written.is_err() {
                    break;
                }
            }
            Err(_) => break,
        }
    }
    (up, down)
}
