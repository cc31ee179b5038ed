//! `auth.basic`: an htpasswd file's users, and a request's
//! `Authorization: Basic` checked against them.
//!
//! bcrypt is slow on purpose (~50–250 ms at cost 10–12), so a password is
//! never checked on the event loop: the check runs on tokio's blocking
//! threads and the request waits for it. A password that passed is
//! remembered for [`CACHE_TTL`] (by a SHA-256 digest of the user and
//! password, never the password itself; at most [`CACHE_MAX`] entries, in
//! a lock-free map that is emptied when full), so a client sending the
//! same credentials on every request costs one bcrypt per TTL. The cache
//! belongs to the file as read: a changed file starts an empty one. A
//! failed check is never remembered. An unknown user costs a bcrypt too
//! (against another user's hash, so at the file's cost), so the answer's
//! timing does not tell which users exist.
//!
//! Owns [`Htpasswd`] and [`check`]. Must not touch: the file (read by
//! `load`).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine;
use http::header::AUTHORIZATION;
use http::HeaderMap;
use sha2::{Digest, Sha256};

use hopgate_core::config::auth::RouteAuth;

use super::{basic_challenge, unauthorized, AuthResult, Checked, Counts};

/// How long a verified password is taken without a new bcrypt.
pub(crate) const CACHE_TTL: Duration = Duration::from_secs(60);
/// The most verified passwords remembered per file.
pub(crate) const CACHE_MAX: usize = 1024;

/// An htpasswd file's users and bcrypt hashes, and the passwords verified
/// lately.
pub(crate) struct Htpasswd {
    users: HashMap<String, Arc<str>>,
    /// The hash an unknown user's password is checked against (any
    /// user's: the same cost).
    stand_in: Option<Arc<str>>,
    verified: Arc<papaya::HashMap<[u8; 32], Instant>>,
}

impl Htpasswd {
    /// Parses `user:hash` lines (blank lines and `#` comments skipped);
    /// the error names the line.
    pub(crate) fn parse(text: &[u8]) -> Result<Htpasswd, String> {
        let text = std::str::from_utf8(text).map_err(|_| "not UTF-8 text".to_owned())?;
        let mut users = HashMap::new();
        for (i, line) in text.lines().enumerate() {
            let n = i + 1;
            let line = line.trim_end_matches('\r');
            if line.trim().is_empty() || line.starts_with('#') {
                continue;
            }
            let (user, hash) = parse_line(line).map_err(|m| format!("line {n}: {m}"))?;
            if users.insert(user.to_owned(), Arc::from(hash)).is_some() {
                return Err(format!("line {n}: user {user:?} is listed twice"));
            }
        }
        let stand_in = users.values().next().cloned();
        Ok(Htpasswd {
            users,
            stand_in,
            verified: Arc::new(papaya::HashMap::new()),
        })
    }

    pub(crate) fn len(&self) -> usize {
        self.users.len()
    }
}

fn parse_line(line: &str) -> Result<(&str, &str), String> {
    let Some((user, hash)) = line.split_once(':') else {
        return Err("expected user:hash".to_owned());
    };
    if user.is_empty() {
        return Err("the user name is empty".to_owned());
    }
    let bcrypt = ["$2y$", "$2b$", "$2a$"].iter().any(|p| hash.starts_with(p));
    if !bcrypt {
        let scheme = match hash {
            h if h.starts_with("$apr1$") => "MD5 ($apr1$)",
            h if h.starts_with("{SHA}") => "SHA-1 ({SHA})",
            h if h.starts_with("$5$") || h.starts_with("$6$") => "SHA-crypt ($5$/$6$)",
            h if h.starts_with("$argon2") => "Argon2",
            _ => "crypt or plain text",
        };
        return Err(format!(
            "user {user:?}: the hash is {scheme}; only bcrypt ($2y$, $2b$, $2a$) is accepted (make it with htpasswd -B)"
        ));
    }
    if hash.parse::<bcrypt::HashParts>().is_err() {
        return Err(format!("user {user:?}: not a well-formed bcrypt hash"));
    }
    Ok((user, hash))
}

/// The user and password of `Authorization: Basic …`.
fn credentials(headers: &HeaderMap) -> Option<Result<(String, String), ()>> {
    let v = headers.get(AUTHORIZATION)?.to_str().ok()?;
    let (scheme, rest) = v.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let pair = base64::engine::general_purpose::STANDARD
        .decode(rest.trim())
        .ok()
        .and_then(|b| String::from_utf8(b).ok())
        .and_then(|s| s.split_once(':').map(|(u, p)| (u.to_owned(), p.to_owned())));
    Some(pair.ok_or(()))
}

fn digest(user: &str, password: &str) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(user.as_bytes());
    h.update([0]);
    h.update(password.as_bytes());
    h.finalize().into()
}

/// Checks a request's user and password: at once when they were verified
/// lately, else on a blocking thread (the request waits).
pub(super) fn check(
    users: &Htpasswd,
    cfg: &RouteAuth,
    headers: &mut HeaderMap,
    counts: &Arc<Counts>,
) -> Checked {
    let refuse = |result: AuthResult| {
        counts.bump(result);
        Checked::Refuse(unauthorized(basic_challenge(&cfg.realm)))
    };
    let (user, password) = match credentials(headers) {
        None => return refuse(AuthResult::Missing),
        Some(Err(())) => return refuse(AuthResult::Invalid),
        Some(Ok(pair)) => pair,
    };
    if cfg.remove_authorization {
        headers.remove(AUTHORIZATION);
    }
    let key = digest(&user, &password);
    let fresh = users
        .verified
        .pin()
        .get(&key)
        .is_some_and(|at| at.elapsed() < CACHE_TTL);
    if fresh {
        counts.bump(AuthResult::Allowed);
        return Checked::Pass;
    }
    let known = users.users.get(&user).cloned();
    let stand_in = users.stand_in.clone();
    let verified = Arc::clone(&users.verified);
    let counts = Arc::clone(counts);
    let challenge = basic_challenge(&cfg.realm);
    Checked::Wait(Box::pin(async move {
        let is_user = known.is_some();
        let ok = match known.or(stand_in) {
            Some(hash) => tokio::task::spawn_blocking(move || bcrypt::verify(password, &hash))
                .await
                .is_ok_and(|r| r.unwrap_or(false)),
            None => false,
        };
        if ok && is_user {
            remember(&verified, key);
            counts.bump(AuthResult::Allowed);
            Ok(None)
        } else {
            counts.bump(AuthResult::Denied);
            Err(unauthorized(challenge))
        }
    }))
}

/// Remembers a verified password; the map is emptied when full (its
/// entries are at most a TTL old anyway).
fn remember(verified: &papaya::HashMap<[u8; 32], Instant>, key: [u8; 32]) {
    let map = verified.pin();
    if map.len() >= CACHE_MAX {
        map.clear();
    }
    map.insert(key, Instant::now());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_name_their_problem() {
        let e = Htpasswd::parse(b"# users\nalice:$2y$05$abc\n")
            .err()
            .unwrap();
        assert!(e.starts_with("line 2") && e.contains("well-formed"), "{e}");
        let e = Htpasswd::parse(b"bob:$apr1$xyz$abc\n").err().unwrap();
        assert!(
            e.contains("line 1") && e.contains("MD5") && e.contains("htpasswd -B"),
            "{e}"
        );
        let e = Htpasswd::parse(b"\nnocolon\n").err().unwrap();
        assert!(e.starts_with("line 2"), "{e}");
    }

    #[test]
    fn a_made_hash_verifies() {
        let hash = bcrypt::hash_with_result("s3cret", 4)
            .unwrap()
            .format_for_version(bcrypt::Version::TwoY);
        let users = Htpasswd::parse(format!("alice:{hash}\n").as_bytes()).unwrap();
        assert_eq!(users.len(), 1);
        assert!(bcrypt::verify("s3cret", &users.users["alice"]).unwrap());
        let e = Htpasswd::parse(format!("alice:{hash}\nalice:{hash}\n").as_bytes())
            .err()
            .unwrap();
        assert!(e.contains("twice"), "{e}");
    }

    #[test]
    fn basic_credentials() {
        let mut h = HeaderMap::new();
        assert!(credentials(&h).is_none());
        h.insert(AUTHORIZATION, "Basic YWxpY2U6czNjcmV0".parse().unwrap());
        assert_eq!(
            credentials(&h).unwrap().unwrap(),
            ("alice".into(), "s3cret".into())
        );
        h.insert(AUTHORIZATION, "Basic !!!".parse().unwrap());
        assert!(credentials(&h).unwrap().is_err());
        h.insert(AUTHORIZATION, "Bearer abc".parse().unwrap());
        assert!(credentials(&h).is_none());
    }
}
