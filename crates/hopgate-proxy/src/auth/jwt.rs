//! `auth.jwt`: a JWKS file's keys, and a bearer token checked against
//! them.
//!
//! Each key decides the one algorithm a token signed with it may use: its
//! `alg` when the file gives one, else the kind's usual one (`RSA` →
//! RS256, `EC` on P-256 → ES256, on P-384 → ES384, `OKP` Ed25519 →
//! EdDSA, `oct` → HS256). A token whose header names another algorithm
//! (an HS256 token made with an RSA public key as its secret, say) finds
//! no key; `alg: none` is not an algorithm at all. A token naming a `kid`
//! is checked against that key only; one without tries every key of its
//! algorithm.
//!
//! A signature check is costly (~400 k instructions for RS256, ~800 k for
//! ES256), and a client sends the same token on every request, so a token
//! that passed is remembered: the token itself (compared whole on a hit;
//! a digest would cost a SHA-256 of it per request), with its claims,
//! until the sooner of [`CACHE_TTL`] and its `exp` (plus the skew), for
//! the route config it was checked under; at most [`CACHE_MAX`] tokens, in
//! a lock-free map emptied when full. The cache belongs to the JWKS file
//! as read: a changed file (a key removed) starts an empty one.
//!
//! Owns [`Jwks`] and [`check`]. Must not touch: the file (read by `load`)
//! or the service a set is fetched from (`fetch`).

use http::header::{HeaderValue, AUTHORIZATION};
use http::HeaderMap;
use jsonwebtoken::jwk::{
    AlgorithmParameters, EllipticCurve, Jwk, JwkSet, KeyAlgorithm, PublicKeyUse,
};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde_json::{Map, Value};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hopgate_core::config::auth::JwtAuth;

use super::AuthResult;

/// One usable key.
struct Key {
    kid: Option<String>,
    alg: Algorithm,
    key: DecodingKey,
}

/// A JWKS file's signing keys.
pub(crate) struct Jwks {
    keys: Vec<Key>,
    verified: papaya::HashMap<Box<str>, Verified>,
}

/// The description of a token whose `kid` (and algorithm) no key has: for
/// a fetched set, a reason to fetch it again.
pub(crate) const NO_KEY: &str = "no key for the token's kid and algorithm";

/// How long a verified token is taken without a new signature check (at
/// most: never past its `exp`).
pub(crate) const CACHE_TTL: Duration = Duration::from_secs(60);
/// The most verified tokens remembered per JWKS file.
pub(crate) const CACHE_MAX: usize = 1024;

/// A token that passed.
struct Verified {
    until: Instant,
    /// The route config it was checked under (its address: a config the
    /// same file serves differently, a canary's, checks again).
    under: usize,
    claims: Arc<Map<String, Value>>,
}

impl Jwks {
    /// Parses a JWKS document; the error says which key and why.
    pub(crate) fn parse(text: &[u8]) -> Result<Jwks, String> {
        let set: JwkSet = serde_json::from_slice(text).map_err(|e| {
            format!("not a JWKS document ({{\"keys\": [...]}} of RSA, EC, OKP or oct keys): {e}")
        })?;
        let mut keys = Vec::with_capacity(set.keys.len());
        for (i, jwk) in set.keys.iter().enumerate() {
            if matches!(jwk.common.public_key_use, Some(PublicKeyUse::Encryption)) {
                continue;
            }
            let alg = algorithm(jwk).map_err(|m| format!("keys[{i}]: {m}"))?;
            let key = DecodingKey::from_jwk(jwk).map_err(|e| format!("keys[{i}]: {e}"))?;
            keys.push(Key {
                kid: jwk.common.key_id.clone(),
                alg,
                key,
            });
        }
        if keys.is_empty() {
            return Err("no signing key in the file".to_owned());
        }
        Ok(Jwks {
            keys,
            verified: papaya::HashMap::new(),
        })
    }

    pub(crate) fn len(&self) -> usize {
        self.keys.len()
    }
}

/// The algorithm a key signs with.
fn algorithm(jwk: &Jwk) -> Result<Algorithm, String> {
    let usual = match &jwk.algorithm {
        AlgorithmParameters::RSA(_) => Algorithm::RS256,
        AlgorithmParameters::EllipticCurve(p) => match p.curve {
            EllipticCurve::P256 => Algorithm::ES256,
            EllipticCurve::P384 => Algorithm::ES384,
            ref c => return Err(format!("the curve {c:?} is not supported (P-256 or P-384)")),
        },
        AlgorithmParameters::OctetKeyPair(p) => match p.curve {
            EllipticCurve::Ed25519 => Algorithm::EdDSA,
            ref c => return Err(format!("the curve {c:?} is not supported (Ed25519)")),
        },
        AlgorithmParameters::OctetKey(_) => Algorithm::HS256,
    };
    let Some(named) = jwk.common.key_algorithm else {
        return Ok(usual);
    };
    let alg = match named {
        KeyAlgorithm::HS256 => Algorithm::HS256,
        KeyAlgorithm::HS384 => Algorithm::HS384,
        KeyAlgorithm::HS512 => Algorithm::HS512,
        KeyAlgorithm::RS256 => Algorithm::RS256,
        KeyAlgorithm::RS384 => Algorithm::RS384,
        KeyAlgorithm::RS512 => Algorithm::RS512,
        KeyAlgorithm::PS256 => Algorithm::PS256,
        KeyAlgorithm::PS384 => Algorithm::PS384,
        KeyAlgorithm::PS512 => Algorithm::PS512,
        KeyAlgorithm::ES256 => Algorithm::ES256,
        KeyAlgorithm::ES384 => Algorithm::ES384,
        KeyAlgorithm::EdDSA => Algorithm::EdDSA,
        other => return Err(format!("the algorithm {other:?} does not sign tokens")),
    };
    let family = |a: Algorithm| match a {
        Algorithm::HS256 | Algorithm::HS384 | Algorithm::HS512 => 0,
        Algorithm::RS256
        | Algorithm::RS384
        | Algorithm::RS512
        | Algorithm::PS256
        | Algorithm::PS384
        | Algorithm::PS512 => 1,
        Algorithm::ES256 | Algorithm::ES384 => 2,
        Algorithm::EdDSA => 3,
    };
    if family(alg) != family(usual) || (family(alg) == 2 && alg != usual) {
        return Err(format!(
            "alg {named:?} does not fit the key's type and curve"
        ));
    }
    Ok(alg)
}

/// Checks the request's bearer token; sets the claims' headers when it
/// passes. `Err`: the result and the `error_description`.
pub(super) fn check(
    jwks: &Jwks,
    j: &JwtAuth,
    headers: &mut HeaderMap,
) -> Result<(), (AuthResult, String)> {
    let token = bearer(headers).ok_or((AuthResult::Missing, String::new()))?;
    let under = std::ptr::from_ref(j) as usize;
    let now = Instant::now();
    let cached = jwks
        .verified
        .pin()
        .get(token)
        .filter(|v| v.under == under && now < v.until)
        .map(|v| Arc::clone(&v.claims));
    let claims = match cached {
        Some(c) => c,
        None => {
            let c = Arc::new(verify(jwks, j, token)?);
            remember(jwks, j, token, under, now, &c);
            c
        }
    };
    for (claim, header) in &j.claims_to_headers {
        if let Some(v) = claims.get(claim).and_then(claim_value) {
            headers.insert(header.clone(), v);
        }
    }
    Ok(())
}

/// Remembers a verified token until the sooner of the TTL and its `exp`
/// (plus the skew); the map is emptied when full.
fn remember(
    jwks: &Jwks,
    j: &JwtAuth,
    token: &str,
    under: usize,
    now: Instant,
    claims: &Arc<Map<String, Value>>,
) {
    let Some(exp) = claims.get("exp").and_then(Value::as_u64) else {
        return;
    };
    let unix = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let left = (exp + j.clock_skew.as_secs()).saturating_sub(unix);
    if left == 0 {
        return;
    }
    let map = jwks.verified.pin();
    if map.len() >= CACHE_MAX {
        map.clear();
    }
    let until = now + CACHE_TTL.min(Duration::from_secs(left));
    map.insert(
        Box::from(token),
        Verified {
            until,
            under,
            claims: Arc::clone(claims),
        },
    );
}

/// The token of `Authorization: Bearer <token>` (the scheme in any case).
fn bearer(headers: &HeaderMap) -> Option<&str> {
    let v = headers.get(AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = v.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// The token's claims when its signature, issuer, audience and times hold.
fn verify(
    jwks: &Jwks,
    j: &JwtAuth,
    token: &str,
) -> Result<Map<String, Value>, (AuthResult, String)> {
    let invalid = |m: &str| (AuthResult::Invalid, m.to_owned());
    let header = jsonwebtoken::decode_header(token)
        .map_err(|_| invalid("malformed token or unsupported algorithm"))?;
    let mut keys = jwks
        .keys
        .iter()
        .filter(|k| k.alg == header.alg)
        .filter(|k| header.kid.is_none() || k.kid == header.kid)
        .peekable();
    if keys.peek().is_none() {
        return Err(invalid(NO_KEY));
    }
    let validation = validation(j, header.alg);
    let mut last = invalid("signature does not verify");
    for k in keys {
        match jsonwebtoken::decode::<Map<String, Value>>(token, &k.key, &validation) {
            Ok(data) => return Ok(data.claims),
            Err(e) => {
                last = refusal(e.kind());
                if last.0 != AuthResult::Invalid
                    || !matches!(e.kind(), jsonwebtoken::errors::ErrorKind::InvalidSignature)
                {
                    // The signature held: another key will not change that.
                    return Err(last);
                }
            }
        }
    }
    Err(last)
}

fn validation(j: &JwtAuth, alg: Algorithm) -> Validation {
    let mut v = Validation::new(alg);
    v.leeway = j.clock_skew.as_secs();
    v.validate_nbf = true;
    v.set_required_spec_claims(&["exp"]);
    if j.audiences.is_empty() {
        v.validate_aud = false;
    } else {
        v.set_audience(&j.audiences);
    }
    if let Some(iss) = &j.issuer {
        v.set_issuer(&[iss]);
    }
    v
}

/// A verification error as a result and its description.
fn refusal(kind: &jsonwebtoken::errors::ErrorKind) -> (AuthResult, String) {
    use jsonwebtoken::errors::ErrorKind as K;
    let (r, m) = match kind {
        K::ExpiredSignature => (AuthResult::Expired, "the token has expired"),
        K::ImmatureSignature => (AuthResult::Expired, "the token is not valid yet"),
        K::InvalidAudience => (AuthResult::Denied, "the token is not for this audience"),
        K::InvalidIssuer => (AuthResult::Denied, "the token is from another issuer"),
        K::MissingRequiredClaim(_) => (AuthResult::Invalid, "the token has no exp claim"),
        K::InvalidSignature => (AuthResult::Invalid, "signature does not verify"),
        _ => (AuthResult::Invalid, "malformed token"),
    };
    (r, m.to_owned())
}

/// A claim as a header value: strings as they are, numbers and booleans
/// as JSON writes them, a list of strings joined with commas; anything
/// else (or a value that cannot be a header) is not copied.
fn claim_value(v: &Value) -> Option<HeaderValue> {
    let text = match v {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        Value::Bool(b) => b.to_string(),
        Value::Array(items) => {
            let parts: Option<Vec<&str>> = items.iter().map(Value::as_str).collect();
            parts?.join(",")
        }
        _ => return None,
    };
    HeaderValue::from_str(&text).ok()
}
