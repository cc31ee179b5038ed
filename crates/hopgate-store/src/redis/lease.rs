//! The fleet's shares of `scope: fleet` rate limits: each replica reports
//! its demand for a policy's busy keys and reads back the fleet's, in one
//! script call per policy a few times a second.
//!
//! # Layout
//!
//! Every key of one policy shares the Redis Cluster hash tag
//! `{<prefix>rl:<policy>}` (one slot, so one script may touch them all):
//!
//! | key | type | holds |
//! | --- | --- | --- |
//! | `{…}:replicas` | sorted set | replica id → until when (ms) it counts as live |
//! | `{…}:hot` | sorted set | key (16 hex digits) → until when (ms) it is hot |
//! | `{…}:d:<key>` | hash | replica id → `<milli-req/s>:<until ms>`: each replica's demand for one key |
//!
//! Times are Redis's clock (`TIME`), so replicas' clocks do not matter.
//! Entries older than the call's `ttl` are ignored and removed; every key
//! expires on its own when nobody syncs any more.
//!
//! Owns the connection (dialled on first use through the store's
//! [`Connector`], so one server, Sentinel's master and a Cluster all work;
//! dropped after a failure so the next sync dials again), the layout and the script. What the numbers
//! mean is `hopgate_core::limit`'s. Must not touch: the session bindings,
//! the request path (every call is the control plane's background sync).

use std::time::Duration;

use hopgate_core::config::RedisTarget;
use hopgate_core::limit::{Demand, FleetAnswer};

use super::conn::{Connector, RedisConn};

/// Hot keys returned at most per call.
const MAX_HOT: usize = 4096;

/// Registers the replica, records its demand for each reported key, and
/// answers `{live, totals, hot}`. KEYS: replicas, hot, then one demand
/// hash per report; ARGV: replica, ttl (ms), then (key, milli-rps, hot)
/// per report.
const SYNC_SCRIPT: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local me, ttl = ARGV[1], tonumber(ARGV[2])
local until_ms = now + ttl
redis.call('ZADD', KEYS[1], until_ms, me)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
redis.call('PEXPIRE', KEYS[1], ttl * 10)
local live = redis.call('ZCARD', KEYS[1])
local totals = {}
for i = 3, #KEYS do
  local a = (i - 3) * 3 + 3
  redis.call('HSET', KEYS[i], me, ARGV[a + 1] .. ':' .. until_ms)
  redis.call('PEXPIRE', KEYS[i], ttl)
  if ARGV[a + 2] == '1' then
    redis.call('ZADD', KEYS[2], until_ms, ARGV[a])
  end
  local sum = 0
  local all = redis.call('HGETALL', KEYS[i])
  for j = 1, #all, 2 do
    local d, u = string.match(all[j + 1], '^(%d+):(%d+)$')
    if d and tonumber(u) > now then
      sum = sum + tonumber(d)
    else
      redis.call('HDEL', KEYS[i], all[j])
    end
  end
  totals[#totals + 1] = sum
end
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
redis.call('PEXPIRE', KEYS[2], ttl * 10)
local hot = redis.call('ZRANGE', KEYS[2], 0, tonumber(ARGV[#ARGV]))
return {live, totals, hot}
";

/// The fleet-share syncs of one replica (every policy shares the
/// connection).
pub struct FleetShares {
    connector: Connector,
    conn: Option<RedisConn>,
    prefix: String,
    replica: String,
    timeout: Duration,
    script: redis::Script,
}

impl std::fmt::Debug for FleetShares {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FleetShares")
            .field("replica", &self.replica)
            .finish_non_exhaustive()
    }
}

impl FleetShares {
    /// Syncs for `replica` through the store's Redis (`target`: one
    /// server, Sentinel's master or a Cluster, and its key `prefix`); every
    /// call bounded by `timeout`. Nothing is dialled yet.
    pub fn new(
        target: &RedisTarget,
        prefix: &str,
        replica: &str,
        timeout: Duration,
    ) -> Result<FleetShares, String> {
        Ok(FleetShares {
            connector: Connector::new(target)?,
            conn: None,
            prefix: prefix.to_owned(),
            replica: replica.to_owned(),
            timeout,
            script: redis::Script::new(SYNC_SCRIPT),
        })
    }

    /// Reports this replica's `demand` for `policy` (entries live `ttl`)
    /// and returns the fleet's answer. A failure drops the connection: the
    /// next call dials again.
    pub async fn sync(
        &mut self,
        policy: &str,
        demand: &[Demand],
        ttl: Duration,
    ) -> Result<FleetAnswer, String> {
        let result = self.exchange(policy, demand, ttl).await;
        if result.is_err() {
            self.conn = None;
        }
        result
    }

    async fn exchange(
        &mut self,
        policy: &str,
        demand: &[Demand],
        ttl: Duration,
    ) -> Result<FleetAnswer, String> {
        let conn = match &mut self.conn {
            Some(c) => c,
            None => self.conn.insert(
                self.connector
                    .connect(self.timeout, self.timeout)
                    .await
                    .map_err(|e| e.to_string())?,
            ),
        };
        let tag = format!("{{{}rl:{policy}}}", self.prefix);
        let mut inv = self.script.prepare_invoke();
        inv.key(format!("{tag}:replicas"))
            .key(format!("{tag}:hot"))
            .arg(&self.replica)
            .arg(ttl.as_millis().max(1) as u64);
        for d in demand {
            let key = format!("{:016x}", d.key);
            inv.key(format!("{tag}:d:{key}"))
                .arg(key)
                .arg(d.milli_rps)
                .arg(if d.hot { "1" } else { "0" });
        }
        inv.arg(MAX_HOT - 1);
        let (live, totals, hot): (u32, Vec<u64>, Vec<String>) =
            tokio::time::timeout(self.timeout, inv.invoke_async(conn))
                .await
                .map_err(|_| "timed out".to_owned())?
                .map_err(|e| e.to_string())?;
        let hot = hot
            .iter()
            .filter_map(|k| u64::from_str_radix(k, 16).ok())
            .collect();
        Ok(FleetAnswer { live, totals, hot })
    }
}
