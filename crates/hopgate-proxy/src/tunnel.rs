//! Upgraded connections (WebSocket and other HTTP/1.1 `Upgrade`s): once the
//! backend answers 101, the client's and the backend's connections are
//! joined and bytes flow both ways until either side closes or the tunnel
//! has been idle for `timeouts.idle`.
//!
//! For WebSocket tunnels the gateway also ends things properly itself: when
//! the node drains, the tunnel lives until the service's drain deadline;
//! then — and when the backend vanishes without a close frame, or the
//! gateway shuts down — the client gets a close frame with code 1012
//! (Service Restart), so it reconnects (through the gateway, to a healthy
//! node) instead of seeing a reset. To inject that frame safely the tunnel
//! follows the backend→client frame boundaries; it never splits a frame.
//!
//! The client's side comes from hopgate's own HTTP/1.1 server, which hands
//! over its socket and any bytes it read past the head
//! ([`crate::h1::Upgrade`]); the backend's side is the raw socket hopgate's
//! HTTP/1.1 client read the 101 from, with any bytes it read past the head
//! ([`crate::h1::Upgraded`]), or hyper's upgrade for a connection hyper
//! spoke on.
//!
//! Owns the upgrade detection, the header restoration (hop-by-hop stripping
//! removes `Upgrade`/`Connection`, which an upgrade needs end to end) and
//! the copy loop. Must not touch: routing or pools (the backend connection
//! left its pool the moment it was upgraded).

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Buf, Bytes};
use http::header::{HeaderMap, HeaderValue, CONNECTION, UPGRADE};
use http::{Request, Response};
use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::sync::watch;

use crate::h1::{Upgrade, Upgraded};
use crate::tls::UpstreamIo;

pub(crate) use crate::h1::upgrade_request;

use hopgate_core::node::{now_ms, InFlight, NodeState};

/// Puts back the two headers an upgrade needs on both hops.
pub(crate) fn restore_upgrade_headers(headers: &mut HeaderMap, proto: &HeaderValue) {
    headers.insert(CONNECTION, HeaderValue::from_static("upgrade"));
    headers.insert(UPGRADE, proto.clone());
}

/// Everything a tunnel needs besides its two ends.
pub(crate) struct TunnelCtx {
    pub websocket: bool,
    pub idle: Duration,
    /// The serving node (its drain state ends the tunnel).
    pub node: Arc<NodeState>,
    pub drain_deadline: Duration,
    /// Turns true when the gateway shuts down.
    pub stopping: watch::Receiver<bool>,
    /// Held, never read: counts the tunnel in flight on its node until
    /// the tunnel ends.
    pub _inflight: InFlight,
    /// The request's place in its rate limit's `max_in_flight`, held
    /// while the tunnel lives.
    pub _held: Option<hopgate_core::limit::Held>,
}

/// Tunnels currently open (hyper's graceful shutdown does not see upgraded
/// connections, so the gateway waits on this before exiting).
static OPEN: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

struct OpenTunnel;

impl OpenTunnel {
    fn new() -> OpenTunnel {
        OPEN.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        OpenTunnel
    }
}

impl Drop for OpenTunnel {
    fn drop(&mut self) {
        OPEN.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
    }
}

/// Waits until every tunnel has closed (after shutdown began they close with
/// 1012 within moments), or `deadline` passes.
pub async fn wait_closed(deadline: Duration) {
    let until = tokio::time::Instant::now() + deadline;
    while OPEN.load(std::sync::atomic::Ordering::Acquire) > 0 && tokio::time::Instant::now() < until
    {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The backend's side of an upgrade.
pub(crate) enum UpstreamUpgrade {
    /// A raw socket from hopgate's client, when there is one.
    Raw(Option<(UpstreamIo, Bytes)>),
    Hyper(OnUpgrade),
}

/// Takes the backend's side of an upgrade out of its 101 response.
pub(crate) fn upstream_upgrade<B>(resp: &mut Response<B>) -> UpstreamUpgrade {
    match resp.extensions_mut().remove::<Upgraded<UpstreamIo>>() {
        Some(raw) => UpstreamUpgrade::Raw(raw.take()),
        None => UpstreamUpgrade::Hyper(hyper::upgrade::on(resp)),
    }
}

/// The client's side of an upgrade: hopgate's own HTTP/1.1 server hands
/// its socket over once the 101 is written (upgrades are HTTP/1.1 only,
/// and that server is the only one speaking it).
pub(crate) type ClientUpgrade = Option<Upgrade>;

/// Takes the client's side of an upgrade out of its request.
pub(crate) fn client_upgrade<B>(req: &mut Request<B>) -> ClientUpgrade {
    req.extensions_mut().remove::<Upgrade>()
}

/// Joins the client and backend once both upgrades complete.
pub(crate) fn spawn(client: ClientUpgrade, upstream: UpstreamUpgrade, ctx: TunnelCtx) {
    let open = OpenTunnel::new();
    tokio::spawn(async move {
        let _open = open;
        let Some(rx) = client.and_then(|c| c.take()) else {
            return;
        };
        let end = match rx.await {
            Ok((io, read_ahead)) => with_client(ReadAhead { read_ahead, io }, upstream, ctx).await,
            Err(_) => return,
        };
        if let Some(end) = end {
            tracing::debug!(?end, "tunnel closed");
        }
    });
}

/// Runs the tunnel between `client` and the backend once its side is
/// there.
async fn with_client<A>(mut client: A, upstream: UpstreamUpgrade, ctx: TunnelCtx) -> Option<End>
where
    A: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    match upstream {
        UpstreamUpgrade::Raw(Some((io, read_ahead))) => {
            let mut upstream = ReadAhead { read_ahead, io };
            Some(run(&mut client, &mut upstream, ctx).await)
        }
        UpstreamUpgrade::Raw(None) => None,
        UpstreamUpgrade::Hyper(upstream) => match upstream.await {
            Ok(u) => Some(run(&mut client, &mut TokioIo::new(u), ctx).await),
            Err(e) => {
                tracing::debug!(error = %e, "upgrade did not complete");
                None
            }
        },
    }
}

/// A socket whose first bytes were already read: they are read again
/// first.
pub(crate) struct ReadAhead<T> {
    pub(crate) read_ahead: Bytes,
    pub(crate) io: T,
}

impl<T: AsyncRead + Unpin> AsyncRead for ReadAhead<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if !self.read_ahead.is_empty() {
            let n = self.read_ahead.len().min(buf.remaining());
            buf.put_slice(&self.read_ahead[..n]);
            self.read_ahead.advance(n);
            if self.read_ahead.is_empty() {
                // Read again: its block (a whole read buffer, for h2c's
                // preface) is let go, not kept for the connection's life.
                self.read_ahead = Bytes::new();
            }
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for ReadAhead<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

/// Why a tunnel ended.
#[derive(Debug, PartialEq, Eq)]
enum End {
    Closed {
        up: u64,
        down: u64,
    },
    Idle,
    /// Closed with 1012 for this reason.
    ServiceRestart(&'static str),
}

/// The WebSocket close frame a server sends: code 1012, "service restart".
const CLOSE_1012: [u8; 19] = [
    0x88, 17, 0x03, 0xF4, b's', b'e', b'r', b'v', b'i', b'c', b'e', b' ', b'r', b'e', b's', b't',
    b'a', b'r', b't',
];

/// How often a tunnel looks at its node's drain state.
const DRAIN_POLL: Duration = Duration::from_millis(100);

async fn run<A, B>(a: &mut A, b: &mut B, mut ctx: TunnelCtx) -> End
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
    // backend → client frames, to find a safe point for our close frame.
    let mut frames = FrameTracker::default();
    let mut restart: Option<&'static str> = None;
    let mut last_activity = tokio::time::Instant::now();
    loop {
        if !(a_open || b_open) {
            return End::Closed { up, down };
        }
        if let Some(why) = restart {
            let mid_frame = (&frames, b_open, last_activity);
            if let Some(end) = restart_now(why, ctx.websocket, mid_frame, &mut aw, &mut bw).await {
                return end;
            }
        }
        let idle_left = ctx.idle.saturating_sub(last_activity.elapsed());
        if idle_left.is_zero() {
            return End::Idle;
        }
        let stopping = *ctx.stopping.borrow();
        tokio::select! {
            r = ar.read(&mut buf_a), if a_open && restart.is_none() => match r {
                Ok(0) | Err(_) => {
                    a_open = false;
                    let _ = bw.shutdown().await;
                }
                Ok(n) => {
                    up += n as u64;
                    last_activity = tokio::time::Instant::now();
                    if bw.write_all(&buf_a[..n]).await.is_err() {
                        b_open = false;
                        if ctx.websocket && !frames.saw_close {
                            restart = Some("backend connection lost");
                        }
                    }
                }
            },
            r = br.read(&mut buf_b), if b_open => match r {
                Ok(0) | Err(_) => {
                    b_open = false;
                    if ctx.websocket && !frames.saw_close && restart.is_none() && a_open {
                        // The backend vanished without a close frame.
                        restart = Some("backend connection lost");
                    } else {
                        let _ = aw.shutdown().await;
                    }
                }
                Ok(n) => {
                    down += n as u64;
                    last_activity = tokio::time::Instant::now();
                    if ctx.websocket {
                        frames.feed(&buf_b[..n]);
                    }
                    if aw.write_all(&buf_b[..n]).await.is_err() {
                        a_open = false;
                        let _ = bw.shutdown().await;
                    }
                }
            },
            _ = tokio::time::sleep(DRAIN_POLL.min(idle_left)), if restart.is_none() => {
                restart = restart_due(&ctx, stopping);
            }
            _ = ctx.stopping.changed(), if restart.is_none() && !stopping => {}
        }
    }
}

/// Why the tunnel must end now, if it must: the gateway stops, or its
/// node has drained past the deadline.
fn restart_due(ctx: &TunnelCtx, stopping: bool) -> Option<&'static str> {
    if stopping {
        return Some("gateway shutting down");
    }
    let since = ctx.node.draining_since()?;
    (now_ms() >= since + ctx.drain_deadline.as_millis() as u64).then_some("node drained")
}

/// A restart is due: a plain tunnel ends at once; a WebSocket gets its
/// 1012 close frame at a frame boundary, or, mid-frame, once the frame in
/// flight has been relayed (bounded: the backend gone, or a second without
/// a byte, ends it without the frame). `None`: relay on for now.
async fn restart_now<W1, W2>(
    why: &'static str,
    websocket: bool,
    (frames, b_open, last_activity): (&FrameTracker, bool, tokio::time::Instant),
    aw: &mut W1,
    bw: &mut W2,
) -> Option<End>
where
    W1: tokio::io::AsyncWrite + Unpin,
    W2: tokio::io::AsyncWrite + Unpin,
{
    if !websocket {
        return Some(End::ServiceRestart(why));
    }
    if frames.at_boundary() {
        let _ = aw.write_all(&CLOSE_1012).await;
        let _ = aw.flush().await;
        let _ = aw.shutdown().await;
        let _ = bw.shutdown().await;
        return Some(End::ServiceRestart(why));
    }
    if !b_open || last_activity.elapsed() > Duration::from_secs(1) {
        let _ = aw.shutdown().await;
        return Some(End::ServiceRestart(why));
    }
    None
}

/// Follows WebSocket frame boundaries in one direction of a stream.
#[derive(Debug, Default)]
struct FrameTracker {
    head: [u8; 14],
    have: usize,
    /// Payload bytes left in the current frame.
    remaining: u64,
    /// A close frame went by.
    saw_close: bool,
}

impl FrameTracker {
    fn at_boundary(&self) -> bool {
        self.have == 0 && self.remaining == 0
    }

    fn feed(&mut self, mut data: &[u8]) {
        while !data.is_empty() {
            if self.remaining > 0 {
                let n = (self.remaining.min(data.len() as u64)) as usize;
                self.remaining -= n as u64;
                data = &data[n..];
                continue;
            }
            // Collect the header.
            self.head[self.have] = data[0];
            self.have += 1;
            data = &data[1..];
            if self.have < 2 {
                continue;
            }
            let len7 = self.head[1] & 0x7f;
            let masked = self.head[1] & 0x80 != 0;
            let need =
                2 + match len7 {
                    126 => 2,
                    127 => 8,
                    _ => 0,
                } + if masked { 4 } else { 0 };
            if self.have < need {
                continue;
            }
            let len = match len7 {
                126 => u64::from(u16::from_be_bytes([self.head[2], self.head[3]])),
                127 => u64::from_be_bytes(self.head[2..10].try_into().unwrap_or([0; 8])),
                n => u64::from(n),
            };
            if self.head[0] & 0x0f == 0x8 {
                self.saw_close = true;
            }
            self.remaining = len;
            self.have = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frame_boundaries_across_chunks() {
        let mut t = FrameTracker::default();
        assert!(t.at_boundary());
        // Small text frame "hi".
        t.feed(&[0x81, 2, b'h']);
        assert!(!t.at_boundary());
        t.feed(b"i");
        assert!(t.at_boundary());
        // 300-byte binary frame (16-bit length), split everywhere.
        let mut f = vec![0x82, 126, 0x01, 0x2c];
        f.extend(std::iter::repeat_n(7u8, 300));
        for chunk in f.chunks(7) {
            t.feed(chunk);
        }
        assert!(t.at_boundary());
        // 64-bit length header.
        t.feed(&[0x82, 127, 0, 0, 0, 0, 0, 0, 0x01, 0x00]);
        assert!(!t.at_boundary());
        t.feed(&[0u8; 256]);
        assert!(t.at_boundary());
        assert!(!t.saw_close);
        t.feed(&[0x88, 2, 0x03, 0xe8]);
        assert!(t.saw_close && t.at_boundary());
    }

    #[test]
    fn close_frame_is_well_formed() {
        assert_eq!(CLOSE_1012[0], 0x88);
        assert_eq!(CLOSE_1012[1] as usize, CLOSE_1012.len() - 2);
        assert_eq!(u16::from_be_bytes([CLOSE_1012[2], CLOSE_1012[3]]), 1012);
    }
}
