//! What hopgate writes into Redis: key names, the hash of one binding, the
//! change notices, and the compare-and-set script.
//!
//! Owns the data layout only (pure functions over `redis` types); the
//! connection and the tasks are in [`super::sync`].

use std::collections::HashMap;
use std::sync::Arc;

use redis::Value;

use crate::{Binding, SessionId};

/// The compare-and-set of one binding, keyed on its hop count.
///
/// `KEYS[1]` the binding's hash, `KEYS[2]` the change stream, `KEYS[3]`
/// the notice counter.
/// `ARGV`: service, node, bound_at, hops, expires_at, writer replica,
/// has-context (`1`/`0`), context, stream MAXLEN, the binding key in hex.
///
/// Returns `{1}` when written (a win, or a refresh of the same node at the
/// same hop count: context when given, TTL when later, writer); `{0, <the
/// stored hash as HGETALL gives it>}` when the write lost (fewer hops, or
/// the same hops on another node: the stored binding is the winner);
/// `{2}` when the binding had already expired by Redis's clock (nothing
/// written: it would vanish at once). A winning or refreshing write appends
/// a notice `k=<key hex> r=<writer> o=s q=<n>` to the stream, where `n`
/// counts every notice (`INCR` of the counter): a reader that sees `q`
/// jump has missed notices (trimmed, or Redis lost its data).
pub(super) const CAS_SCRIPT: &str = r"
local now = tonumber(redis.call('TIME')[1])
local exp = tonumber(ARGV[5])
if exp <= now then return {2} end
local hops = tonumber(ARGV[4])
local cur = redis.call('HMGET', KEYS[1], 'hops', 'node', 'expires_at')
if cur[1] then
  local stored = tonumber(cur[1])
  if hops < stored or (hops == stored and cur[2] ~= ARGV[2]) then
    return {0, redis.call('HGETALL', KEYS[1])}
  end
  if hops == stored then
    redis.call('HSET', KEYS[1], 'writer', ARGV[6])
    if ARGV[7] == '1' then redis.call('HSET', KEYS[1], 'context', ARGV[8]) end
    if exp > tonumber(cur[3]) then
      redis.call('HSET', KEYS[1], 'expires_at', ARGV[5])
      redis.call('EXPIREAT', KEYS[1], exp)
    end
    redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[9], '*', 'k', ARGV[10], 'r', ARGV[6], 'o', 's',
      'q', redis.call('INCR', KEYS[3]))
    return {1}
  end
end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'service', ARGV[1], 'node', ARGV[2], 'bound_at', ARGV[3],
  'hops', ARGV[4], 'expires_at', ARGV[5], 'writer', ARGV[6])
if ARGV[7] == '1' then redis.call('HSET', KEYS[1], 'context', ARGV[8]) end
redis.call('EXPIREAT', KEYS[1], exp)
redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[9], '*', 'k', ARGV[10], 'r', ARGV[6], 'o', 's',
  'q', redis.call('INCR', KEYS[3]))
return {1}
";

/// Forgets a binding and tells the fleet. `KEYS[1]` hash, `KEYS[2]`
/// stream, `KEYS[3]` notice counter; `ARGV`: writer, MAXLEN, key hex.
pub(super) const REMOVE_SCRIPT: &str = r"
redis.call('DEL', KEYS[1])
redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[2], '*', 'k', ARGV[3], 'r', ARGV[1], 'o', 'd',
  'q', redis.call('INCR', KEYS[3]))
return 1
";

/// Key names under one prefix. On a Redis Cluster the prefix is wrapped
/// in a hash tag, `{<prefix>}`, so that every key of the store is in one
/// hash slot: the compare-and-set script touches a binding, the stream
/// and its counter together, which Cluster allows only within one slot.
#[derive(Debug, Clone)]
pub(super) struct Keys {
    prefix: String,
}

impl Keys {
    pub(super) fn new(prefix: &str, cluster: bool) -> Self {
        Self {
            prefix: if cluster {
                format!("{{{prefix}}}")
            } else {
                prefix.to_owned()
            },
        }
    }

    /// `<prefix>s:<binding key in hex>`.
    pub(super) fn binding(&self, id: &SessionId) -> String {
        format!("{}s:{id}", self.prefix)
    }

    /// The SCAN pattern of every binding.
    pub(super) fn binding_pattern(&self) -> String {
        format!("{}s:*", self.prefix)
    }

    /// The id inside a binding key.
    pub(super) fn id_of(&self, key: &str) -> Option<SessionId> {
        let hex = key.strip_prefix(&self.prefix)?.strip_prefix("s:")?;
        SessionId::parse_hex(hex).ok()
    }

    /// `<prefix>changes`: the stream of change notices.
    pub(super) fn stream(&self) -> String {
        format!("{}changes", self.prefix)
    }

    /// `<prefix>changes:seq`: the number of the last notice.
    pub(super) fn seq(&self) -> String {
        format!("{}changes:seq", self.prefix)
    }

    /// `<prefix>epoch`: a random value set by the first replica that finds
    /// it missing; a new value means Redis lost its data.
    pub(super) fn epoch(&self) -> String {
        format!("{}epoch", self.prefix)
    }
}

/// The outcome of one compare-and-set.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum CasOutcome {
    Written,
    /// Lost to this stored binding (`None` if it could not be read).
    Lost(Option<Binding>),
    Expired,
}

pub(super) fn cas_outcome(v: &Value) -> Option<CasOutcome> {
    let Value::Array(items) = v else { return None };
    match items.first()? {
        Value::Int(1) => Some(CasOutcome::Written),
        Value::Int(2) => Some(CasOutcome::Expired),
        Value::Int(0) => {
            let fields = match items.get(1) {
                Some(Value::Array(flat)) => flat_fields(flat),
                _ => HashMap::new(),
            };
            Some(CasOutcome::Lost(binding_from(&fields)))
        }
        _ => None,
    }
}

fn flat_fields(flat: &[Value]) -> HashMap<String, Vec<u8>> {
    flat.chunks_exact(2)
        .filter_map(|kv| match (&kv[0], &kv[1]) {
            (Value::BulkString(k), Value::BulkString(v)) => {
                Some((String::from_utf8_lossy(k).into_owned(), v.clone()))
            }
            _ => None,
        })
        .collect()
}

/// A binding from its hash fields; `None` when a field is missing or bad
/// (an empty hash: the key is gone).
pub(super) fn binding_from(f: &HashMap<String, Vec<u8>>) -> Option<Binding> {
    let text = |k: &str| std::str::from_utf8(f.get(k)?).ok();
    let num = |k: &str| text(k)?.parse::<u64>().ok();
    Some(Binding {
        service: Arc::from(text("service")?),
        node: Arc::from(text("node")?),
        bound_at: num("bound_at")?,
        hops: u32::try_from(num("hops")?).ok()?,
        context: f.get("context").map(|c| Arc::from(c.as_slice())),
        expires_at: num("expires_at")?,
    })
}

/// Whether the local view should take `incoming`, a binding Redis holds,
/// over `local`: the same order as the script, seen from the cache. More
/// hops win. At the same hop count on another node Redis's binding wins (a
/// local write there is bound to lose its compare-and-set); on the same
/// node it is a refresh, taken when it lives longer (so a newer local
/// context still on its way is not overwritten by an older one). A local
/// binding with more hops is a write still on its way and is kept.
pub(super) fn adopt(local: Option<&Binding>, incoming: &Binding) -> bool {
    local.is_none_or(|l| {
        incoming.hops > l.hops
            || (incoming.hops == l.hops
                && (incoming.node != l.node || incoming.expires_at > l.expires_at))
    })
}

/// A stream entry id, `<ms>-<seq>`, ordered.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct EntryId(pub(super) u64, pub(super) u64);

impl EntryId {
    pub(super) fn parse(s: &str) -> Option<Self> {
        let (ms, seq) = s.split_once('-')?;
        Some(Self(ms.parse().ok()?, seq.parse().ok()?))
    }
}

impl std::fmt::Display for EntryId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}", self.0, self.1)
    }
}

/// Where a reader is in the stream: the last entry read and its notice
/// number (0: none read, so any next number is accepted).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Cursor {
    pub(super) id: EntryId,
    pub(super) seq: u64,
}

impl Cursor {
    /// Whether a notice numbered `seq` follows this cursor without a gap.
    pub(super) fn follows(&self, seq: u64) -> bool {
        self.seq == 0 || seq == self.seq + 1
    }
}

/// What a change notice says.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Notice {
    pub(super) id: SessionId,
    pub(super) writer: String,
    pub(super) removed: bool,
}

fn field<'v>(fields: &'v HashMap<String, Value>, k: &str) -> Option<&'v str> {
    match fields.get(k)? {
        Value::BulkString(b) => std::str::from_utf8(b).ok(),
        Value::SimpleString(s) => Some(s.as_str()),
        _ => None,
    }
}

/// A notice's number (`q`); 0 when it has none.
pub(super) fn seq_of(fields: &HashMap<String, Value>) -> u64 {
    field(fields, "q").and_then(|q| q.parse().ok()).unwrap_or(0)
}

pub(super) fn notice_from(fields: &HashMap<String, Value>) -> Option<Notice> {
    Some(Notice {
        id: SessionId::parse_hex(field(fields, "k")?).ok()?,
        writer: field(fields, "r")?.to_owned(),
        removed: field(fields, "o")? == "d",
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(node: &str, hops: u32) -> Binding {
        let mut b = Binding::new("api", node, 1, 100);
        b.hops = hops;
        b
    }

    #[test]
    fn adopt_follows_the_script_order() {
        assert!(adopt(None, &b("a", 0)));
        assert!(adopt(Some(&b("a", 1)), &b("b", 2)), "more hops");
        assert!(
            adopt(Some(&b("a", 1)), &b("b", 1)),
            "same hops, stored wins"
        );
        assert!(!adopt(Some(&b("a", 3)), &b("b", 2)), "a newer local write");
        assert!(!adopt(Some(&b("a", 1)), &b("a", 1)), "nothing to change");
        let mut refreshed = b("a", 1).with_context(&b"ctx"[..]);
        assert!(!adopt(Some(&b("a", 1)), &refreshed), "an older refresh");
        refreshed.expires_at += 1;
        assert!(adopt(Some(&b("a", 1)), &refreshed), "a later refresh");
    }

    #[test]
    fn keys_round_trip() {
        let k = Keys::new("hg:", false);
        let id = crate::conformance::id(7);
        assert_eq!(k.id_of(&k.binding(&id)), Some(id));
        assert_eq!(k.id_of("other:s:00"), None);
        assert_eq!(k.stream(), "hg:changes");
        assert_eq!(k.epoch(), "hg:epoch");
        let c = Keys::new("hg:", true);
        assert_eq!(c.id_of(&c.binding(&id)), Some(id));
        assert_eq!(c.binding_pattern(), "{hg:}s:*");
        assert_eq!(c.stream(), "{hg:}changes");
        let slot = super::super::conn::slot_of;
        for key in [c.binding(&id), c.seq(), c.epoch()] {
            assert_eq!(slot(key.as_bytes()), slot(c.stream().as_bytes()), "{key}");
        }
    }

    #[test]
    fn a_cursor_sees_gaps_in_the_numbers() {
        let c = Cursor {
            id: EntryId(1, 0),
            seq: 7,
        };
        assert!(c.follows(8));
        assert!(!c.follows(10), "trimmed");
        assert!(!c.follows(1), "Redis lost its data");
        assert!(Cursor::default().follows(42), "nothing read yet");
    }

    #[test]
    fn stream_ids_order() {
        let a = EntryId::parse("5-1").expect("id");
        let c = EntryId::parse("10-0").expect("id");
        assert!(a < c && a < EntryId(5, 2));
        assert_eq!(a.to_string(), "5-1");
        assert_eq!(EntryId::parse("x"), None);
    }

    #[test]
    fn fields_round_trip_binary_context() {
        let mut f = HashMap::new();
        for (k, v) in [
            ("service", "api"),
            ("node", "n1"),
            ("bound_at", "5"),
            ("hops", "2"),
            ("expires_at", "99"),
        ] {
            f.insert(k.to_owned(), v.as_bytes().to_vec());
        }
        assert_eq!(binding_from(&f).expect("parsed").context, None);
        f.insert("context".into(), b"\x00\xff".to_vec());
        let got = binding_from(&f).expect("parsed");
        assert_eq!(
            (got.hops, got.context.as_deref()),
            (2, Some(&b"\x00\xff"[..]))
        );
        f.remove("node");
        assert_eq!(binding_from(&f), None);
    }
}
