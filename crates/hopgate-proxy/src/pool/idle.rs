//! The idle set of a pool: a bounded, lock-free set of parked connections
//! that hands out the most recently parked ones first.
//!
//! Slots are numbered; a connection is parked in the lowest free slot and
//! checked out from the lowest full one. Under steady load the connections
//! in use are therefore always the same few (those in the lowest slots),
//! whose sockets, buffers and the backend's state for them stay in cache,
//! and whose backend has seen them most recently (least likely to have
//! closed them for idleness). Connections a burst opened beyond that sit
//! in the higher slots untouched until the pool's idle sweep closes them
//! at `idle_timeout`, so a backend sees its connection count fall after a
//! burst. A FIFO queue would cycle through every connection ever opened
//! instead: nginx (`keepalive`), Go's `http.Transport` and Envoy all reuse
//! the most recent connection for these reasons.
//!
//! Each slot has two bits: `claimed` (someone owns the slot: filling it,
//! or it is full) and `full` (a value is in it). Parking claims the lowest
//! unclaimed slot, stores, then sets `full`; checking out clears the
//! lowest `full` bit (which gives it the value), takes it and releases
//! the claim. No slot is ever touched by two parties at once.
//!
//! Must not touch: connection state, timing or the pool's policy (that is
//! [`super::Pool`]): this is only the container.

use std::sync::atomic::{AtomicU64, Ordering};

use crossbeam_utils::atomic::AtomicCell;

const BITS: usize = 64;

/// A bounded set of boxed values, lowest slot first.
pub(crate) struct IdleSet<T> {
    slots: Box<[AtomicCell<Option<Box<T>>>]>,
    claimed: Box<[AtomicU64]>,
    full: Box<[AtomicU64]>,
    capacity: usize,
}

impl<T> std::fmt::Debug for IdleSet<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IdleSet")
            .field("capacity", &self.capacity)
            .field("len", &self.len())
            .finish()
    }
}

impl<T> IdleSet<T> {
    /// A set of `capacity` slots (at least one).
    pub(crate) fn new(capacity: usize) -> IdleSet<T> {
        let capacity = capacity.max(1);
        let words = capacity.div_ceil(BITS);
        IdleSet {
            slots: (0..capacity).map(|_| AtomicCell::new(None)).collect(),
            claimed: (0..words).map(|_| AtomicU64::new(0)).collect(),
            full: (0..words).map(|_| AtomicU64::new(0)).collect(),
            capacity,
        }
    }

    pub(crate) fn capacity(&self) -> usize {
        self.capacity
    }

    /// How many values are parked (a snapshot: others may be parking or
    /// taking at the same moment).
    pub(crate) fn len(&self) -> usize {
        self.full
            .iter()
            .map(|w| w.load(Ordering::Relaxed).count_ones() as usize)
            .sum()
    }

    /// The slots of word `w` that exist (the last word may be partial).
    fn valid(&self, w: usize) -> u64 {
        let n = self.capacity - w * BITS;
        if n >= BITS {
            u64::MAX
        } else {
            (1u64 << n) - 1
        }
    }

    /// Parks `value` in the lowest free slot; hands it back when every
    /// slot is taken.
    pub(crate) fn push(&self, value: Box<T>) -> Result<(), Box<T>> {
        for (w, word) in self.claimed.iter().enumerate() {
            let valid = self.valid(w);
            let mut cur = word.load(Ordering::Relaxed);
            loop {
                let free = !cur & valid;
                if free == 0 {
                    break;
                }
                let bit = 1u64 << free.trailing_zeros();
                match word.compare_exchange_weak(
                    cur,
                    cur | bit,
                    Ordering::Acquire,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => {
                        let i = w * BITS + bit.trailing_zeros() as usize;
                        self.slots[i].store(Some(value));
                        self.full[w].fetch_or(bit, Ordering::Release);
                        return Ok(());
                    }
                    Err(now) => cur = now,
                }
            }
        }
        Err(value)
    }

    /// Takes the value in the lowest full slot.
    pub(crate) fn pop(&self) -> Option<Box<T>> {
        for w in 0..self.full.len() {
            while let Some((bit, value)) = self.take_lowest(w) {
                self.claimed[w].fetch_and(!bit, Ordering::Release);
                if value.is_some() {
                    return value;
                }
            }
        }
        None
    }

    /// Clears the lowest `full` bit of word `w` and takes its slot's value
    /// (the slot stays claimed): `None` when the word has no full slot.
    #[allow(clippy::type_complexity)]
    fn take_lowest(&self, w: usize) -> Option<(u64, Option<Box<T>>)> {
        let word = &self.full[w];
        let mut cur = word.load(Ordering::Acquire);
        loop {
            if cur == 0 {
                return None;
            }
            let bit = 1u64 << cur.trailing_zeros();
            match word.compare_exchange_weak(cur, cur & !bit, Ordering::Acquire, Ordering::Acquire)
            {
                Ok(_) => {
                    let i = w * BITS + bit.trailing_zeros() as usize;
                    return Some((bit, self.slots[i].take()));
                }
                Err(now) => cur = now,
            }
        }
    }

    /// Looks at every parked value once: `keep` returning false drops it
    /// (its slot is freed), true puts it back in the slot it came from.
    /// Values parked or taken meanwhile are not disturbed. Returns how
    /// many were dropped.
    pub(crate) fn retain(&self, mut keep: impl FnMut(&mut T) -> bool) -> usize {
        let mut dropped = 0;
        for w in 0..self.full.len() {
            // The full slots of this word when the sweep reached it; each
            // is taken only if it is still full.
            let mut todo = self.full[w].load(Ordering::Acquire);
            while todo != 0 {
                let bit = 1u64 << todo.trailing_zeros();
                todo &= !bit;
                if self.full[w].fetch_and(!bit, Ordering::Acquire) & bit == 0 {
                    continue; // taken by a checkout meanwhile
                }
                let i = w * BITS + bit.trailing_zeros() as usize;
                let kept = match self.slots[i].take() {
                    Some(mut value) => {
                        if keep(&mut value) {
                            self.slots[i].store(Some(value));
                            true
                        } else {
                            dropped += 1;
                            false
                        }
                    }
                    None => false,
                };
                if kept {
                    self.full[w].fetch_or(bit, Ordering::Release);
                } else {
                    self.claimed[w].fetch_and(!bit, Ordering::Release);
                }
            }
        }
        dropped
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::sync::Arc;

    #[test]
    fn the_most_recently_parked_comes_out_first() {
        let set = IdleSet::new(8);
        for v in 0..3u32 {
            set.push(Box::new(v)).unwrap();
        }
        // slots 0, 1, 2 hold 0, 1, 2: the lowest comes out
        assert_eq!(*set.pop().unwrap(), 0);
        // given back, it lands in the freed lowest slot and comes out again
        set.push(Box::new(10)).unwrap();
        assert_eq!(*set.pop().unwrap(), 10);
        assert_eq!(set.len(), 2);
        assert_eq!(*set.pop().unwrap(), 1);
        assert_eq!(*set.pop().unwrap(), 2);
        assert!(set.pop().is_none());
        assert_eq!(set.len(), 0);
    }

    #[test]
    fn a_full_set_hands_the_value_back() {
        let set = IdleSet::new(65); // two words, the second with one slot
        assert_eq!(set.capacity(), 65);
        for v in 0..65u32 {
            set.push(Box::new(v)).unwrap();
        }
        assert_eq!(*set.push(Box::new(99)).unwrap_err(), 99);
        assert_eq!(set.len(), 65);
        assert_eq!(*set.pop().unwrap(), 0);
        set.push(Box::new(7)).unwrap();
        let mut all: Vec<u32> = std::iter::from_fn(|| set.pop()).map(|b| *b).collect();
        all.sort_unstable();
        assert_eq!(all.len(), 65);
        assert_eq!(all[0], 1);
        assert!(all.contains(&7));
        assert_eq!(IdleSet::<u8>::new(0).capacity(), 1);
    }

    #[test]
    fn retain_drops_what_fails_and_keeps_the_rest_in_place() {
        let set = IdleSet::new(100);
        for v in 0..100u32 {
            set.push(Box::new(v)).unwrap();
        }
        let dropped = set.retain(|v| {
            *v += 1000;
            *v % 2 == 0
        });
        assert_eq!(dropped, 50);
        assert_eq!(set.len(), 50);
        // kept values stay in their slots, in order, and saw the change
        assert_eq!(*set.pop().unwrap(), 1000);
        assert_eq!(*set.pop().unwrap(), 1002);
        // freed slots are reused lowest first
        set.push(Box::new(5)).unwrap();
        assert_eq!(*set.pop().unwrap(), 5);
    }

    /// Values are never lost or duplicated with parkers, takers and a
    /// sweeper racing on a small set: every value made is dropped exactly
    /// once, and what is parked when all stop is what `pop` finds.
    #[test]
    fn concurrent_parking_taking_and_sweeping_conserve_values() {
        struct Counted(Arc<AtomicUsize>);
        impl Drop for Counted {
            fn drop(&mut self) {
                self.0.fetch_add(1, Ordering::Relaxed);
            }
        }
        let dropped = Arc::new(AtomicUsize::new(0));
        let made = Arc::new(AtomicUsize::new(0));
        let set = Arc::new(IdleSet::new(70));
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let (set, dropped, made) = (set.clone(), dropped.clone(), made.clone());
                std::thread::spawn(move || {
                    let mut held = Vec::new();
                    for i in 0..20_000usize {
                        if t == 3 && i % 500 == 0 {
                            set.retain(|_| i % 1000 != 0);
                        } else if (i + t) % 3 == 0 {
                            held.extend(set.pop());
                        } else {
                            let v = held.pop().unwrap_or_else(|| {
                                made.fetch_add(1, Ordering::Relaxed);
                                Box::new(Counted(dropped.clone()))
                            });
                            drop(set.push(v));
                        }
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let left = set.len();
        let mut n = 0;
        while set.pop().is_some() {
            n += 1;
        }
        assert_eq!(n, left, "len() matches what pop() finds when quiet");
        drop(set);
        assert_eq!(
            dropped.load(Ordering::Relaxed),
            made.load(Ordering::Relaxed),
            "every value dropped once: none lost in a slot, none twice"
        );
    }
}
