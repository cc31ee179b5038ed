//! `traceparent` values: `parse` never panics, and `propagate` always
//! leaves exactly one valid `traceparent` whose trace id it returns; a
//! valid incoming value keeps its trace id and flags, and a trace the
//! gateway starts is marked sampled only when span export would pick it.
#![no_main]

use hopgate_proxy::fuzzing::trace::{parse, propagate, Sampler, TRACEPARENT};
use http::{HeaderMap, HeaderValue};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let parsed = parse(data);
    let Ok(v) = HeaderValue::from_bytes(data) else {
        return;
    };
    // Span export off, sampling nothing, half, or everything.
    let sampler = match data.first().map(|b| b % 4) {
        Some(1) => Some(Sampler::new(0.0)),
        Some(2) => Some(Sampler::new(0.5)),
        Some(3) => Some(Sampler::new(1.0)),
        _ => None,
    };
    let mut h = HeaderMap::new();
    h.insert(&TRACEPARENT, v);
    let id = propagate(&mut h, sampler);
    assert_eq!(h.get_all(&TRACEPARENT).iter().count(), 1);
    let out = h.get(&TRACEPARENT).expect("a traceparent is always set");
    let p = parse(out.as_bytes()).expect("the value written is valid");
    assert_eq!(p.trace_id, id.trace_id.0);
    assert_eq!(p.parent_id, id.span_id);
    assert_eq!(p.flags, id.flags);
    match parsed {
        Some(incoming) => {
            assert_eq!(incoming.trace_id, id.trace_id.0, "a valid trace id is kept");
            assert_eq!(incoming.flags, id.flags, "its flags are kept");
            assert_eq!(id.parent, Some(incoming.parent_id));
        }
        None => {
            let picks = sampler.is_some_and(|s| s.samples(&id.trace_id.0));
            assert_eq!(id.sampled(), picks, "a new trace is sampled as the sampler says");
            assert_eq!(id.parent, None);
        }
    }
});
