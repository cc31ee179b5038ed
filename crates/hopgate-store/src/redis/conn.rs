//! The one way into Redis for everything in this crate: [`Connector`]
//! dials what `store.url`, `store.sentinel` or `store.cluster` names and
//! hands out a [`RedisConn`], one type over a single server's connection
//! and a Redis Cluster's, usable wherever `redis` takes a
//! [`ConnectionLike`] (`query_async`, pipelines).
//!
//! - **One server** (`url`): a multiplexed connection.
//! - **Sentinel**: asks the sentinels which server is the master (the
//!   crate checks it answers `ROLE` as one), then connects to it like a
//!   single server. Every dial asks again, so after a failover the caller's
//!   next dial reaches the new master: a caller reconnects when its
//!   connection fails or Redis answers `READONLY` ([`needs_redial`]).
//! - **Cluster**: a cluster connection, which learns the slot map from any
//!   endpoint and follows `MOVED`/`ASK`, retries `TRYAGAIN` and
//!   `CLUSTERDOWN`, and refreshes the map after a failover by itself. Every
//!   command is routed by its keys (a pipeline by its first key), so the
//!   keys one command or pipeline touches must share a hash slot (hash
//!   tags); keyless commands that must reach the node of a given slot go
//!   through [`RedisConn::query_on_slot_of`].
//!
//! Owns the dialling and the routing only; the key layout and what is
//! sent are the callers'. Must not touch: the request path (dialling
//! awaits).

use std::time::Duration;

use hopgate_core::config::RedisTarget;
use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use redis::sentinel::{Sentinel, SentinelNodeConnectionInfo};
use redis::{
    AsyncConnectionConfig, Cmd, ConnectionInfo, ErrorKind, FromRedisValue, IntoConnectionInfo,
    Pipeline, RedisError, RedisFuture, RedisResult, Value,
};

/// How long asking the sentinels for the master may take.
const SENTINEL_TIMEOUT: Duration = Duration::from_secs(2);

/// Dials the Redis the store is configured with; cheap to clone.
#[derive(Clone)]
pub struct Connector {
    how: How,
}

#[derive(Clone)]
enum How {
    Single(redis::Client),
    Sentinel {
        master_name: String,
        sentinels: Vec<ConnectionInfo>,
        /// The master's username, password and database (the first
        /// sentinel URL's).
        master: SentinelNodeConnectionInfo,
    },
    Cluster(Vec<ConnectionInfo>),
}

impl std::fmt::Debug for Connector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connector")
            .field("mode", &self.mode())
            .finish_non_exhaustive()
    }
}

impl Connector {
    /// A connector for `target`; only a malformed URL is an error (nothing
    /// is dialled yet).
    pub fn new(target: &RedisTarget) -> Result<Self, String> {
        let info = |u: &String| u.as_str().into_connection_info().map_err(|e| e.to_string());
        let how = match target {
            RedisTarget::Url(u) => {
                How::Single(redis::Client::open(info(u)?).map_err(|e| e.to_string())?)
            }
            RedisTarget::Sentinel {
                master_name,
                endpoints,
            } => {
                let sentinels = endpoints.iter().map(info).collect::<Result<Vec<_>, _>>()?;
                let first = sentinels.first().ok_or("no sentinel endpoint")?;
                let master = SentinelNodeConnectionInfo::default()
                    .set_redis_connection_info(first.redis_settings().clone());
                How::Sentinel {
                    master_name: master_name.clone(),
                    sentinels,
                    master,
                }
            }
            RedisTarget::Cluster { endpoints } => {
                How::Cluster(endpoints.iter().map(info).collect::<Result<Vec<_>, _>>()?)
            }
        };
        Ok(Self { how })
    }

    /// `single`, `sentinel` or `cluster`.
    pub fn mode(&self) -> &'static str {
        match self.how {
            How::Single(_) => "single",
            How::Sentinel { .. } => "sentinel",
            How::Cluster(_) => "cluster",
        }
    }

    /// Dials: a single server or the master the sentinels name now, or the
    /// cluster. `connect` bounds each TCP connect, `response` each answer
    /// (make it longer than any `BLOCK` sent on this connection).
    pub async fn connect(&self, connect: Duration, response: Duration) -> RedisResult<RedisConn> {
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(connect))
            .set_response_timeout(Some(response));
        match &self.how {
            How::Single(client) => single(client, &config).await,
            How::Sentinel {
                master_name,
                sentinels,
                master,
            } => {
                let mut sentinel = Sentinel::build(sentinels.clone())?;
                let found = sentinel.async_master_for(master_name, Some(master));
                let client = tokio::time::timeout(SENTINEL_TIMEOUT, found)
                    .await
                    .map_err(|_| {
                        RedisError::from((ErrorKind::Io, "no sentinel answered in time"))
                    })??;
                single(&client, &config).await
            }
            How::Cluster(nodes) => {
                let client = ClusterClient::builder(nodes.clone())
                    .connection_timeout(connect)
                    .response_timeout(response)
                    .build()?;
                Ok(RedisConn::Cluster(client.get_async_connection().await?))
            }
        }
    }
}

async fn single(client: &redis::Client, config: &AsyncConnectionConfig) -> RedisResult<RedisConn> {
    let conn = client
        .get_multiplexed_async_connection_with_config(config)
        .await?;
    Ok(RedisConn::Single {
        conn,
        server: client.get_connection_info().addr().to_string(),
    })
}

/// A connection to one server (given or found by the sentinels) or to a
/// cluster; clones share it.
#[derive(Clone)]
pub enum RedisConn {
    Single {
        conn: MultiplexedConnection,
        /// `host:port` of the server.
        server: String,
    },
    Cluster(ClusterConnection),
}

impl RedisConn {
    /// Runs a keyless `cmd` (`SCAN`, `CLUSTER ...`) on the server holding
    /// `key`: on a cluster, the master of `key`'s hash slot.
    pub async fn query_on_slot_of<T: FromRedisValue>(
        &mut self,
        cmd: &Cmd,
        key: &str,
    ) -> RedisResult<T> {
        match self {
            RedisConn::Single { conn, .. } => cmd.query_async(conn).await,
            RedisConn::Cluster(c) => {
                let route = Route::new(slot_of(key.as_bytes()), SlotAddr::Master);
                let routing = RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(route));
                let v = c.route_command(cmd.clone(), routing).await?;
                Ok(redis::from_redis_value(v)?)
            }
        }
    }

    /// Runs `cmds` and returns their answers in order, or the first error.
    /// On one server they go as one pipeline; on a cluster each is sent on
    /// its own (all at once, so still one round trip per node), because
    /// the cluster connection follows `MOVED`/`ASK` and retries
    /// `TRYAGAIN` for single commands but hands a pipeline's redirects back
    /// as errors. Every command must be safe to send again (the caller
    /// retries the whole batch after an error).
    pub async fn run_all(&mut self, cmds: Vec<Cmd>) -> RedisResult<Vec<Value>> {
        match self {
            RedisConn::Single { conn, .. } => {
                let mut pipe = redis::pipe();
                for c in cmds {
                    pipe.add_command(c);
                }
                pipe.query_async(conn).await
            }
            RedisConn::Cluster(c) => {
                let asks = cmds.into_iter().map(|cmd| {
                    let mut c = c.clone();
                    async move { cmd.query_async::<Value>(&mut c).await }
                });
                futures_util::future::join_all(asks)
                    .await
                    .into_iter()
                    .collect()
            }
        }
    }

    /// `host:port` of the server that holds `key` (on a cluster: the
    /// master of its slot, as that master says in `CLUSTER NODES`).
    pub async fn server_of(&mut self, key: &str) -> RedisResult<String> {
        if let RedisConn::Single { server, .. } = self {
            return Ok(server.clone());
        }
        let mut cmd = redis::cmd("CLUSTER");
        cmd.arg("NODES");
        let nodes: String = self.query_on_slot_of(&cmd, key).await?;
        Ok(myself_in(&nodes).unwrap_or_default())
    }
}

/// The address on the `myself` line of `CLUSTER NODES`.
fn myself_in(nodes: &str) -> Option<String> {
    let line = nodes.lines().find(|l| l.contains("myself"))?;
    let addr = line.split_whitespace().nth(1)?;
    Some(addr.split('@').next().unwrap_or(addr).to_owned())
}

impl ConnectionLike for RedisConn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            RedisConn::Single { conn, .. } => conn.req_packed_command(cmd),
            RedisConn::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            RedisConn::Single { conn, .. } => conn.req_packed_commands(pipeline, offset, count),
            RedisConn::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            RedisConn::Single { conn, .. } => conn.get_db(),
            RedisConn::Cluster(c) => c.get_db(),
        }
    }
}

/// Errors after which the caller should drop the connection and dial
/// again: the connection failed or timed out, the server is no longer
/// the master (`READONLY`: a demoted master behind Sentinel), is loading
/// or lost its master, a script is missing (a new connection loads the
/// scripts again), or a cluster redirect or retry outlasted the cluster
/// connection's own retries (a new connection learns the slots again).
pub fn needs_redial(e: &RedisError) -> bool {
    e.is_io_error()
        || e.is_connection_dropped()
        || e.is_timeout()
        || e.is_unrecoverable_error()
        || matches!(
            e.code(),
            Some(
                "NOSCRIPT"
                    | "READONLY"
                    | "LOADING"
                    | "MASTERDOWN"
                    | "CLUSTERDOWN"
                    | "TRYAGAIN"
                    | "MOVED"
                    | "ASK"
            )
        )
}

/// The Redis Cluster hash slot of `key`: CRC16 (XMODEM) of its hash tag
/// (the part between the first `{` and the next `}`, when not empty) or
/// of the whole key, modulo 16384.
pub(super) fn slot_of(key: &[u8]) -> u16 {
    let tagged = key.iter().position(|b| *b == b'{').and_then(|open| {
        let rest = &key[open + 1..];
        let close = rest.iter().position(|b| *b == b'}')?;
        (close > 0).then(|| &rest[..close])
    });
    crc16(tagged.unwrap_or(key)) % 16_384
}

fn crc16(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for b in bytes {
        crc ^= u16::from(*b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_match_redis() {
        // CLUSTER KEYSLOT answers.
        assert_eq!(slot_of(b"foo"), 12_182);
        assert_eq!(slot_of(b"{user1000}.following"), slot_of(b"user1000"));
        assert_eq!(slot_of(b"{hopgate:}s:00ff"), slot_of(b"{hopgate:}changes"));
        assert_ne!(
            slot_of(b"foo{}{bar}"),
            slot_of(b"bar"),
            "an empty tag hashes the whole key"
        );
    }

    #[test]
    fn the_myself_line_names_the_server() {
        let nodes = "a1 127.0.0.1:7001@17001 master - 0 0 1 connected 0-5460\n\
                     b2 127.0.0.1:7002@17002 myself,master - 0 0 2 connected 5461-10922\n";
        assert_eq!(myself_in(nodes).as_deref(), Some("127.0.0.1:7002"));
        assert_eq!(myself_in(""), None);
    }

    #[test]
    fn modes_follow_the_target() {
        let single = Connector::new(&RedisTarget::Url("redis://127.0.0.1:6379".into()));
        assert_eq!(single.map(|c| c.mode()), Ok("single"));
        let sentinel = Connector::new(&RedisTarget::Sentinel {
            master_name: "m".into(),
            endpoints: vec!["redis://:pw@127.0.0.1:26379/2".into()],
        })
        .expect("sentinel");
        assert_eq!(sentinel.mode(), "sentinel");
        let cluster = Connector::new(&RedisTarget::Cluster {
            endpoints: vec!["redis://127.0.0.1:7000".into()],
        });
        assert_eq!(cluster.map(|c| c.mode()), Ok("cluster"));
    }
}
