//! The admin listener: accepting connections (at most
//! [`ADMIN_MAX_CONNECTIONS`]), hyper's server on each with the client
//! socket deadlines, and the graceful end at shutdown (answers in
//! progress and event streams' ends finish, up to 5 s).
//!
//! Must not touch: what a request gets (the router, [`super::route`]).

use std::convert::Infallible;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use hopgate_proxy::ClientIo;

use super::Admin;

/// How long a connection accepted just before shutdown has to send its
/// first request (it is answered, then closed).
const ADMIN_FIRST_REQUEST_GRACE: Duration = Duration::from_secs(2);

/// How long the admin API waits for its connections at shutdown.
const ADMIN_SHUTDOWN_BOUND: Duration = Duration::from_secs(5);

/// Open admin connections at most; more are closed at once.
const ADMIN_MAX_CONNECTIONS: usize = 128;
/// How long an admin client has to send a request head (and, before that,
/// its first bytes).
const ADMIN_HEADER_READ: Duration = Duration::from_secs(10);
/// How long an admin client may leave a response unread.
const ADMIN_WRITE_STALL: Duration = Duration::from_secs(60);
/// One warning per burst of refused admin connections, not one per refusal.
static ADMIN_FULL_WARNED: AtomicBool = AtomicBool::new(false);

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
                tokio::time::sleep(Duration::from_millis(50)).await;
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
        let conn = connection(
            stream,
            Arc::clone(&admin),
            Arc::clone(&builder),
            shutdown.clone(),
        );
        let open = Arc::clone(&open);
        tokio::spawn(async move {
            conn.await;
            open.fetch_sub(1, Ordering::Relaxed);
        });
    }
    // Let the connections finish what they are writing (an event stream's
    // end), up to a bound.
    let deadline = tokio::time::Instant::now() + ADMIN_SHUTDOWN_BOUND;
    while open.load(Ordering::Relaxed) > 0 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// One admin connection, served until it ends or shutdown closes it.
async fn connection(
    stream: TcpStream,
    admin: Arc<Admin>,
    builder: Arc<auto::Builder<TokioExecutor>>,
    shutdown: watch::Receiver<bool>,
) {
    let stop = shutdown.clone();
    let mut conn_stop = shutdown;
    // Told when the connection's first request arrives.
    let first = Arc::new(tokio::sync::Notify::new());
    let told = Arc::clone(&first);
    let svc = hyper::service::service_fn(move |req| {
        told.notify_one();
        let (admin, stop) = (Arc::clone(&admin), stop.clone());
        async move { Ok::<_, Infallible>(super::route(admin, req, stop).await) }
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
}

/// Resolves once shutdown has been requested.
async fn stopped(rx: &mut watch::Receiver<bool>) {
    let _ = rx.wait_for(|s| *s).await;
}
