//! A real `redis-server` for tests: a free 127.0.0.1 port, a temporary data
//! directory, append-only persistence (fsync on every write, so a killed
//! server restarts with its data), killed and cleaned up on drop.

use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

pub(crate) struct RedisServer {
    pub(crate) port: u16,
    dir: PathBuf,
    child: Option<Child>,
}

impl RedisServer {
    pub(crate) fn start() -> Self {
        static N: AtomicU32 = AtomicU32::new(0);
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let dir = std::env::temp_dir().join(format!(
            "hopgate-redis-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let mut s = Self {
            port,
            dir,
            child: None,
        };
        s.restart();
        s
    }

    pub(crate) fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }

    /// Kills the server at once (SIGKILL: no clean shutdown).
    pub(crate) fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Restarts it on the same port with its data gone, as a server
    /// without persistence (or a failover to an empty one) comes back.
    // Shared by path with the binary's integration tests, which do not use it.
    #[allow(dead_code)]
    pub(crate) fn restart_empty(&mut self) {
        self.kill();
        for entry in std::fs::read_dir(&self.dir).expect("data dir").flatten() {
            let path = entry.path();
            if path.file_name().is_some_and(|n| n != "redis.log") {
                let _ = std::fs::remove_dir_all(&path).or_else(|_| std::fs::remove_file(&path));
            }
        }
        self.restart();
    }

    /// Starts it (again) on the same port with the same data directory.
    pub(crate) fn restart(&mut self) {
        self.kill();
        let log = std::fs::File::create(self.dir.join("redis.log")).expect("log file");
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .arg("--dir")
            .arg(&self.dir)
            .args([
                "--save",
                "",
                "--appendonly",
                "yes",
                "--appendfsync",
                "always",
            ])
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server runs (scripts/deps.sh installs it)");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while !self.answers_ping() {
            assert!(Instant::now() < deadline, "redis-server did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Whether it answers `PING` with `PONG` (not `LOADING` while it
    /// reads its append-only file back).
    fn answers_ping(&self) -> bool {
        use std::io::{Read, Write};
        let Ok(mut s) = TcpStream::connect(("127.0.0.1", self.port)) else {
            return false;
        };
        let _ = s.set_read_timeout(Some(Duration::from_secs(1)));
        let mut reply = [0u8; 5];
        s.write_all(b"PING\r\n").is_ok() && s.read_exact(&mut reply).is_ok() && &reply == b"+PONG"
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
