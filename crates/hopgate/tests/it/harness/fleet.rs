//! The fleet handle: `hopgate run` replicas whose local files hold only
//! bootstrap sections and whose runtime config comes from one real etcd,
//! under a prefix of their own (optionally with one Redis session store).
//! Owns that etcd, the prefix and the replicas' cache files (removed on
//! drop); the replicas themselves are ordinary [`Gateway`]s the test owns.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use super::{temp_path, Gateway};
use crate::etcd_server::Etcd;
use crate::redis_server::RedisServer;

pub struct Fleet {
    pub etcd: Etcd,
    /// Every key of this fleet starts with it (`/it-<pid>-<n>/`).
    pub prefix: String,
    /// `debug_headers` on the replicas' listener.
    debug_headers: bool,
    /// Bootstrap lines besides listener, admin and sources (`store:`, `canary:`).
    extra: String,
    env: Vec<(String, String)>,
    caches: Vec<PathBuf>,
}

impl Fleet {
    /// A new etcd and a fresh prefix; replicas with no store section and no
    /// environment until told otherwise.
    pub async fn start() -> Fleet {
        static N: AtomicU64 = AtomicU64::new(0);
        Fleet {
            etcd: Etcd::start().await,
            prefix: format!(
                "/it-{}-{}/",
                std::process::id(),
                N.fetch_add(1, Ordering::Relaxed)
            ),
            debug_headers: false,
            extra: String::new(),
            env: Vec::new(),
            caches: Vec::new(),
        }
    }

    /// Replicas answer with the debug headers (`X-Upstream-Addr`, ...).
    pub fn debug_headers(mut self) -> Fleet {
        self.debug_headers = true;
        self
    }

    /// Replicas share `redis` as their session store.
    pub fn redis(self, redis: &RedisServer) -> Fleet {
        self.bootstrap_lines(&format!(
            "store: {{ kind: redis, url: \"{}\" }}\n",
            redis.url()
        ))
    }

    /// More bootstrap lines for every replica (whole YAML lines).
    pub fn bootstrap_lines(mut self, yaml: &str) -> Fleet {
        self.extra.push_str(yaml);
        self
    }

    /// An environment variable for every replica.
    pub fn env(mut self, key: &str, value: &str) -> Fleet {
        self.env.push((key.to_owned(), value.to_owned()));
        self
    }

    /// The etcd key `rest` under this fleet's prefix.
    pub fn key(&self, rest: &str) -> String {
        format!("{}{rest}", self.prefix)
    }

    /// A new cache file path, removed with the fleet.
    pub fn cache(&mut self) -> PathBuf {
        let p = temp_path("json");
        self.caches.push(p.clone());
        p
    }

    /// Replica `replica`'s local file: bootstrap sections only.
    pub fn bootstrap(&self, replica: &str, cache: &Path) -> String {
        let debug = if self.debug_headers {
            ", debug_headers: true"
        } else {
            ""
        };
        format!(
            "replica_id: {replica}\n\
             listeners:\n  - {{ name: public, address: 127.0.0.1:0{debug} }}\n\
             admin: {{ address: 127.0.0.1:0 }}\n\
             {}\
             sources:\n  file: {{ watch: false }}\n  etcd: {{ endpoints: [\"{}\"], prefix: \"{}\", cache: \"{}\" }}\n",
            self.extra,
            self.etcd.endpoint,
            self.prefix,
            cache.display()
        )
    }

    /// Starts replica `name` with `cache` as its cache file.
    pub async fn replica(&self, name: &str, cache: &Path) -> Gateway {
        let env: Vec<(&str, &str)> = self
            .env
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        Gateway::start_with_env(&self.bootstrap(name, cache), &env).await
    }

    /// Starts one replica per name, one after the other, each with a new
    /// cache file.
    pub async fn replicas<const N: usize>(&mut self, names: [&str; N]) -> [Gateway; N] {
        let mut started = Vec::with_capacity(N);
        for name in names {
            let cache = self.cache();
            started.push(self.replica(name, &cache).await);
        }
        match started.try_into() {
            Ok(all) => all,
            Err(_) => unreachable!("one replica per name"),
        }
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        for c in &self.caches {
            let _ = std::fs::remove_file(c);
        }
    }
}
