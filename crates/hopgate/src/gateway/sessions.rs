//! The sessions' start-up step: keys (from the environment), the store
//! (the memory store, loaded from its file when `store.path` is set, or
//! the redis store over a memory cache) and the task that expires bindings
//! and persists them. Keys and store are fixed at start; `sessions.enabled`
//! and the cookie settings follow reloads.
//!
//! Must not touch: listeners, the admin API, the snapshot.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;

use hopgate_core::config::{Config, SessionsConfig};
use hopgate_core::session::{unix_now, SessionKeys};
use hopgate_store::{MemoryStore, RedisOptions, RedisStore, SessionStore, Sessions};

/// The shortest session secret accepted: 32 bytes, the output size of
/// SHA-256, so the key is no weaker than the MAC.
const MIN_SECRET_BYTES: usize = 32;

/// The store every request uses, the memory store saved to `store.path`
/// (none with redis: validation refuses `store.path` with redis), and the
/// redis store to flush at shutdown.
type Stores = (
    Arc<dyn SessionStore>,
    Option<Arc<MemoryStore>>,
    Option<Arc<RedisStore>>,
);

/// Starts the sessions: keys, store, and the sweep/persist task, which
/// saves a last time once `stop` turns true. Also returns the memory store
/// to hand to a new process at an upgrade.
pub(super) async fn start_sessions(
    cfg: &Config,
    replica_id: &str,
    stop: watch::Receiver<bool>,
) -> anyhow::Result<(Arc<Sessions>, JoinHandle<()>, Option<Arc<MemoryStore>>)> {
    let keys = session_keys(&cfg.sessions)?;
    let (store, saved, shared) = session_store(cfg, replica_id).await?;
    let sessions = Arc::new(Sessions {
        keys,
        store: Arc::clone(&store),
    });
    let handover = saved.clone();
    let task = spawn_sweeper(cfg, (store, saved, shared), stop);
    Ok((sessions, task, handover))
}

/// The previous secrets (a weak one only warned about) and the current
/// one (refused if weak; a random per-process key if unset).
fn session_keys(scfg: &SessionsConfig) -> anyhow::Result<SessionKeys> {
    let previous: Vec<Vec<u8>> = scfg
        .previous_secrets_env
        .as_ref()
        .and_then(|v| std::env::var(v).ok())
        .map(|v| {
            v.split(',')
                .filter(|s| !s.is_empty())
                .map(|s| s.as_bytes().to_vec())
                .collect()
        })
        .unwrap_or_default();
    for (i, old) in previous.iter().enumerate() {
        if old.len() < MIN_SECRET_BYTES {
            // Accepted, so a weak key can be rotated away without logging
            // every client out; loud, because its tokens can be forged
            // more easily than the new key's.
            tracing::warn!(
                env = scfg.previous_secrets_env.as_deref().unwrap_or_default(),
                index = i,
                bytes = old.len(),
                "sessions: a previous secret is shorter than {MIN_SECRET_BYTES} bytes; tokens signed with it are still accepted (and re-signed with the current key) until you remove it"
            );
        }
    }
    Ok(match std::env::var(&scfg.secret_env) {
        Ok(secret) if !secret.is_empty() => {
            anyhow::ensure!(
                secret.len() >= MIN_SECRET_BYTES,
                "sessions: the secret in {} is {} bytes; it must be at least {MIN_SECRET_BYTES} bytes (an HMAC-SHA256 key; generate one with `openssl rand -base64 32`)",
                scfg.secret_env,
                secret.len()
            );
            let prev: Vec<&[u8]> = previous.iter().map(Vec::as_slice).collect();
            SessionKeys::from_secrets(secret.as_bytes(), &prev)
        }
        _ => {
            if scfg.enabled {
                tracing::warn!(
                    env = %scfg.secret_env,
                    "sessions: no secret in the environment; using a random per-process key (tokens will not survive a restart)"
                );
            }
            SessionKeys::try_random().map_err(|e| {
                anyhow::anyhow!(
                    "sessions: no secret in {} and the random source failed ({e}); set the secret",
                    scfg.secret_env
                )
            })?
        }
    })
}

/// The memory store (loaded from `store.path` if set), alone or under the
/// redis store, which waits up to a second for Redis.
async fn session_store(cfg: &Config, replica_id: &str) -> anyhow::Result<Stores> {
    let now = unix_now();
    let memory = match &cfg.store.path {
        Some(path) => {
            let (store, report) = MemoryStore::load_with_limit(path, now, cfg.store.max_sessions);
            if report.warning.is_some() {
                tracing::warn!("{report}");
            } else {
                tracing::info!("{report}");
            }
            store
        }
        None => MemoryStore::new(cfg.store.max_sessions),
    };
    Ok(match &cfg.store.redis {
        Some(r) => {
            let mut opts = RedisOptions::with_target(r.target.clone(), replica_id);
            opts.prefix = r.prefix.clone();
            opts.max_queue = r.max_queue;
            let redis = RedisStore::start(opts, memory)?;
            if !redis.wait_loaded(Duration::from_secs(1)).await {
                tracing::warn!(
                    mode = r.target.mode(),
                    "redis store: Redis not reached at start; serving local bindings until it is"
                );
            }
            let redis = Arc::new(redis);
            (
                Arc::clone(&redis) as Arc<dyn SessionStore>,
                None,
                Some(redis),
            )
        }
        None => {
            let memory = Arc::new(memory);
            (
                Arc::clone(&memory) as Arc<dyn SessionStore>,
                Some(memory),
                None,
            )
        }
    })
}

/// Every `store.persist_interval` (at most a minute): expires bindings and
/// saves the memory store to `store.path`. Once `stop` turns true, does it
/// a last time and flushes the redis store's queue.
fn spawn_sweeper(
    cfg: &Config,
    (store, saved, shared): Stores,
    mut stop: watch::Receiver<bool>,
) -> JoinHandle<()> {
    let path = cfg.store.path.clone();
    let interval = cfg.store.persist_interval;
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(interval.min(Duration::from_secs(60)));
        tick.tick().await;
        loop {
            let stopping = tokio::select! {
                _ = tick.tick() => false,
                _ = stop.wait_for(|s| *s) => true,
            };
            let expired = store.sweep(unix_now());
            if expired > 0 {
                tracing::debug!(expired, "expired session bindings removed");
            }
            if let (Some(p), Some(store)) = (&path, &saved) {
                let store = Arc::clone(store);
                let p = p.clone();
                let saved = tokio::task::spawn_blocking(move || store.save(&p)).await;
                match saved {
                    Ok(Ok(n)) => tracing::debug!(bindings = n, "sessions persisted"),
                    Ok(Err(e)) => tracing::warn!(error = %e, "cannot persist sessions"),
                    Err(e) => tracing::warn!(error = %e, "session persistence task failed"),
                }
            }
            if stopping {
                if let Some(redis) = &shared {
                    if !redis.flush(Duration::from_secs(1)).await {
                        tracing::warn!(
                            queued = redis.status().queued,
                            "redis store: writes not sent to Redis at shutdown"
                        );
                    }
                }
                return;
            }
        }
    })
}
