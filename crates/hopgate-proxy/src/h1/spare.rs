//! Per-thread spares of the lists every head fills and drops: the slice
//! list a response head is written from ([`super::write::HeadWriter`]),
//! and the rule every spare list is kept by ([`keep`], which the header-line
//! list of a parsed head, [`super::head::Lines`], is kept by too). Each is handed back here, cleared, when
//! its user is done with it and taken by the next one on the thread. A
//! request's lists are made and dropped one after the other, so one spare
//! of each spares an allocation and a free per request — and the
//! allocator's slow path, which a block freed and asked for again at once
//! takes every time. (The boxes a request and its answer ride in are the
//! body type's spares: [`super::Payload::request`].)
//!
//! Owns: the spares and the caps on what is kept (a list that grew for a
//! rare large head is let go). Must not touch: what the lists hold (every
//! list comes back empty).

use std::cell::Cell;
use std::io::IoSlice;

/// Lists with room for more than this are not kept (the head's line
/// list too, [`super::head::Lines`]).
pub(super) const MOST_LINES: usize = 64;
const MOST_SLICES: usize = 4 * MOST_LINES + 16;

thread_local! {
    static SLICES: Cell<Vec<IoSlice<'static>>> = const { Cell::new(Vec::new()) };
}

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
    }
}
