//! The `redis-server` handle for fleet tests: one copy, shared with
//! hopgate-store's tests (free 127.0.0.1 port, temporary data directory,
//! killed and cleaned up on drop).

#[path = "../../../hopgate-store/tests/redis/server.rs"]
mod server;

pub(crate) use server::RedisServer;
