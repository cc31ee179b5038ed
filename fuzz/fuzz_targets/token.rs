//! Session tokens: `verify` never panics on any input, and whatever it
//! accepts is a token it could have minted.
#![no_main]

use hopgate_core::session::{remint, verify, SessionKeys};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let keys =
        SessionKeys::from_secrets(b"fuzzing-secret-of-32-bytes-long!", &[b"previous-secret"]);
    let now = 1_800_000_000;
    if let Ok(t) = verify(&keys, text, now, 86_400) {
        // Only a genuine token passes: re-minting it (v1, or v2 with its
        // node hint) gives the same text (unless it was signed with the
        // previous key).
        if !t.rotated {
            assert_eq!(remint(&keys, &t), text);
        }
    }
});
