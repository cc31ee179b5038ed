//! Counters a fleet sums in Redis: one hash per set (`<prefix>canary:<id>`
//! for a config canary), each replica adding its increase with `HINCRBY`
//! and reading every field's sum back in the same round trip.
//!
//! Owns the connection (opened on first use through the store's
//! [`Connector`], so on one server, the Sentinel master or a Cluster;
//! dropped after a failure so the next round dials again), the key layout
//! and the round trip. One key per set, so a Cluster needs no hash tag. What a
//! field means is the caller's (the control plane's canary judge).
//!
//! Must not touch: the session bindings, the request path (every call is
//! the control plane's, a few times a minute).

use std::collections::HashMap;
use std::time::Duration;

use redis::Value;

use super::conn::{Connector, RedisConn};
use super::RedisTarget;

/// How long a counter hash outlives its last update.
const TTL_SECS: i64 = 86_400;

/// One set of counters shared by the fleet.
pub struct SharedCounters {
    connector: Connector,
    conn: Option<RedisConn>,
    key: String,
    timeout: Duration,
}

impl std::fmt::Debug for SharedCounters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedCounters")
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}

impl SharedCounters {
    /// The counters of config canary `id` in the store's Redis (`target`
    /// and key `prefix`); every call bounded by `timeout`. Nothing is
    /// dialled yet.
    pub fn canary(
        target: &RedisTarget,
        prefix: &str,
        id: u64,
        timeout: Duration,
    ) -> Result<SharedCounters, String> {
        Ok(SharedCounters {
            connector: Connector::new(target)?,
            conn: None,
            key: format!("{prefix}canary:{id:016x}"),
            timeout,
        })
    }

    /// Adds each `(field, increase)` (zeros are skipped), keeps the hash
    /// for a day from now, and returns every field's sum. A failure drops
    /// the connection: the next call dials again.
    pub async fn add_and_read(
        &mut self,
        increases: &[(String, u64)],
    ) -> Result<HashMap<String, u64>, String> {
        let result = self.exchange(increases).await;
        if result.is_err() {
            self.conn = None;
        }
        result
    }

    async fn exchange(
        &mut self,
        increases: &[(String, u64)],
    ) -> Result<HashMap<String, u64>, String> {
        let conn = match &mut self.conn {
            Some(c) => c,
            None => {
                let conn = self
                    .connector
                    .connect(self.timeout, self.timeout)
                    .await
                    .map_err(|e| e.to_string())?;
                self.conn.insert(conn)
            }
        };
        let mut cmds = Vec::new();
        for (field, n) in increases.iter().filter(|(_, n)| *n > 0) {
            let mut c = redis::cmd("HINCRBY");
            c.arg(&self.key).arg(field).arg(*n);
            cmds.push(c);
        }
        let mut expire = redis::cmd("EXPIRE");
        expire.arg(&self.key).arg(TTL_SECS);
        let mut read = redis::cmd("HGETALL");
        read.arg(&self.key);
        cmds.extend([expire, read]);
        let answers = conn.run_all(cmds).await.map_err(|e| e.to_string())?;
        let all = answers.into_iter().last().unwrap_or(Value::Nil);
        redis::from_redis_value(all).map_err(|e| e.to_string())
    }
}
