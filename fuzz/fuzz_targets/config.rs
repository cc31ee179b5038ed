//! Config text, as YAML and as JSON, through parse and validate: never a
//! panic, and every error names a field path or the document.
#![no_main]

use hopgate_core::config::{parse, validate, Format};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    for format in [Format::Yaml, Format::Json] {
        if let Ok(raw) = parse(text, format) {
            let _ = validate(&raw);
        }
    }
});
