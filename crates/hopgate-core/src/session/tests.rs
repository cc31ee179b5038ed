use super::*;

const NOW: u64 = 1_700_000_000;
const TTL: u64 = 86_400;

fn keys() -> SessionKeys {
    SessionKeys::from_secrets(b"current secret, at least 32 bytes long", &[])
}

fn id(n: u8) -> SessionId {
    SessionId::from_bytes([n; 16])
}

fn raw_of(token: &str) -> Vec<u8> {
    URL_SAFE_NO_PAD.decode(token).expect("test token decodes")
}

/// The fallback id (no OS randomness): the same for the same key and
/// input, different for another input or key, and a token of it verifies.
#[test]
fn a_keyed_id_depends_on_key_and_input() {
    let (k, other) = (
        keys(),
        SessionKeys::from_secrets(b"another secret, 32 bytes or more", &[]),
    );
    let a = SessionId::keyed(&k, b"input 1");
    assert_eq!(a, SessionId::keyed(&k, b"input 1"));
    assert_ne!(a, SessionId::keyed(&k, b"input 2"));
    assert_ne!(a, SessionId::keyed(&other, b"input 1"));
    let t = verify(&k, &mint(&k, a, NOW), NOW, TTL).expect("valid token");
    assert_eq!(t.id, a);
}

#[test]
fn mint_then_verify_round_trips() {
    let k = keys();
    let sid = SessionId::random();
    let token = mint(&k, sid, NOW);
    assert_eq!(token.len(), TOKEN_LEN);
    assert!(token
        .bytes()
        .all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_'));
    let t = verify(&k, &token, NOW, TTL).expect("valid token");
    assert_eq!(
        t,
        Token {
            id: sid,
            issued_at: NOW,
            rotated: false,
            hint: None,
        }
    );
}

#[test]
fn hinted_tokens_carry_the_node_and_old_ones_still_verify() {
    let k = keys();
    let sid = SessionId::random();
    let hint = node_hint("api", "api-2");
    assert_ne!(hint, node_hint("api", "api-1"));
    assert_ne!(
        node_hint("ap", "iapi-2"),
        hint,
        "the separator keeps service and node apart"
    );
    let token = mint_hinted(&k, sid, NOW, hint);
    assert_eq!(token.len(), HINTED_TOKEN_LEN);
    let t = verify(&k, &token, NOW, TTL).expect("valid token");
    assert_eq!(
        (t.id, t.issued_at, t.hint, t.rotated),
        (sid, NOW, Some(hint), false)
    );
    // Layout: version 2, id, time, hint, MAC over all of them.
    let raw = raw_of(&token);
    assert_eq!(raw.len(), 65);
    assert_eq!(raw[0], HINTED_TOKEN_VERSION);
    assert_eq!(&raw[25..33], &hint.to_be_bytes());
    // A v1 token (no hint) still verifies.
    let old = mint(&k, sid, NOW);
    assert_eq!(verify(&k, &old, NOW, TTL).unwrap().hint, None);
    // The hint is signed: changing it breaks the signature.
    let mut forged = raw.clone();
    forged[30] ^= 1;
    assert_eq!(
        verify(&k, &URL_SAFE_NO_PAD.encode(&forged), NOW, TTL),
        Err(TokenError::BadSignature)
    );
    // A version byte that does not match the length is malformed.
    let mut wrong = raw.clone();
    wrong[0] = TOKEN_VERSION;
    assert_eq!(
        verify(&k, &URL_SAFE_NO_PAD.encode(&wrong), NOW, TTL),
        Err(TokenError::Malformed)
    );
    let mut wrong = raw_of(&old);
    wrong[0] = HINTED_TOKEN_VERSION;
    assert_eq!(
        verify(&k, &URL_SAFE_NO_PAD.encode(&wrong), NOW, TTL),
        Err(TokenError::Malformed)
    );
}

#[test]
fn a_rotated_key_keeps_the_hint() {
    let old = SessionKeys::from_secrets(b"old secret, at least thirty-two bytes", &[]);
    let new = SessionKeys::from_secrets(
        b"new secret, at least thirty-two bytes",
        &[b"old secret, at least thirty-two bytes"],
    );
    let sid = SessionId::random();
    let token = mint_hinted(&old, sid, NOW, 42);
    let t = verify(&new, &token, NOW, TTL).expect("previous key verifies");
    assert!(t.rotated);
    assert_eq!(t.hint, Some(42));
    let again = remint(&new, &t);
    let t2 = verify(&new, &again, NOW, TTL).unwrap();
    assert_eq!(
        (t2.id, t2.issued_at, t2.hint, t2.rotated),
        (sid, NOW, Some(42), false)
    );
    let plain = Token { hint: None, ..t };
    assert_eq!(remint(&new, &plain).len(), TOKEN_LEN);
}

#[test]
fn layout_is_version_id_time_mac() {
    let token = mint(&keys(), id(7), 0x0102_0304_0506_0708);
    let raw = raw_of(&token);
    assert_eq!(raw.len(), 57);
    assert_eq!(raw[0], TOKEN_VERSION);
    assert_eq!(&raw[1..17], &[7u8; 16]);
    assert_eq!(&raw[17..25], &[1, 2, 3, 4, 5, 6, 7, 8]);
    let mut mac = <HmacSha256 as Mac>::new_from_slice(b"current secret, at least 32 bytes long")
        .expect("hmac key");
    mac.update(&raw[..25]);
    assert_eq!(&raw[25..], &mac.finalize().into_bytes()[..]);
}

#[test]
fn rotation_accepts_previous_keys_and_flags_them() {
    let old = SessionKeys::from_secrets(b"old", &[]);
    let older = SessionKeys::from_secrets(b"older", &[]);
    let rotated = SessionKeys::from_secrets(b"new", &[b"old", b"older"]);
    let t_old = mint(&old, id(1), NOW);
    let t_older = mint(&older, id(2), NOW);
    let t_new = mint(&rotated, id(3), NOW);

    let v = verify(&rotated, &t_old, NOW, TTL).expect("previous key verifies");
    assert!(v.rotated);
    assert_eq!(v.id, id(1));
    assert!(
        verify(&rotated, &t_older, NOW, TTL)
            .expect("second previous")
            .rotated
    );
    assert!(!verify(&rotated, &t_new, NOW, TTL).expect("current").rotated);

    // Once the old key is dropped, its tokens stop verifying.
    let retired = SessionKeys::from_secrets(b"new", &[]);
    assert_eq!(
        verify(&retired, &t_old, NOW, TTL),
        Err(TokenError::BadSignature)
    );
    // A token minted under a rotated set is signed with its current key.
    assert!(verify(&retired, &t_new, NOW, TTL).is_ok());
}

#[test]
fn another_key_is_a_bad_signature() {
    let token = mint(&keys(), id(1), NOW);
    let other = SessionKeys::random();
    assert_eq!(
        verify(&other, &token, NOW, TTL),
        Err(TokenError::BadSignature)
    );
}

#[test]
fn random_keys_differ() {
    let a = SessionKeys::random();
    let b = SessionKeys::random();
    let token = mint(&a, id(1), NOW);
    assert!(verify(&a, &token, NOW, TTL).is_ok());
    assert_eq!(verify(&b, &token, NOW, TTL), Err(TokenError::BadSignature));
}

#[test]
fn expiry_and_skew_boundaries() {
    let k = keys();
    let token = mint(&k, id(1), NOW);
    // Exactly at the TTL is still valid, one second later is not.
    assert!(verify(&k, &token, NOW + TTL, TTL).is_ok());
    assert_eq!(
        verify(&k, &token, NOW + TTL + 1, TTL),
        Err(TokenError::Expired)
    );
    // A clock up to MAX_CLOCK_SKEW_SECS behind the minter is tolerated.
    assert!(verify(&k, &token, NOW - MAX_CLOCK_SKEW_SECS, TTL).is_ok());
    assert_eq!(
        verify(&k, &token, NOW - MAX_CLOCK_SKEW_SECS - 1, TTL),
        Err(TokenError::FromTheFuture)
    );
    // Extremes do not overflow.
    let far = mint(&k, id(1), u64::MAX);
    assert_eq!(verify(&k, &far, 0, TTL), Err(TokenError::FromTheFuture));
    assert!(verify(&k, &far, u64::MAX, 0).is_ok());
    let zero = mint(&k, id(1), 0);
    assert_eq!(verify(&k, &zero, u64::MAX, TTL), Err(TokenError::Expired));
    assert!(verify(&k, &zero, u64::MAX, u64::MAX).is_ok());
}

#[test]
fn signature_is_checked_before_time() {
    let k = keys();
    let mut raw = raw_of(&mint(&k, id(1), NOW));
    raw[30] ^= 1;
    let forged = URL_SAFE_NO_PAD.encode(&raw);
    // Expired and forged: reported as forged.
    assert_eq!(
        verify(&k, &forged, NOW + 10 * TTL, TTL),
        Err(TokenError::BadSignature)
    );
}

#[test]
fn every_flipped_bit_is_rejected() {
    let k = keys();
    let raw = raw_of(&mint(&k, id(9), NOW));
    for byte in 0..raw.len() {
        for bit in 0..8 {
            let mut tampered = raw.clone();
            tampered[byte] ^= 1 << bit;
            let token = URL_SAFE_NO_PAD.encode(&tampered);
            let expected = if byte == 0 {
                TokenError::Malformed
            } else {
                TokenError::BadSignature
            };
            assert_eq!(
                verify(&k, &token, NOW, TTL),
                Err(expected),
                "byte {byte} bit {bit}"
            );
        }
    }
}

#[test]
fn every_changed_character_is_rejected() {
    let k = keys();
    let token = mint(&k, id(3), NOW);
    let alphabet = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_+/=. \0";
    for pos in 0..token.len() {
        for &c in alphabet {
            let mut bytes = token.clone().into_bytes();
            if bytes[pos] == c {
                continue;
            }
            bytes[pos] = c;
            let s = String::from_utf8(bytes).expect("ascii");
            assert!(verify(&k, &s, NOW, TTL).is_err(), "pos {pos} char {c}");
        }
    }
}

#[test]
fn adversarial_strings_are_malformed_not_panics() {
    let k = keys();
    let good = mint(&k, id(5), NOW);
    let huge = "A".repeat(10 * 1024 * 1024);
    let mut wrong_version = raw_of(&good);
    wrong_version[0] = 2;
    let wrong_version = URL_SAFE_NO_PAD.encode(&wrong_version);
    let padded = URL_SAFE_NO_PAD.encode([0u8; 56]) + "==";
    let multibyte = "é".repeat(TOKEN_LEN / 2);
    let cases: Vec<String> = vec![
        String::new(),
        " ".into(),
        "=".repeat(TOKEN_LEN),
        "!".repeat(TOKEN_LEN),
        huge,
        good[..TOKEN_LEN - 1].to_string(),
        good[..10].to_string(),
        format!("{good}A"),
        format!("{good}{good}"),
        good.replace('-', "+").replace('_', "/") + if good.contains(['-', '_']) { "" } else { "+" },
        wrong_version,
        padded,
        multibyte,
        format!(" {}", &good[1..]),
        "\u{0}".repeat(TOKEN_LEN),
    ];
    for case in &cases {
        let r = verify(&k, case, NOW, TTL);
        assert!(
            matches!(r, Err(TokenError::Malformed)),
            "{:?}: {r:?}",
            &case[..case.len().min(80)]
        );
    }
}

#[test]
fn random_strings_never_verify_nor_panic() {
    let k = keys();
    let mut rng = fastrand::Rng::with_seed(0x5e55_1011);
    let alphabet: Vec<char> = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
        .chars()
        .collect();
    for i in 0..20_000 {
        let s: String = if i % 2 == 0 {
            // Right length, valid alphabet: decodes, then must fail the MAC
            // (or the version byte).
            (0..TOKEN_LEN)
                .map(|_| alphabet[rng.usize(..alphabet.len())])
                .collect()
        } else {
            let len = rng.usize(..200);
            (0..len).map(|_| rng.char(..)).collect()
        };
        let r = verify(&k, &s, NOW, TTL);
        assert!(
            matches!(r, Err(TokenError::Malformed | TokenError::BadSignature)),
            "{s:?}: {r:?}"
        );
    }
    // Random bytes in the valid layout: always a bad signature.
    for _ in 0..2_000 {
        let mut raw = [0u8; RAW_LEN];
        rng.fill(&mut raw);
        raw[0] = TOKEN_VERSION;
        let token = URL_SAFE_NO_PAD.encode(raw);
        assert_eq!(verify(&k, &token, NOW, TTL), Err(TokenError::BadSignature));
    }
}

#[test]
fn session_id_hex_round_trip() {
    let sid = SessionId::from_bytes([
        0x00, 0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef, 0xff, 0x10, 0x20, 0x30, 0x40, 0x50,
        0x60,
    ]);
    let hex = sid.to_string();
    assert_eq!(hex, "000123456789abcdefff102030405060");
    assert_eq!(hex.parse::<SessionId>(), Ok(sid));
    assert_eq!(SessionId::parse_hex(&hex.to_uppercase()), Ok(sid));
    assert_eq!(format!("{sid:?}"), format!("SessionId({hex})"));
    for bad in [
        "",
        "00",
        &hex[1..],
        &format!("{hex}0"),
        &hex.replace('a', "g"),
        "é".repeat(16).as_str(),
    ] {
        assert_eq!(
            SessionId::parse_hex(bad),
            Err(ParseSessionIdError),
            "{bad:?}"
        );
    }
}

#[test]
fn session_id_serde_is_hex() {
    let sid = id(0xab);
    let json = serde_json::to_string(&sid).expect("serialize");
    assert_eq!(json, format!("\"{}\"", "ab".repeat(16)));
    assert_eq!(
        serde_json::from_str::<SessionId>(&json).expect("deserialize"),
        sid
    );
    assert!(serde_json::from_str::<SessionId>("\"zz\"").is_err());
}

#[test]
fn random_ids_are_distinct() {
    let ids: std::collections::HashSet<SessionId> =
        (0..10_000).map(|_| SessionId::random()).collect();
    assert_eq!(ids.len(), 10_000);
}

#[test]
fn keys_debug_does_not_leak_secrets() {
    let k = SessionKeys::from_secrets(b"hunter2-secret", &[b"old-secret"]);
    let dbg = format!("{k:?}");
    assert!(!dbg.contains("hunter2"), "{dbg}");
    assert!(!dbg.contains("old-secret"), "{dbg}");
    assert!(dbg.contains("redacted"));
}

#[test]
fn hop_reason_labels_are_snake_case_and_unique() {
    let labels: Vec<&str> = HopReason::ALL.iter().map(|r| r.label()).collect();
    assert_eq!(
        labels,
        [
            "unhealthy",
            "ejected",
            "circuit_open",
            "draining",
            "removed",
            "version_changed",
            "maintenance"
        ]
    );
    for r in HopReason::ALL {
        assert_eq!(r.to_string(), r.label());
        assert_eq!(
            serde_json::to_string(&r).expect("serialize"),
            format!("\"{}\"", r.label())
        );
    }
    for e in [
        TokenError::Malformed,
        TokenError::BadSignature,
        TokenError::Expired,
        TokenError::FromTheFuture,
    ] {
        assert!(e
            .label()
            .bytes()
            .all(|c| c.is_ascii_lowercase() || c == b'_'));
    }
}

#[test]
fn hop_reason_precedence() {
    assert_eq!(hop_reason(&HopFacts::default()), None);
    let all = HopFacts {
        removed: true,
        maintenance: true,
        unhealthy: true,
        ejected: true,
        circuit_open: true,
        drain_must_leave: true,
        version_changed: true,
    };
    assert_eq!(hop_reason(&all), Some(HopReason::Removed));
    let f = HopFacts {
        removed: false,
        ..all
    };
    assert_eq!(hop_reason(&f), Some(HopReason::Maintenance));
    let f = HopFacts {
        circuit_open: true,
        drain_must_leave: true,
        ..HopFacts::default()
    };
    assert_eq!(hop_reason(&f), Some(HopReason::CircuitOpen));
    let f = HopFacts {
        version_changed: true,
        ..HopFacts::default()
    };
    assert_eq!(hop_reason(&f), Some(HopReason::VersionChanged));
}
