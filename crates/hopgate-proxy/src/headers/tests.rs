use super::*;

#[test]
fn a_raw_head_passes_only_with_nothing_to_change() {
    let taken: [&[u8]; 2] = [b"hop-session", b"x-upstream-addr"];
    let passes = |lines: &[(&str, &str)]| {
        passes_raw(
            lines.iter().map(|(n, v)| (n.as_bytes(), v.as_bytes())),
            &taken,
        )
    };
    assert!(passes(&[
        ("Server", "nginx"),
        ("Content-Length", "2"),
        ("Connection", "keep-alive"),
        ("Keep-Alive", "timeout=5"),
        ("Set-Cookie", "a=1"),
    ]));
    assert!(passes(&[("CONNECTION", "Close")]));
    assert!(passes(&[("content-type", "text/plain")]));
    // Work for the answer step: each one sends the head to a map.
    for lines in [
        &[("Connection", "keep-alive, x-private")][..],
        &[("Upgrade", "websocket")],
        &[("Trailer", "x-sum")],
        &[("TE", "trailers")],
        &[("Proxy-Authenticate", "Basic")],
        &[("Hop-Maintenance", "MOVING seq=1")],
        &[("hop-session-context", "abc")],
        &[("Content-Type", "application/grpc+proto")],
        &[("Content-Length", "2"), ("content-length", "2")],
        &[("Hop-Session", "token")],
        &[("X-Upstream-Addr", "10.0.0.1:80")],
    ] {
        assert!(!passes(lines), "{lines:?}");
    }
}

#[test]
fn only_safe_request_ids_are_kept() {
    let long = "a".repeat(129);
    for (id, ok) in [
        ("bced105b0b0786900000000000000005", true),
        ("req-1.2_3:4", true),
        (&long[..128], true),
        (&long[..], false),
        ("", false),
        ("a b", false),
        ("<script>", false),
        ("a\tb", false),
        ("id;drop", false),
    ] {
        let v = HeaderValue::from_str(id).unwrap();
        assert_eq!(valid_request_id(&v), ok, "{id:?}");
    }
}

#[test]
fn every_forwarded_for_line_is_kept_then_the_peer() {
    let mut h = HeaderMap::new();
    h.append(&X_FORWARDED_FOR, HeaderValue::from_static("203.0.113.7"));
    h.append(
        &X_FORWARDED_FOR,
        HeaderValue::from_static("198.51.100.2, 10.0.0.1"),
    );
    append_forwarded_for(&mut h, "127.0.0.1".parse().unwrap());
    let all: Vec<_> = h.get_all(&X_FORWARDED_FOR).iter().collect();
    assert_eq!(
        all,
        ["203.0.113.7, 198.51.100.2, 10.0.0.1, 127.0.0.1"],
        "X-Forwarded-For lines after the first were dropped"
    );
    let mut none = HeaderMap::new();
    append_forwarded_for(&mut none, "::1".parse().unwrap());
    assert_eq!(none[&X_FORWARDED_FOR], "::1");
}

#[test]
fn strips_hop_by_hop_and_named() {
    let mut h = HeaderMap::new();
    h.insert(
        header::CONNECTION,
        HeaderValue::from_static("keep-alive, x-secret"),
    );
    h.insert("x-secret", HeaderValue::from_static("1"));
    h.insert("keep-alive", HeaderValue::from_static("timeout=5"));
    h.insert(header::TE, HeaderValue::from_static("trailers"));
    h.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
    h.insert("x-keep", HeaderValue::from_static("yes"));
    strip_hop_by_hop(&mut h, true);
    assert!(h.get("x-secret").is_none());
    assert!(h.get("keep-alive").is_none());
    assert!(h.get(header::CONNECTION).is_none());
    assert!(h.get(header::UPGRADE).is_none());
    assert_eq!(h.get(header::TE).unwrap(), "trailers");
    assert_eq!(h.get("x-keep").unwrap(), "yes");
    // Clients cannot forge the gateway's own headers.
    h.insert("x-hop-from", HeaderValue::from_static("n1"));
    h.insert("hop-session-context", HeaderValue::from_static("x"));
    h.insert(
        "hop-maintenance",
        HeaderValue::from_static("MOVING seq=9 in=1"),
    );
    strip_hop_by_hop(&mut h, true);
    assert!(h.get("x-hop-from").is_none() && h.get("hop-session-context").is_none());
    assert!(
        h.get("hop-maintenance").is_none(),
        "a client's Hop-Maintenance never reaches a backend"
    );
    // Nothing special: nothing touched.
    let mut plain = HeaderMap::new();
    plain.insert("accept", HeaderValue::from_static("*/*"));
    strip_hop_by_hop(&mut plain, true);
    assert_eq!(plain.len(), 1);
    h.insert(header::TE, HeaderValue::from_static("gzip"));
    strip_hop_by_hop(&mut h, true);
    assert!(h.get(header::TE).is_none());
}

#[test]
fn scans_find_what_the_request_path_asks_about() {
    let mut h = HeaderMap::new();
    h.insert(header::HOST, HeaderValue::from_static("a.example"));
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/grpc+proto"),
    );
    h.insert("grpc-timeout", HeaderValue::from_static("1S"));
    h.insert("x-request-id", HeaderValue::from_static("r1"));
    let f = scan_request(&h);
    assert!(f.grpc && f.grpc_timeout && f.request_id && !f.forwarded_for);
    assert!(!f.content_length);
    assert_eq!(f.hop, 0);
    let lines: usize = h.iter().map(|(k, v)| k.as_str().len() + v.len() + 4).sum();
    assert_eq!(f.header_bytes, lines);
    h.insert("x-forwarded-for", HeaderValue::from_static("10.0.0.1"));
    h.insert(header::CONNECTION, HeaderValue::from_static("close"));
    h.insert(header::CONTENT_LENGTH, HeaderValue::from_static("0"));
    let f = scan_request(&h);
    assert!(f.forwarded_for && f.content_length && f.hop == CONNECTION_BIT);
    assert_eq!(f.own, 0);
    // The client's own lines of the names the gateway sets.
    for (name, seen) in [
        (
            "x-forwarded-proto",
            RequestFacts::forwarded_proto as fn(&RequestFacts) -> bool,
        ),
        ("x-route-rule-id", RequestFacts::route_rule_id),
        ("x-upstream-addr", RequestFacts::upstream_addr),
        ("traceparent", RequestFacts::traceparent),
        ("tracestate", RequestFacts::tracestate),
    ] {
        let mut one = HeaderMap::new();
        one.insert(name, HeaderValue::from_static("x"));
        let f = scan_request(&one);
        assert!(seen(&f), "{name}");
        assert_eq!(f.own.count_ones(), 1, "{name}");
    }

    let mut r = HeaderMap::new();
    r.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
    assert_eq!(scan_response(&r), ResponseFacts::default());
    r.insert("hop-maintenance", HeaderValue::from_static("MOVING seq=1"));
    r.insert("hop-session-context", HeaderValue::from_static("c"));
    let f = scan_response(&r);
    assert!(f.maintenance && f.context() && !f.grpc);
}

/// Every hop-by-hop name has its bit, in any case, as bytes and as a
/// `HeaderName`; near misses have none.
#[test]
fn hop_names_and_bits_agree() {
    for (name, bit) in HOP_NAMES {
        assert_eq!(hop_bit_of(name.as_bytes()), bit, "{name}");
        assert_eq!(
            hop_bit_of(name.to_ascii_uppercase().as_bytes()),
            bit,
            "{name}"
        );
        assert_eq!(hop_bit(&HeaderName::from_static(name)), bit, "{name}");
        let mut near = name.as_bytes().to_vec();
        let last = near.len() - 1;
        near[last] ^= 1;
        assert_eq!(hop_bit_of(&near), 0, "{name}");
    }
    for other in ["x-te", "date", "content-length", "hop-session-contexts"] {
        assert_eq!(hop_bit_of(other.as_bytes()), 0, "{other}");
    }
}

/// Set lines are written in one order and replace a same-named line
/// when put into a map.
#[test]
fn set_lines_come_in_order_and_replace() {
    let set = SetLines {
        request_id: Some(new_request_id()),
        forwarded_for: Some(HeaderValue::from_static("10.0.0.9")),
        route_rule_id: Some(HeaderValue::from_static("r1")),
        upstream_addr: Some(HeaderValue::from_static("127.0.0.1:1")),
        ..SetLines::default()
    };
    let mut names = Vec::new();
    set.each(|start, _| {
        let start = start.strip_prefix(b"\r\n").expect("the line before ends");
        names.push(std::str::from_utf8(start).unwrap().to_owned());
    });
    assert_eq!(
        names,
        [
            "x-request-id: ",
            "x-forwarded-for: ",
            "x-route-rule-id: ",
            "x-upstream-addr: "
        ]
    );
    // Every line's start is its header's name: the same names as
    // `apply` puts into a map.
    let all = SetLines {
        forwarded_proto: Some("http"),
        traceparent: Some(crate::trace::ParentLine::for_test()),
        ..set.clone()
    };
    let mut starts = Vec::new();
    all.each(|start, value| starts.push((start[2..].to_vec(), value.to_vec())));
    let mut applied = HeaderMap::new();
    all.apply(&mut applied);
    let mut put: Vec<_> = applied
        .iter()
        .map(|(n, v)| {
            (
                format!("{}: ", n.as_str()).into_bytes(),
                v.as_bytes().to_vec(),
            )
        })
        .collect();
    starts.sort();
    put.sort();
    assert_eq!(starts, put);
    // The values new on every request are never indexed by HPACK (h2
    // sends a sensitive value as a never-indexed literal); the others may
    // be.
    for (n, v) in &applied {
        let once = n == "traceparent" || n == "x-request-id";
        assert_eq!(v.is_sensitive(), once, "{n}");
    }
    let mut h = HeaderMap::new();
    h.append("x-route-rule-id", HeaderValue::from_static("spoofed"));
    h.append("x-route-rule-id", HeaderValue::from_static("twice"));
    set.apply(&mut h);
    assert_eq!(
        h.get_all("x-route-rule-id").iter().collect::<Vec<_>>(),
        ["r1"]
    );
    assert_eq!(h.len(), 4);
}

#[test]
fn strip_request_and_response_use_the_scan() {
    let mut h = HeaderMap::new();
    h.insert(
        header::CONNECTION,
        HeaderValue::from_static("keep-alive, X-Secret, te, close"),
    );
    h.insert("x-secret", HeaderValue::from_static("1"));
    h.insert(header::TE, HeaderValue::from_static("trailers"));
    h.insert(header::EXPECT, HeaderValue::from_static("100-continue"));
    h.insert("x-hop-from", HeaderValue::from_static("n1"));
    h.insert("x-keep", HeaderValue::from_static("yes"));
    h.insert(
        "hop-maintenance",
        HeaderValue::from_static("MIGRATING seq=1"),
    );
    let f = scan_request(&h);
    assert!(f.carries_maintenance());
    strip_request(&mut h, &f);
    let mut left: Vec<&str> = h.keys().map(|k| k.as_str()).collect();
    left.sort_unstable();
    assert_eq!(left, ["te", "x-keep"]);

    // The usual backend answer: only `Connection` itself goes.
    let mut r = HeaderMap::new();
    r.insert(header::CONNECTION, HeaderValue::from_static("keep-alive"));
    r.insert(header::TE, HeaderValue::from_static("trailers"));
    r.insert("hop-session-context", HeaderValue::from_static("ctx"));
    r.insert(header::CONTENT_LENGTH, HeaderValue::from_static("0"));
    let f = scan_response(&r);
    strip_response(&mut r, &f);
    let mut left: Vec<&str> = r.keys().map(|k| k.as_str()).collect();
    left.sort_unstable();
    // The session code, not the stripper, decides about the context.
    assert_eq!(left, ["content-length", "hop-session-context"]);
}

#[test]
fn forwarded_for_appends() {
    let mut h = HeaderMap::new();
    append_forwarded_for(&mut h, "10.0.0.1".parse().unwrap());
    assert_eq!(h.get(&X_FORWARDED_FOR).unwrap(), "10.0.0.1");
    append_forwarded_for(&mut h, "::1".parse().unwrap());
    assert_eq!(h.get(&X_FORWARDED_FOR).unwrap(), "10.0.0.1, ::1");
}

#[test]
fn request_ids_are_unique_hex() {
    let a = new_request_id();
    let b = new_request_id();
    assert_ne!(a, b);
    assert_eq!(a.as_bytes().len(), 32);
    assert_eq!(a.as_str().as_bytes(), a.as_bytes());
    assert_eq!(a.to_value().as_bytes(), a.as_bytes());
    assert!(a.as_bytes().iter().all(|c| c.is_ascii_hexdigit()));
    // One process prefix; the counter's digits after it grow.
    assert_eq!(a.as_bytes()[..16], b.as_bytes()[..16]);
    assert!(a.as_bytes()[16..] < b.as_bytes()[16..]);
}
