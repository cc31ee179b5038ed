//! Per-thread spares of what a request fills and drops: the slice list a
//! response head is written from ([`super::write::HeadWriter`]), the rule
//! every spare list is kept by ([`keep`], which the header-line list of a
//! parsed head, [`super::head::Lines`], is kept by too), the read buffers
//! of client connections ([`buffer`]) and the blocks their requests'
//! futures run in ([`block`]). Each is handed back here, emptied, when its
//! user is done with it and taken by the next one on the thread. A
//! request's lists are made and dropped one after the other, so one spare
//! of each spares an allocation and a free per request — and the
//! allocator's slow path, which a block freed and asked for again at once
//! takes every time. (The boxes a request and its answer ride in are the
//! body type's spares: [`super::Payload::request`].)
//!
//! The buffers and blocks are what lets an idle keep-alive connection hold
//! neither (as NGINX frees a request's buffers on keep-alive): the server
//! gives them back when a request is done and borrows them again when the
//! next one comes, so the thread keeps a few for the requests in flight
//! instead of every connection keeping its own ([`super::server`]).
//!
//! Owns: the spares and the caps on what is kept (a list that grew for a
//! rare large head is let go; at most [`MOST_BUFFERS`] buffers and
//! [`MOST_BLOCKS`] blocks a thread). Must not touch: what the lists hold
//! (every list, buffer and block comes back empty).

use std::any::Any;
use std::cell::Cell;
use std::io::IoSlice;
use std::pin::Pin;

use bytes::BytesMut;

/// Lists with room for more than this are not kept (the head's line
/// list too, [`super::head::Lines`]).
pub(super) const MOST_LINES: usize = 64;
const MOST_SLICES: usize = 4 * MOST_LINES + 16;

/// The room of a client connection's read buffer: what one read of a
/// request head asks of the kernel.
pub(crate) const READ_BUFFER: usize = 8 * 1024;
/// Read buffers kept by a thread: enough for the requests a busy thread
/// has in flight at once, each 8 KiB.
pub(crate) const MOST_BUFFERS: usize = 32;
/// A buffer with less room than this left (the rest of its block shared
/// with a request still alive) is not kept.
const LEAST_ROOM: usize = 1024;
/// Request blocks kept by a thread (each the size of one request's
/// future, a few KiB).
pub(crate) const MOST_BLOCKS: usize = 32;

thread_local! {
    static SLICES: Cell<Vec<IoSlice<'static>>> = const { Cell::new(Vec::new()) };
    static BUFFERS: Cell<Vec<BytesMut>> = const { Cell::new(Vec::new()) };
    /// The spare request blocks, of the one future type the thread's
    /// server runs (a `Blocks<F>`; a server of another type allocates its
    /// blocks).
    static BLOCKS: Cell<Option<Box<dyn Any>>> = const { Cell::new(None) };
}

/// A pinned block a request's future runs in, empty between requests.
pub(crate) type Block<F> = Pin<Box<Option<F>>>;
type Blocks<F> = Vec<Block<F>>;

/// Keeps whichever of the spare and `v` has more room. A thread being torn
/// down keeps nothing.
pub(super) fn keep<T>(slot: &'static std::thread::LocalKey<Cell<Vec<T>>>, v: Vec<T>, most: usize) {
    if v.capacity() == 0 || v.capacity() > most {
        return;
    }
    let _ = slot.try_with(|s| {
        let old = s.take();
        s.set(if old.capacity() > v.capacity() {
            old
        } else {
            v
        });
    });
}

/// An empty slice list with room for `n` slices.
pub(crate) fn slices<'a>(n: usize) -> Vec<IoSlice<'a>> {
    let mut v = relabel(SLICES.try_with(Cell::take).unwrap_or_default());
    v.reserve(n);
    v
}

pub(crate) fn give_slices(v: Vec<IoSlice<'_>>) {
    keep(&SLICES, relabel(v), MOST_SLICES);
}

/// An empty read buffer with room for at least [`LEAST_ROOM`] bytes: the
/// thread's spare, or a new one of [`READ_BUFFER`].
pub(crate) fn buffer() -> BytesMut {
    let kept = BUFFERS.try_with(|s| {
        let mut all = s.take();
        let one = all.pop();
        s.set(all);
        one
    });
    kept.ok()
        .flatten()
        .unwrap_or_else(|| BytesMut::with_capacity(READ_BUFFER))
}

/// Takes back an empty read buffer. One with little room left has its
/// whole block reclaimed when no request shares it any more (or is let
/// go); one that grew for a large head is let go.
pub(crate) fn give_buffer(mut b: BytesMut) {
    debug_assert!(b.is_empty(), "only empty buffers are spares");
    b.clear();
    if b.capacity() < LEAST_ROOM && !b.try_reclaim(READ_BUFFER) {
        return;
    }
    if !(LEAST_ROOM..=2 * READ_BUFFER).contains(&b.capacity()) {
        return;
    }
    let _ = BUFFERS.try_with(|s| {
        let mut all = s.take();
        if all.len() < MOST_BUFFERS {
            all.push(b);
        }
        s.set(all);
    });
}

/// How many read buffers the thread keeps (the server's tests).
#[cfg(test)]
pub(crate) fn buffers_kept() -> usize {
    BUFFERS.with(|s| {
        let all = s.take();
        let n = all.len();
        s.set(all);
        n
    })
}

/// An empty block for a request's future of type `F`: the thread's spare,
/// or a new one.
pub(crate) fn block<F: 'static>() -> Block<F> {
    let kept = BLOCKS.try_with(|s| {
        let mut all = s.take()?;
        let one = (*all).downcast_mut::<Blocks<F>>().and_then(Vec::pop);
        s.set(Some(all));
        one
    });
    kept.ok().flatten().unwrap_or_else(|| Box::pin(None))
}

/// Takes back a request's block (what it holds is dropped first).
pub(crate) fn give_block<F: 'static>(mut b: Block<F>) {
    b.set(None);
    let _ = BLOCKS.try_with(|s| {
        let mut all = s
            .take()
            .unwrap_or_else(|| Box::new(Blocks::<F>::with_capacity(MOST_BLOCKS)));
        if let Some(kept) = (*all).downcast_mut::<Blocks<F>>() {
            if kept.len() < MOST_BLOCKS {
                kept.push(b);
            }
        }
        s.set(Some(all));
    });
}

/// An empty list of slices of another lifetime, in the same allocation:
/// collecting a vector's `IntoIter` into a vector of an element of the
/// same size and alignment reuses its buffer (the closure never runs: the
/// list is emptied first).
fn relabel<'b>(mut v: Vec<IoSlice<'_>>) -> Vec<IoSlice<'b>> {
    v.clear();
    v.into_iter().map(|_| IoSlice::new(&[])).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The spares are reused, not reallocated: the same block comes back.
    #[test]
    fn spares_come_back() {
        let s = slices(20);
        let at = s.as_ptr() as usize;
        give_slices(s);
        let again = slices(10);
        assert_eq!(
            again.as_ptr() as usize,
            at,
            "the slice list is relabelled in place"
        );
        assert!(again.is_empty());
    }

    /// What grew for a rare large head is let go.
    #[test]
    fn large_ones_are_not_kept() {
        give_slices(Vec::with_capacity(MOST_SLICES + 1));
        assert!(slices(0).capacity() <= MOST_SLICES);
        give_buffer(BytesMut::with_capacity(4 * READ_BUFFER));
        let b = buffer();
        assert!(b.capacity() <= 2 * READ_BUFFER);
        assert!(b.is_empty());
    }

    /// A buffer is kept with the room past the heads read into it; once
    /// little is left, its whole block is reclaimed when no request holds
    /// a head in it any more, and let go while one does.
    #[test]
    fn buffers_are_reclaimed_and_reused() {
        let mut b = buffer();
        let at = b.as_ptr() as usize;
        b.extend_from_slice(b"GET / HTTP/1.1\r\n\r\n");
        let head = b.split_to(b.len()).freeze();
        give_buffer(b);
        let mut again = buffer();
        assert_eq!(
            again.as_ptr() as usize,
            at + head.len(),
            "the room past the head"
        );
        let big = again.capacity() - 100;
        again.extend_from_slice(&vec![b'x'; big]);
        let big_head = again.split_to(big).freeze();
        drop((head, big_head));
        give_buffer(again);
        let whole = buffer();
        assert_eq!(
            whole.as_ptr() as usize,
            at,
            "the same block, from its start"
        );
        assert!(whole.capacity() >= READ_BUFFER);

        let mut shared = whole;
        shared.extend_from_slice(&vec![b'y'; READ_BUFFER - 100]);
        let alive = shared.split_to(READ_BUFFER - 100).freeze();
        give_buffer(shared);
        assert_eq!(buffers_kept(), 0, "a block a live head holds is let go");
        assert_eq!(alive[0], b'y');
    }

    /// Blocks come back for the same future type, emptied: what they held
    /// is dropped when they are given back.
    #[test]
    fn blocks_come_back_empty() {
        let held = std::sync::Arc::new(());
        let mut b = block::<std::future::Ready<std::sync::Arc<()>>>();
        b.set(Some(std::future::ready(std::sync::Arc::clone(&held))));
        let at = &*b as *const _ as usize;
        give_block(b);
        assert_eq!(
            std::sync::Arc::strong_count(&held),
            1,
            "dropped on the way back"
        );
        let again = block::<std::future::Ready<std::sync::Arc<()>>>();
        assert_eq!(&*again as *const _ as usize, at);
        assert!(again.is_none());
        // Another type on the thread gets a block of its own.
        let other = block::<std::future::Ready<u8>>();
        assert!(other.is_none());
    }
}
