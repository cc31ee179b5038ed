//! Sessions: identity, signed tokens and the reasons a session hops.
//!
//! Owns [`SessionId`] (16 unguessable bytes from the operating system's
//! random source, or derived from the session key when that fails:
//! [`SessionId::keyed`]), [`SessionKeys`] (HMAC-SHA256 keys with rotation), the
//! token format ([`mint`] / [`verify`]) and [`HopReason`] with the pure
//! [`hop_reason`] decision.
//!
//! Token formats, base64url without padding:
//!
//! ```text
//! v1 (76 characters):
//! 1 || session id (16) || issued_at unix seconds, u64 BE (8) || HMAC-SHA256 (32)
//! v2 (87 characters), a v1 token that also names the node that served the
//! session's first request:
//! 2 || session id (16) || issued_at (8) || node hint, u64 BE (8) || HMAC-SHA256 (32)
//! ```
//!
//! The node hint is [`node_hint`] of the service and node: a 64-bit hash,
//! not the names. A new session is not stored anywhere until its client
//! comes back with its token (lazy binding); the hint is what keeps that
//! client on the same node in between, on every replica that shares the
//! key, without any store. Both versions verify; v1 tokens (minted before
//! hints, or for an answer that named no node) simply carry no hint.
//!
//! The MAC covers every byte before it and is signed with
//! [`SessionKeys::current`]; verification tries the current key and then each
//! previous one, comparing in constant time.
//!
//! Must not touch: binding storage (hopgate-store), cookies and headers (the
//! proxy), clocks (every function that cares about time takes `now` from the
//! caller). [`verify`] never panics, whatever the input.

use std::fmt;
use std::str::FromStr;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use hmac::{Hmac, Mac};
use sha2::Sha256;

#[cfg(test)]
mod tests;

/// The version of a token without a node hint.
pub const TOKEN_VERSION: u8 = 1;

/// The version of a token with a node hint.
pub const HINTED_TOKEN_VERSION: u8 = 2;

/// Length of an encoded v1 token, in characters.
pub const TOKEN_LEN: usize = 76;

/// Length of an encoded v2 (hinted) token, in characters.
pub const HINTED_TOKEN_LEN: usize = 87;

/// How far in the future a token's `issued_at` may be before it is rejected
/// as [`TokenError::FromTheFuture`] (clock skew between replicas).
pub const MAX_CLOCK_SKEW_SECS: u64 = 300;

const ID_LEN: usize = 16;
const MAC_LEN: usize = 32;
/// version + id + issued_at.
const SIGNED_LEN: usize = 1 + ID_LEN + 8;
const RAW_LEN: usize = SIGNED_LEN + MAC_LEN;
/// version + id + issued_at + node hint.
const HINTED_SIGNED_LEN: usize = SIGNED_LEN + 8;
const HINTED_RAW_LEN: usize = HINTED_SIGNED_LEN + MAC_LEN;

type HmacSha256 = Hmac<Sha256>;

/// The operating system's random source failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("operating system random source failed: {0}")]
pub struct RandomError(String);

fn fill_random(buf: &mut [u8]) -> Result<(), RandomError> {
    getrandom::fill(buf).map_err(|e| RandomError(e.to_string()))
}

/// A session's identity: 16 bytes from the operating system's cryptographic
/// random source. Displayed and parsed as 32 lowercase hex digits.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct SessionId([u8; ID_LEN]);

impl SessionId {
    /// Length in bytes.
    pub const LEN: usize = ID_LEN;

    /// A fresh, unguessable id.
    ///
    /// # Panics
    ///
    /// If the operating system's random source fails (it does not on any
    /// supported platform once booted); use [`SessionId::try_random`] to
    /// handle that case.
    pub fn random() -> Self {
        match Self::try_random() {
            Ok(id) => id,
            Err(e) => panic!("cannot mint a session id: {e}"),
        }
    }

    /// A fresh, unguessable id, or the random source's error.
    pub fn try_random() -> Result<Self, RandomError> {
        let mut bytes = [0u8; ID_LEN];
        fill_random(&mut bytes)?;
        Ok(Self(bytes))
    }

    /// An id derived from `keys`' current key and `input`, for when the
    /// operating system's random source fails ([`SessionId::try_random`]):
    /// the first 16 bytes of HMAC-SHA256 over a domain tag (no token starts
    /// with it) and `input`. It is as unguessable as the key is secret
    /// (whoever holds the key can mint tokens anyway), and ids of distinct
    /// inputs differ; the caller makes `input` unique (a clock reading,
    /// the process id, a counter). Never panics.
    pub fn keyed(keys: &SessionKeys, input: &[u8]) -> Self {
        let tag = keys
            .current
            .mac
            .clone()
            .chain_update(b"hopgate session id\0")
            .chain_update(input)
            .finalize()
            .into_bytes();
        let mut bytes = [0u8; ID_LEN];
        bytes.copy_from_slice(&tag[..ID_LEN]);
        Self(bytes)
    }

    pub const fn from_bytes(bytes: [u8; ID_LEN]) -> Self {
        Self(bytes)
    }

    pub const fn as_bytes(&self) -> &[u8; ID_LEN] {
        &self.0
    }

    /// Parses 32 hex digits (either case).
    pub fn parse_hex(s: &str) -> Result<Self, ParseSessionIdError> {
        let s = s.as_bytes();
        if s.len() != 2 * ID_LEN {
            return Err(ParseSessionIdError);
        }
        let mut out = [0u8; ID_LEN];
        for (o, pair) in out.iter_mut().zip(s.chunks_exact(2)) {
            let hi = crate::units::hex_digit(pair[0]).ok_or(ParseSessionIdError)?;
            let lo = crate::units::hex_digit(pair[1]).ok_or(ParseSessionIdError)?;
            *o = (hi << 4) | lo;
        }
        Ok(Self(out))
    }
}

impl std::hash::Hash for SessionId {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        // One write, no length prefix: the id is fixed-size.
        state.write_u128(u128::from_le_bytes(self.0));
    }
}

impl fmt::Display for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let mut buf = [0u8; 2 * ID_LEN];
        for (i, b) in self.0.iter().enumerate() {
            buf[2 * i] = HEX[usize::from(b >> 4)];
            buf[2 * i + 1] = HEX[usize::from(b & 0x0f)];
        }
        // Every byte written above is ASCII.
        f.write_str(std::str::from_utf8(&buf).unwrap_or_default())
    }
}

impl fmt::Debug for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SessionId({self})")
    }
}

impl FromStr for SessionId {
    type Err = ParseSessionIdError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse_hex(s)
    }
}

impl serde::Serialize for SessionId {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for SessionId {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        Self::parse_hex(&s).map_err(serde::de::Error::custom)
    }
}

/// A session id that is not 32 hex digits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid session id: expected 32 hex digits")]
pub struct ParseSessionIdError;

/// One HMAC-SHA256 key, kept as the keyed MAC state so each token costs two
/// SHA-256 blocks rather than re-deriving the key pads. Its `Debug` never
/// shows the secret.
#[derive(Clone)]
pub struct SessionKey {
    mac: HmacSha256,
}

impl SessionKey {
    /// A key from secret bytes (any length; config validation is where a
    /// too-short secret is refused).
    pub fn new(secret: &[u8]) -> Self {
        // HMAC accepts keys of every length: longer ones are hashed, shorter
        // ones padded, so this never takes the error branch.
        let mac = match <HmacSha256 as Mac>::new_from_slice(secret) {
            Ok(mac) => mac,
            Err(_) => unreachable!("HMAC accepts keys of any length"),
        };
        Self { mac }
    }

    fn tag(&self, msg: &[u8]) -> [u8; MAC_LEN] {
        self.mac
            .clone()
            .chain_update(msg)
            .finalize()
            .into_bytes()
            .into()
    }

    /// Constant-time comparison of `tag` against the MAC of `msg`.
    fn check(&self, msg: &[u8], tag: &[u8]) -> bool {
        self.mac.clone().chain_update(msg).verify_slice(tag).is_ok()
    }
}

impl fmt::Debug for SessionKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SessionKey(<redacted>)")
    }
}

/// The keys tokens are signed and verified with: new tokens are signed with
/// `current`; tokens signed with any of `previous` still verify, so a key can
/// be rotated without logging everyone out.
#[derive(Clone, Debug)]
pub struct SessionKeys {
    pub current: SessionKey,
    pub previous: Vec<SessionKey>,
}

impl SessionKeys {
    pub fn from_secrets(current: &[u8], previous: &[&[u8]]) -> Self {
        Self {
            current: SessionKey::new(current),
            previous: previous.iter().map(|s| SessionKey::new(s)).collect(),
        }
    }

    /// A per-process random key (32 bytes): tokens do not survive a restart
    /// nor verify on another replica. For when no secret is configured.
    ///
    /// # Panics
    ///
    /// If the operating system's random source fails; see
    /// [`SessionKeys::try_random`].
    pub fn random() -> Self {
        match Self::try_random() {
            Ok(keys) => keys,
            Err(e) => panic!("cannot generate a session key: {e}"),
        }
    }

    pub fn try_random() -> Result<Self, RandomError> {
        let mut secret = [0u8; 32];
        fill_random(&mut secret)?;
        Ok(Self::from_secrets(&secret, &[]))
    }
}

/// A verified token.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Token {
    pub id: SessionId,
    /// Unix seconds at which the token was minted.
    pub issued_at: u64,
    /// Verified with one of the previous keys, not the current one: the
    /// caller should re-mint it so the old key can eventually be retired.
    pub rotated: bool,
    /// A v2 token: [`node_hint`] of the node that served the session's
    /// first request.
    pub hint: Option<u64>,
}

/// Why a token was not accepted. Whatever the reason, the request carries on
/// as a new session: a bad token is never an error for the client.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error)]
pub enum TokenError {
    /// Wrong length, not base64url, or an unknown version.
    #[error("malformed session token")]
    Malformed,
    /// Well-formed but signed by none of the keys (forged or tampered with).
    #[error("session token signature does not verify")]
    BadSignature,
    /// Older than the session TTL.
    #[error("session token expired")]
    Expired,
    /// Issued further in the future than the allowed clock skew.
    #[error("session token issued in the future")]
    FromTheFuture,
}

impl TokenError {
    /// A snake_case label for logs and metrics.
    pub const fn label(self) -> &'static str {
        match self {
            TokenError::Malformed => "malformed",
            TokenError::BadSignature => "bad_signature",
            TokenError::Expired => "expired",
            TokenError::FromTheFuture => "from_the_future",
        }
    }
}

/// Mints a v1 token (no node hint) for `id` issued at `issued_at` (unix
/// seconds), signed with `keys.current`.
pub fn mint(keys: &SessionKeys, id: SessionId, issued_at: u64) -> String {
    let mut raw = [0u8; RAW_LEN];
    raw[0] = TOKEN_VERSION;
    raw[1..1 + ID_LEN].copy_from_slice(id.as_bytes());
    raw[1 + ID_LEN..SIGNED_LEN].copy_from_slice(&issued_at.to_be_bytes());
    let tag = keys.current.tag(&raw[..SIGNED_LEN]);
    raw[SIGNED_LEN..].copy_from_slice(&tag);
    URL_SAFE_NO_PAD.encode(raw)
}

/// Mints a v2 token carrying `hint` ([`node_hint`]), signed with
/// `keys.current`.
pub fn mint_hinted(keys: &SessionKeys, id: SessionId, issued_at: u64, hint: u64) -> String {
    let mut raw = [0u8; HINTED_RAW_LEN];
    raw[0] = HINTED_TOKEN_VERSION;
    raw[1..1 + ID_LEN].copy_from_slice(id.as_bytes());
    raw[1 + ID_LEN..SIGNED_LEN].copy_from_slice(&issued_at.to_be_bytes());
    raw[SIGNED_LEN..HINTED_SIGNED_LEN].copy_from_slice(&hint.to_be_bytes());
    let tag = keys.current.tag(&raw[..HINTED_SIGNED_LEN]);
    raw[HINTED_SIGNED_LEN..].copy_from_slice(&tag);
    URL_SAFE_NO_PAD.encode(raw)
}

/// Re-mints `t` with `keys.current`, keeping its id, time and hint.
pub fn remint(keys: &SessionKeys, t: &Token) -> String {
    match t.hint {
        Some(h) => mint_hinted(keys, t.id, t.issued_at, h),
        None => mint(keys, t.id, t.issued_at),
    }
}

/// The node hint of `node` in `service`, as a v2 token carries it: a
/// fixed 64-bit hash (the same on every replica and build), so a token
/// never shows the names.
pub fn node_hint(service: &str, node: &str) -> u64 {
    let mut buf = Vec::with_capacity(service.len() + node.len() + 1);
    buf.extend_from_slice(service.as_bytes());
    buf.push(0);
    buf.extend_from_slice(node.as_bytes());
    crate::balance::hash_key(&buf)
}

/// Verifies `token` at `now_unix`: it must decode, carry [`TOKEN_VERSION`],
/// be signed by one of `keys`, be no older than `ttl_secs` and be issued no
/// more than [`MAX_CLOCK_SKEW_SECS`] in the future. The signature is checked
/// before the times, so a forged token learns nothing about them.
///
/// Never panics; rejects oversized input before decoding anything.
pub fn verify(
    keys: &SessionKeys,
    token: &str,
    now_unix: u64,
    ttl_secs: u64,
) -> Result<Token, TokenError> {
    let token = token.as_bytes();
    let (version, raw_len, signed_len) = match token.len() {
        TOKEN_LEN => (TOKEN_VERSION, RAW_LEN, SIGNED_LEN),
        HINTED_TOKEN_LEN => (HINTED_TOKEN_VERSION, HINTED_RAW_LEN, HINTED_SIGNED_LEN),
        _ => return Err(TokenError::Malformed),
    };
    let mut buf = [0u8; HINTED_RAW_LEN];
    let raw = &mut buf[..raw_len];
    match URL_SAFE_NO_PAD.decode_slice(token, raw) {
        Ok(n) if n == raw_len => {}
        _ => return Err(TokenError::Malformed),
    }
    if raw[0] != version {
        return Err(TokenError::Malformed);
    }
    let (signed, tag) = raw.split_at(signed_len);
    let rotated = if keys.current.check(signed, tag) {
        false
    } else if keys.previous.iter().any(|k| k.check(signed, tag)) {
        true
    } else {
        return Err(TokenError::BadSignature);
    };

    let mut id = [0u8; ID_LEN];
    id.copy_from_slice(&signed[1..1 + ID_LEN]);
    let mut issued = [0u8; 8];
    issued.copy_from_slice(&signed[1 + ID_LEN..SIGNED_LEN]);
    let issued_at = u64::from_be_bytes(issued);
    let hint = (version == HINTED_TOKEN_VERSION).then(|| {
        let mut h = [0u8; 8];
        h.copy_from_slice(&signed[SIGNED_LEN..HINTED_SIGNED_LEN]);
        u64::from_be_bytes(h)
    });

    if issued_at > now_unix.saturating_add(MAX_CLOCK_SKEW_SECS) {
        return Err(TokenError::FromTheFuture);
    }
    if now_unix.saturating_sub(issued_at) > ttl_secs {
        return Err(TokenError::Expired);
    }
    Ok(Token {
        id: SessionId(id),
        issued_at,
        rotated,
        hint,
    })
}

/// Why a session left the node it was bound to. Used in the hop log line
/// (`reason=<label>`) and as the `reason` label of `hopgate_hops_total`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum HopReason {
    /// Failed health checks (or a passive failure marked it down).
    Unhealthy,
    /// Ejected by outlier detection.
    Ejected,
    /// Its circuit breaker is open.
    CircuitOpen,
    /// Draining, and the service's drain policy says the session goes now.
    Draining,
    /// No longer in the configuration.
    Removed,
    /// Still configured but no longer the node the session may use (its
    /// version or identity changed under the same name).
    VersionChanged,
    /// Moved or taken down by a maintenance notification.
    Maintenance,
}

impl HopReason {
    pub const ALL: [HopReason; 7] = [
        HopReason::Unhealthy,
        HopReason::Ejected,
        HopReason::CircuitOpen,
        HopReason::Draining,
        HopReason::Removed,
        HopReason::VersionChanged,
        HopReason::Maintenance,
    ];

    /// snake_case label for logs and metrics.
    pub const fn label(self) -> &'static str {
        match self {
            HopReason::Unhealthy => "unhealthy",
            HopReason::Ejected => "ejected",
            HopReason::CircuitOpen => "circuit_open",
            HopReason::Draining => "draining",
            HopReason::Removed => "removed",
            HopReason::VersionChanged => "version_changed",
            HopReason::Maintenance => "maintenance",
        }
    }
}

impl fmt::Display for HopReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.label())
    }
}

/// What the request path knows about the node a session is bound to, reduced
/// to the facts that decide a hop. The caller reads them from the snapshot
/// and the node's live state; deciding is then pure.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HopFacts {
    /// The node is not in the current snapshot's service.
    pub removed: bool,
    /// A maintenance notification moved the session's node away.
    pub maintenance: bool,
    pub unhealthy: bool,
    pub ejected: bool,
    pub circuit_open: bool,
    /// Draining, and the drain policy says bound sessions leave now
    /// (`migrate`, or `finish` past its deadline).
    pub drain_must_leave: bool,
    pub version_changed: bool,
}

/// The reason the session must hop, or `None` to stay on its node. When
/// several facts hold, the most definitive wins: removed, maintenance,
/// unhealthy, ejected, circuit open, draining, version changed.
pub fn hop_reason(facts: &HopFacts) -> Option<HopReason> {
    let ordered = [
        (facts.removed, HopReason::Removed),
        (facts.maintenance, HopReason::Maintenance),
        (facts.unhealthy, HopReason::Unhealthy),
        (facts.ejected, HopReason::Ejected),
        (facts.circuit_open, HopReason::CircuitOpen),
        (facts.drain_must_leave, HopReason::Draining),
        (facts.version_changed, HopReason::VersionChanged),
    ];
    ordered
        .into_iter()
        .find(|(holds, _)| *holds)
        .map(|(_, r)| r)
}

/// Seconds since the Unix epoch.
pub fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The store key of a session's binding in one service (a session may be
/// bound in several services at once).
pub fn binding_key(id: &SessionId, service: &str) -> SessionId {
    let mut bytes = *id.as_bytes();
    let h = crate::balance::hash_key(service.as_bytes()).to_le_bytes();
    for (i, b) in bytes.iter_mut().enumerate() {
        *b ^= h[i % 8];
    }
    SessionId::from_bytes(bytes)
}
