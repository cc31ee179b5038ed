//! The watch loop against a real `etcd` (started here on free ports with a
//! temporary data dir): the compaction path, made deterministic by
//! compacting in the gap between the full read and the watch.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use etcd_client::{Client, CompactionOptions};
use tokio::sync::watch;

use super::{BeforeWatch, EtcdSource};
use crate::control::{Control, Source};
use crate::etcd::EtcdHandle;
use crate::maintenance::Maintenance;

/// A real etcd child process, killed (and its data dir removed) on drop.
struct Etcd {
    endpoint: String,
    data: PathBuf,
    child: Child,
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

impl Etcd {
    async fn start() -> Etcd {
        for attempt in 0..5 {
            let data = std::env::temp_dir().join(format!(
                "hopgate-control-etcd-{}-{attempt}-{}",
                std::process::id(),
                free_port()
            ));
            let endpoint = format!("http://127.0.0.1:{}", free_port());
            let peer = format!("http://127.0.0.1:{}", free_port());
            let child = Command::new("etcd")
                .args(["--name", "t"])
                .arg("--data-dir")
                .arg(&data)
                .args(["--listen-client-urls", &endpoint])
                .args(["--advertise-client-urls", &endpoint])
                .args(["--listen-peer-urls", &peer])
                .args(["--initial-advertise-peer-urls", &peer])
                .args(["--initial-cluster", &format!("t={peer}")])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("spawn etcd (Debian package etcd-server)");
            let mut e = Etcd {
                endpoint,
                data,
                child,
            };
            for _ in 0..100 {
                if let Ok(mut c) = e.client().await {
                    if c.status().await.is_ok() {
                        return e;
                    }
                }
                if let Ok(Some(_)) = e.child.try_wait() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        panic!("etcd did not start");
    }

    async fn client(&self) -> Result<Client, etcd_client::Error> {
        Client::connect([self.endpoint.as_str()], None).await
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.data);
    }
}

/// A shared document with one service named `name`.
fn doc(name: &str) -> String {
    format!(
        "services:\n  - {{ name: {name}, nodes: [ {{ id: a, address: \"127.0.0.1:9\" }} ] }}\nroutes:\n  - {{ id: r, match: {{ path_prefix: / }}, service: {name} }}\n"
    )
}

fn service_name(control: &Control) -> Option<String> {
    let snap = control.snapshot().load();
    snap.config.services.first().map(|s| s.name.clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_from_a_compacted_revision_re_reads_the_prefix_and_applies_the_latest() {
    let etcd = Etcd::start().await;
    let prefix = "/compact-test/";
    let mut kv = etcd.client().await.expect("connect");
    kv.put(format!("{prefix}config"), doc("before"), None)
        .await
        .expect("put");

    let bootstrap = format!(
        "replica_id: r1\nlisteners:\n  - {{ name: public, address: 127.0.0.1:0 }}\nadmin: {{ address: 127.0.0.1:0 }}\nsources:\n  file: {{ watch: false }}\n  etcd: {{ endpoints: [\"{}\"], prefix: \"{prefix}\" }}\n",
        etcd.endpoint
    );
    let cfg = hopgate_core::config::load(&bootstrap, hopgate_core::config::Format::Yaml)
        .expect("a valid bootstrap");
    let etcd_cfg = cfg.sources.etcd.clone().expect("sources.etcd");
    let maint_cfg = cfg.maintenance;
    let control = Control::new(cfg, Source::File("bootstrap".into()));
    let maintenance = Maintenance::new(control.snapshot().clone(), maint_cfg, 64);
    let handle = Arc::new(EtcdHandle::new(&etcd_cfg, "r1"));
    let cache = etcd.data.with_extension("cache.json");
    let mut source = EtcdSource::new(
        Arc::clone(&control),
        maintenance,
        Arc::clone(&handle),
        cache.clone(),
        None,
    );

    // Between the first read (revision R) and its watch (from R + 1): a new
    // document, another key after it, and a compaction at that last
    // revision. A watch from R + 1 can then only be canceled: the new
    // document must come from the re-read. (The replica's own verdict on
    // the first document may come first, at R + 1.)
    let fired = Arc::new(AtomicBool::new(false));
    let doc_at = Arc::new(parking_lot::Mutex::new(None));
    let writer = etcd.client().await.expect("connect");
    let (f, r) = (Arc::clone(&fired), Arc::clone(&doc_at));
    let hook: BeforeWatch = Box::new(move |revision| {
        let (fired, doc_at, mut client) = (Arc::clone(&f), Arc::clone(&r), writer.clone());
        Box::pin(async move {
            if fired.swap(true, Ordering::SeqCst) {
                return;
            }
            let put = client
                .put(format!("{prefix}config"), doc("after"), None)
                .await
                .expect("put the new document");
            let doc_revision = put.header().expect("header").revision();
            assert!(doc_revision > revision);
            *doc_at.lock() = Some(doc_revision);
            let junk = client
                .put(format!("{prefix}status/someone-else"), "{}", None)
                .await
                .expect("put");
            let last = junk.header().expect("header").revision();
            client
                .compact(last, Some(CompactionOptions::new().with_physical()))
                .await
                .expect("compact");
        })
    });
    let mut client = etcd.client().await.expect("connect");
    source.before_watch = Some(hook);
    let (stop, stopped) = watch::channel(false);
    let task = tokio::spawn(source.run(stopped));

    let start = Instant::now();
    while !(handle.resyncs.load(Ordering::Relaxed) >= 1
        && service_name(&control).as_deref() == Some("after"))
    {
        assert!(
            start.elapsed() < Duration::from_secs(15),
            "not re-read within 15 s: resyncs {}, service {:?}",
            handle.resyncs.load(Ordering::Relaxed),
            service_name(&control)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(fired.load(Ordering::SeqCst), "the compaction happened");
    let r = doc_at.lock().expect("the new document's revision");
    // The verdict on the new document, written after the re-read.
    let status_key = format!("{prefix}status/r1");
    let start = Instant::now();
    let verdict = loop {
        let got = client.get(status_key.as_str(), None).await.expect("get");
        let v: Option<serde_json::Value> = got
            .kvs()
            .first()
            .and_then(|kv| serde_json::from_slice(kv.value()).ok());
        if let Some(v) = v.filter(|v| v["revision"] == r) {
            break v;
        }
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "no verdict on {r}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(verdict["ok"], true, "{verdict}");
    assert_eq!(
        handle.resyncs.load(Ordering::Relaxed),
        1,
        "one canceled watch, one re-read"
    );
    let versions: Vec<String> = control
        .versions()
        .iter()
        .map(|v| v.source.clone())
        .collect();
    assert_eq!(versions.last().map(String::as_str), Some("etcd"));

    stop.send(true).expect("stop");
    task.await.expect("the source stops");
    let _ = std::fs::remove_file(&cache);
}
