//! A frozen byte-string hash table for the router: host → tier and, per
//! tier, exact path → candidates.
//!
//! Owns the hash function and the open-addressing layout. Built once at
//! compile time and only read afterwards; `get` never allocates. A table may
//! fold ASCII case while hashing and comparing, which is how a request host
//! in any case is looked up against lowercase keys without copying it
//! (so there is no length limit and no fallback path for long hosts).
//!
//! Must not touch: matching semantics (which keys exist and what they mean
//! is decided in `route/compile.rs`).

/// Multiplier of the word-at-a-time hash (the golden-ratio constant FxHash uses).
const K: u64 = 0x9e37_79b9_7f4a_7c15;
const LO7: u64 = 0x7f7f_7f7f_7f7f_7f7f;
const ONES: u64 = 0x0101_0101_0101_0101;
const HIGH: u64 = 0x8080_8080_8080_8080;

/// ASCII-lowercases the 8 bytes of `w` at once; non-ASCII bytes are kept.
fn lower8(w: u64) -> u64 {
    let heptets = w & LO7;
    let above_z = heptets + (0x7f - u64::from(b'Z')) * ONES;
    let from_a = heptets + (0x80 - u64::from(b'A')) * ONES;
    let upper = from_a & !above_z & !w & HIGH;
    w | (upper >> 2)
}

/// Reads up to 8 bytes as a little-endian word, zero-padded.
#[inline(always)]
fn word(b: &[u8]) -> u64 {
    let n = b.len();
    if n >= 8 {
        u64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]])
    } else if n >= 4 {
        // Two overlapping 4-byte reads, the second shifted into place.
        let lo = u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as u64;
        let hi = u32::from_le_bytes([b[n - 4], b[n - 3], b[n - 2], b[n - 1]]) as u64;
        lo | (hi << ((n - 4) * 8))
    } else if n > 0 {
        b[0] as u64 | (b[n / 2] as u64) << (n / 2 * 8) | (b[n - 1] as u64) << ((n - 1) * 8)
    } else {
        0
    }
}

/// `stored == key`, or with `fold`, `stored == key.to_ascii_lowercase()`
/// (`stored` being lowercase already); both of the same length. Eight bytes
/// at a time, no `memcmp` call.
#[inline(always)]
fn same_key(stored: &[u8], key: &[u8], fold: bool) -> bool {
    let (mut a, mut b) = (stored, key);
    loop {
        let w = word(b);
        if word(a) != if fold { lower8(w) } else { w } {
            return false;
        }
        if a.len() <= 8 {
            return true;
        }
        a = &a[8..];
        b = &b[8..];
    }
}

/// Hashes `bytes`, folding ASCII case when `fold` is set, so that
/// `hash(x, true) == hash(x.to_ascii_lowercase(), true)`.
#[inline(always)]
pub(super) fn hash(bytes: &[u8], fold: bool) -> u64 {
    let mut h = bytes.len() as u64;
    let mut rest = bytes;
    loop {
        let mut w = word(rest);
        if fold {
            w = lower8(w);
        }
        h = (h.rotate_left(5) ^ w).wrapping_mul(K);
        if rest.len() <= 8 {
            break;
        }
        rest = &rest[8..];
    }
    // murmur3's finaliser: every output bit depends on every input bit.
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

/// Bit of the length mask for a key of `len` bytes (63: 63 or more).
#[inline]
fn len_bit(len: usize) -> u64 {
    1 << len.min(63)
}

#[derive(Clone, Copy, Debug)]
struct Entry<V> {
    hash: u64,
    /// The key, in `ByteMap::keys`.
    start: u32,
    len: u32,
    value: V,
}

/// Immutable map from byte strings to `V`, open addressing with linear
/// probing, load ≤ 1/2, keys packed in one buffer.
#[derive(Debug)]
pub(super) struct ByteMap<V> {
    slots: Box<[Option<Entry<V>>]>,
    keys: Box<[u8]>,
    /// Bit `min(len, 63)` is set if some key has that length: most probes
    /// for absent keys stop here, before hashing.
    lens: u64,
    fold_case: bool,
}

impl<V> Default for ByteMap<V> {
    fn default() -> Self {
        ByteMap {
            slots: Box::new([]),
            keys: Box::new([]),
            lens: 0,
            fold_case: false,
        }
    }
}

impl<V: Copy> ByteMap<V> {
    /// Freezes `entries` (keys must be distinct; with `fold_case`, keys must
    /// already be lowercase, or they will never be found).
    pub(super) fn new(fold_case: bool, entries: Vec<(Box<[u8]>, V)>) -> ByteMap<V> {
        let cap = (entries.len() * 2).next_power_of_two();
        let mask = cap - 1;
        let mut slots = vec![None; cap].into_boxed_slice();
        let mut keys = Vec::new();
        let mut lens = 0;
        for (key, value) in entries {
            let e = Entry {
                hash: hash(&key, fold_case),
                start: u32::try_from(keys.len()).expect("host/path keys exceed 4 GiB"),
                len: u32::try_from(key.len()).expect("key exceeds 4 GiB"),
                value,
            };
            keys.extend_from_slice(&key);
            lens |= len_bit(key.len());
            let mut s = e.hash as usize & mask;
            while slots[s].is_some() {
                s = (s + 1) & mask;
            }
            slots[s] = Some(e);
        }
        ByteMap {
            slots,
            keys: keys.into(),
            lens,
            fold_case,
        }
    }
}

impl<V> ByteMap<V> {
    pub(super) fn is_empty(&self) -> bool {
        self.lens == 0
    }

    /// The length mask: bit `min(len, 63)` for every key length.
    pub(super) fn lens(&self) -> u64 {
        self.lens
    }

    /// Could a key of this length be present?
    #[inline(always)]
    pub(super) fn may_hold(lens: u64, len: usize) -> bool {
        lens & len_bit(len) != 0
    }

    /// The value stored under `key` (compared ignoring ASCII case if the
    /// table folds case).
    #[inline]
    pub(super) fn get(&self, key: &[u8]) -> Option<&V> {
        if !Self::may_hold(self.lens, key.len()) {
            return None;
        }
        let h = hash(key, self.fold_case);
        let mask = self.slots.len() - 1;
        let mut s = h as usize & mask;
        loop {
            let e = self.slots[s].as_ref()?;
            if e.hash == h && e.len as usize == key.len() {
                let stored = &self.keys[e.start as usize..][..key.len()];
                let same = same_key(stored, key, self.fold_case);
                if same {
                    return Some(&e.value);
                }
            }
            s = (s + 1) & mask;
        }
    }
}

#[cfg(test)]
mod unit {
    use super::*;

    #[test]
    fn lower8_matches_ascii_lowercase() {
        for b in 0..=255u8 {
            let w = u64::from_le_bytes([b, b'A', b'z', b'@', b'[', b'Z', 0xc3, b'`']);
            let want: Vec<u8> = w.to_le_bytes().iter().map(u8::to_ascii_lowercase).collect();
            assert_eq!(lower8(w).to_le_bytes().to_vec(), want, "byte {b}");
        }
    }

    #[test]
    fn word_reads_every_length() {
        let bytes: Vec<u8> = (1..=9).collect();
        for n in 0..=8 {
            let mut buf = [0u8; 8];
            buf[..n].copy_from_slice(&bytes[..n]);
            assert_eq!(word(&bytes[..n]), u64::from_le_bytes(buf), "len {n}");
        }
    }

    #[test]
    fn same_key_compares_every_byte() {
        let stored = b"abcdefghij.example.com";
        for n in 0..stored.len() {
            let key = &stored[..n];
            assert!(same_key(key, key, false));
            assert!(same_key(key, &key.to_ascii_uppercase(), true));
            for i in 0..n {
                let mut other = key.to_vec();
                other[i] ^= 0x01;
                assert!(!same_key(key, &other, false), "len {n} byte {i}");
                assert!(!same_key(key, &other, true), "len {n} byte {i}");
            }
            if n > 0 && key.iter().any(u8::is_ascii_lowercase) {
                assert!(!same_key(key, &key.to_ascii_uppercase(), false));
            }
        }
    }

    #[test]
    fn hash_folds_case_only_when_asked() {
        for s in ["", "a", "Ab", "abc.EXAMPLE.com", "0123456789ABCDEFG"] {
            let lower = s.to_ascii_lowercase();
            assert_eq!(hash(s.as_bytes(), true), hash(lower.as_bytes(), true));
            if s != lower {
                assert_ne!(hash(s.as_bytes(), false), hash(lower.as_bytes(), false));
            }
        }
        // Same prefix, different lengths or trailing zero bytes differ.
        assert_ne!(hash(b"ab", false), hash(b"ab\0", false));
    }

    #[test]
    fn folding_table() {
        let m = ByteMap::new(
            true,
            vec![
                (b"api.example.com".to_vec().into(), 1),
                (b".example.com".to_vec().into(), 2),
                (b"".to_vec().into(), 3),
            ],
        );
        assert_eq!(m.get(b"API.Example.COM"), Some(&1));
        assert_eq!(m.get(b".EXAMPLE.com"), Some(&2));
        assert_eq!(m.get(b""), Some(&3));
        assert_eq!(m.get(b"example.com"), None);
        let exact = ByteMap::new(false, vec![(b"/Health".to_vec().into(), 7)]);
        assert_eq!(exact.get(b"/Health"), Some(&7));
        assert_eq!(exact.get(b"/health"), None);
        let empty: ByteMap<u32> = ByteMap::new(true, Vec::new());
        assert!(empty.is_empty());
        assert_eq!(empty.get(b""), None);
        // Many keys of every length, including past the length mask.
        let keys: Vec<String> = (0..500)
            .map(|i| "k".repeat(i % 90) + &i.to_string())
            .collect();
        let big = ByteMap::new(
            false,
            keys.iter()
                .enumerate()
                .map(|(i, k)| (k.as_bytes().into(), i))
                .collect(),
        );
        for (i, k) in keys.iter().enumerate() {
            assert_eq!(big.get(k.as_bytes()), Some(&i));
            assert_eq!(big.get(format!("{k}x").as_bytes()), None);
        }
    }
}
