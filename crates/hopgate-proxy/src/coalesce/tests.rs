use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::{gathered, Coalesced, HIGH};

/// A socket that records each write; `full` makes writes pend.
#[derive(Default)]
struct Rec {
    writes: Vec<Vec<u8>>,
    full: bool,
    shut: bool,
}

impl AsyncRead for Rec {
    fn poll_read(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        _: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Poll::Pending
    }
}

impl AsyncWrite for Rec {
    fn poll_write(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        if self.full {
            return Poll::Pending;
        }
        self.writes.push(buf.to_vec());
        Poll::Ready(Ok(buf.len()))
    }
    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.shut = true;
        Poll::Ready(Ok(()))
    }
}

/// Counts its wakes.
struct Count(AtomicUsize);
impl Wake for Count {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

/// One turn: `step` runs inside a poll of a [`super::Polls`] future.
fn turn<F: FnMut(&mut Context<'_>)>(cx: &mut Context<'_>, mut step: F) {
    let mut polls = super::Polls(std::future::poll_fn(|cx| {
        step(cx);
        Poll::Ready(())
    }));
    assert!(Pin::new(&mut polls).poll(cx).is_ready());
}

fn write_flush(io: &mut Coalesced<Rec>, cx: &mut Context<'_>, bytes: &[u8]) {
    let n = Pin::new(&mut *io).poll_write(cx, bytes);
    assert!(matches!(n, Poll::Ready(Ok(k)) if k == bytes.len()));
    assert!(Pin::new(&mut *io).poll_flush(cx).is_ready());
}

#[test]
fn the_writes_of_one_turn_go_out_as_one_on_the_next() {
    let woken = Arc::new(Count(AtomicUsize::new(0)));
    let waker = Waker::from(Arc::clone(&woken));
    let mut cx = Context::from_waker(&waker);
    let mut io = Coalesced::new(Rec::default());
    turn(&mut cx, |cx| {
        write_flush(&mut io, cx, b"one ");
        write_flush(&mut io, cx, b"two ");
    });
    assert!(io.io.writes.is_empty(), "held in the turn");
    assert!(woken.0.load(Ordering::Relaxed) >= 1, "the task woke itself");
    turn(&mut cx, |cx| write_flush(&mut io, cx, b"three"));
    assert_eq!(io.io.writes, vec![b"one two three".to_vec()]);
    assert_eq!(io.buf.capacity(), 0, "no room kept once written");
    // Nothing kept: a flush passes through.
    turn(&mut cx, |cx| {
        assert!(Pin::new(&mut io).poll_flush(cx).is_ready())
    });
    assert_eq!(io.io.writes.len(), 1);
}

#[test]
fn vectored_writes_are_kept_in_order() {
    let waker = Waker::noop();
    let mut cx = Context::from_waker(waker);
    let mut io = Coalesced::new(Rec::default());
    assert!(io.is_write_vectored());
    turn(&mut cx, |cx| {
        let bufs = [io::IoSlice::new(b"head|"), io::IoSlice::new(b"payload")];
        let n = Pin::new(&mut io).poll_write_vectored(cx, &bufs);
        assert!(matches!(n, Poll::Ready(Ok(12))));
        assert!(Pin::new(&mut io).poll_flush(cx).is_ready());
    });
    turn(&mut cx, |cx| {
        assert!(Pin::new(&mut io).poll_flush(cx).is_ready())
    });
    assert_eq!(io.io.writes, vec![b"head|payload".to_vec()]);
}

#[test]
fn shutdown_writes_what_is_kept_first() {
    let waker = Waker::noop();
    let mut cx = Context::from_waker(waker);
    let mut io = Coalesced::new(Rec::default());
    turn(&mut cx, |cx| {
        write_flush(&mut io, cx, b"goaway");
        assert!(Pin::new(&mut io).poll_shutdown(cx).is_ready());
    });
    assert_eq!(io.io.writes, vec![b"goaway".to_vec()]);
    assert!(io.io.shut);
}

#[test]
fn past_the_high_mark_bytes_go_out_at_once() {
    let waker = Waker::noop();
    let mut cx = Context::from_waker(waker);
    let mut io = Coalesced::new(Rec::default());
    let big = vec![7u8; HIGH];
    turn(&mut cx, |cx| {
        write_flush(&mut io, cx, b"small");
        // Would pass the mark: the kept bytes go first, then this one
        // (as large as the mark) is kept.
        write_flush(&mut io, cx, &big);
        assert_eq!(io.io.writes, vec![b"small".to_vec()]);
        // Larger than the mark: the kept bytes, then it, straight through.
        let bigger = vec![8u8; HIGH + 1];
        write_flush(&mut io, cx, &bigger);
    });
    assert_eq!(io.io.writes.len(), 3);
    assert_eq!(io.io.writes[1], big);
    assert_eq!(io.io.writes[2].len(), HIGH + 1);
}

#[test]
fn a_socket_that_takes_nothing_keeps_the_bytes_and_pends() {
    let waker = Waker::noop();
    let mut cx = Context::from_waker(waker);
    let mut io = Coalesced::new(Rec::default());
    turn(&mut cx, |cx| write_flush(&mut io, cx, b"kept"));
    io.io.full = true;
    turn(&mut cx, |cx| {
        assert!(Pin::new(&mut io).poll_flush(cx).is_pending())
    });
    io.io.full = false;
    turn(&mut cx, |cx| {
        assert!(Pin::new(&mut io).poll_flush(cx).is_ready())
    });
    assert_eq!(io.io.writes, vec![b"kept".to_vec()]);
}

#[tokio::test]
async fn gathered_serves_the_socket_it_wraps() {
    let (client, server) = tokio::io::duplex(1 << 20);
    let served = gathered(server, |mut io| async move {
        use tokio::io::AsyncWriteExt;
        io.write_all(b"hello ").await.unwrap();
        io.flush().await.unwrap();
        io.write_all(b"world").await.unwrap();
        io.shutdown().await.unwrap();
    });
    served.await;
    let mut got = Vec::new();
    let mut client = client;
    tokio::io::AsyncReadExt::read_to_end(&mut client, &mut got)
        .await
        .unwrap();
    assert_eq!(got, b"hello world");
}
