//! `traceparent` values: `parse` never panics, and `propagate` always
//! leaves exactly one valid `traceparent` whose trace id it returns.
#![no_main]

use hopgate_proxy::trace::{parse, propagate, TRACEPARENT};
use http::{HeaderMap, HeaderValue};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let parsed = parse(data);
    let Ok(v) = HeaderValue::from_bytes(data) else {
        return;
    };
    let mut h = HeaderMap::new();
    h.insert(&TRACEPARENT, v);
    let id = propagate(&mut h);
    let out = h.get(&TRACEPARENT).expect("a traceparent is always set");
    let p = parse(out.as_bytes()).expect("the value written is valid");
    assert_eq!(p.trace_id, id.0);
    if let Some(incoming) = parsed {
        assert_eq!(incoming.trace_id, id.0, "a valid trace id is kept");
    }
});
