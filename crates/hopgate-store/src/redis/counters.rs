//! Counters a fleet sums in Redis: one hash per set (`<prefix>canary:<id>`
//! for a config canary), each replica adding its increase with `HINCRBY`
//! and reading every field's sum back in the same round trip.
//!
//! Owns the connection (opened on first use, dropped after a failure so
//! the next round dials again), the key layout and the pipeline. What a
//! field means is the caller's (the control plane's canary judge).
//!
//! Must not touch: the session bindings, the request path (every call is
//! the control plane's, a few times a minute).

use std::collections::HashMap;
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::AsyncConnectionConfig;

/// How long a counter hash outlives its last update.
const TTL_SECS: i64 = 86_400;

/// One set of counters shared by the fleet.
pub struct SharedCounters {
    client: redis::Client,
    conn: Option<MultiplexedConnection>,
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
    /// The counters of config canary `id` in the Redis at `url` (the
    /// store's `url` and key `prefix`); every call bounded by `timeout`.
    /// Nothing is dialled yet.
    pub fn canary(
        url: &str,
        prefix: &str,
        id: u64,
        timeout: Duration,
    ) -> Result<SharedCounters, String> {
        Ok(SharedCounters {
            client: redis::Client::open(url).map_err(|e| e.to_string())?,
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
                let cfg = AsyncConnectionConfig::new()
                    .set_connection_timeout(Some(self.timeout))
                    .set_response_timeout(Some(self.timeout));
                let conn = self
                    .client
                    .get_multiplexed_async_connection_with_config(&cfg)
                    .await
                    .map_err(|e| e.to_string())?;
                self.conn.insert(conn)
            }
        };
        let mut pipe = redis::pipe();
        for (field, n) in increases.iter().filter(|(_, n)| *n > 0) {
            pipe.hincr(&self.key, field, *n).ignore();
        }
        pipe.expire(&self.key, TTL_SECS).ignore();
        pipe.hgetall(&self.key);
        let (all,): (HashMap<String, u64>,) =
            pipe.query_async(conn).await.map_err(|e| e.to_string())?;
        Ok(all)
    }
}
