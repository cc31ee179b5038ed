//! Per-thread spares of the buffers every request fills and drops: the
//! header-line list of a parsed head ([`super::head::Lines`]), the
//! slice list a response head is written from
//! ([`super::write::HeadWriter`]) and the box an answer's raw head rides
//! in with its body ([`crate::body::Headed`]). Each is handed back here, cleared, when its
//! user is done with it and taken by the next one on the thread. A
//! request's buffers are made and dropped one after the other, so one
//! spare of each spares an allocation and a free per request — and the
//! allocator's slow path, which a block freed and asked for again at once
//! takes every time.
//!
//! Owns: the spares and the caps on what is kept (a list or map that grew
//! for a rare large head is let go). Must not touch: what the buffers hold
//! (every list comes back empty).

use std::cell::Cell;
use std::io::IoSlice;

use super::head::HeaderRange;
use crate::body::{Headed, ProxyBody};

/// Lists with room for more than this are not kept.
const MOST_LINES: usize = 64;
const MOST_SLICES: usize = 4 * MOST_LINES + 16;

thread_local! {
    static LINES: Cell<Vec<HeaderRange>> = const { Cell::new(Vec::new()) };
    static SLICES: Cell<Vec<IoSlice<'static>>> = const { Cell::new(Vec::new()) };
    static HEADED: Cell<Option<Box<Headed>>> = const { Cell::new(None) };
}

/// Keeps whichever of the spare and `v` has more room. A thread being torn
/// down keeps nothing.
fn keep<T>(slot: &'static std::thread::LocalKey<Cell<Vec<T>>>, v: Vec<T>, most: usize) {
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

/// An empty line list with room for `n` lines.
pub(crate) fn lines(n: usize) -> Vec<HeaderRange> {
    let mut v = LINES.try_with(Cell::take).unwrap_or_default();
    v.reserve(n);
    v
}

pub(crate) fn give_lines(mut v: Vec<HeaderRange>) {
    v.clear();
    keep(&LINES, v, MOST_LINES);
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

/// A box for an answer's raw head and its body, empty (no head, an empty
/// body).
pub(crate) fn headed() -> Box<Headed> {
    HEADED
        .try_with(Cell::take)
        .ok()
        .flatten()
        .unwrap_or_else(|| {
            Box::new(Headed {
                raw: None,
                body: ProxyBody::Empty,
            })
        })
}

/// Keeps `h` for the thread's next answer once its head was taken off.
/// One whose body is still there (a head taken off an answer whose body
/// was not moved out first) is let go.
pub(crate) fn give_headed(h: Box<Headed>) {
    if h.raw.is_some() || !matches!(h.body, ProxyBody::Empty) {
        return;
    }
    let _ = HEADED.try_with(|s| s.set(Some(h)));
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
        let v = lines(8);
        let at = v.as_ptr() as usize;
        give_lines(v);
        let again = lines(4);
        assert_eq!(again.as_ptr() as usize, at);
        assert!(again.is_empty());

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

        let h = headed();
        let at = &*h as *const Headed as usize;
        give_headed(h);
        let h = headed();
        assert_eq!(&*h as *const Headed as usize, at, "an empty box comes back");
        assert!(h.raw.is_none() && matches!(h.body, ProxyBody::Empty));
        let mut full = h;
        full.body = ProxyBody::full("rest");
        give_headed(full);
        let kept = HEADED.with(|s| {
            let v = s.take();
            let kept = v.is_some();
            s.set(v);
            kept
        });
        assert!(!kept, "a box with a body in it is not kept");
    }

    /// What grew for a rare large head is let go.
    #[test]
    fn large_ones_are_not_kept() {
        give_lines(Vec::with_capacity(MOST_LINES + 1));
        assert!(lines(0).capacity() <= MOST_LINES);
    }
}
