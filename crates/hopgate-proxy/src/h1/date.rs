//! The `Date` line of responses hopgate's server writes: the IMF-fixdate
//! of the current second, formatted once per second per thread.
//!
//! Must not touch: anything else.

use std::cell::Cell;
use std::time::{SystemTime, UNIX_EPOCH};

thread_local! {
    /// The second last formatted, and its text.
    static CACHE: Cell<(u64, [u8; 29])> = const { Cell::new((u64::MAX, [0; 29])) };
}

/// `Date` for now, e.g. `Tue, 01 Dec 2026 05:00:00 GMT`.
pub(crate) fn now() -> [u8; 29] {
    let now = SystemTime::now();
    let secs = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    CACHE.with(|c| {
        let (at, text) = c.get();
        if at == secs {
            return text;
        }
        let mut text = [0u8; 29];
        let s = httpdate::fmt_http_date(now);
        if s.len() == text.len() {
            text.copy_from_slice(s.as_bytes());
        }
        c.set((secs, text));
        text
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_date_line_is_an_imf_fixdate() {
        let d = super::now();
        let s = std::str::from_utf8(&d).unwrap();
        assert!(httpdate::parse_http_date(s).is_ok(), "{s}");
        assert!(s.ends_with(" GMT"), "{s}");
    }
}
