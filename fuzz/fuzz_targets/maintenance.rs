//! The `Hop-Maintenance` header parser: all-or-nothing, never a panic.
#![no_main]

use hopgate_core::maintenance::{check, parse_header};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(n) = parse_header("svc", "node", text) {
        let _ = check(&n);
    }
});
