//! Debian's nginx as a third-party origin for tests: one process
//! (`master_process off`, so killing it leaves no worker behind) on a free
//! loopback port, with a `server { }` body the test chooses; killed and its
//! directory removed when dropped. Also curl, the third-party client.

use std::process::Stdio;
use std::time::Duration;

use super::{temp_path, within};

/// A running nginx.
pub struct Nginx {
    pub addr: std::net::SocketAddr,
    /// Its prefix directory; `root` under it is the document root.
    pub dir: std::path::PathBuf,
    _child: tokio::process::Child,
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Nginx {
    /// An nginx whose `server` block is `listen` plus `server` (which may
    /// name `{root}`, replaced by the document root, filled by `files`
    /// first). `http` is added to the `http { }` block.
    pub async fn start(files: &[(&str, &str)], http: &str, server: &str) -> Nginx {
        Nginx::start_listening(files, http, "", server).await
    }

    /// [`Nginx::start`] with `listen_options` after the `listen` address
    /// (e.g. ` proxy_protocol`).
    pub async fn start_listening(
        files: &[(&str, &str)],
        http: &str,
        listen_options: &str,
        server: &str,
    ) -> Nginx {
        let dir = temp_path("nginx");
        let root = dir.join("root");
        std::fs::create_dir_all(&root).unwrap();
        for (name, text) in files {
            std::fs::write(root.join(name), text).unwrap();
        }
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let server = server.replace("{root}", &root.display().to_string());
        let conf = format!(
            "master_process off; daemon off; pid {dir}/nginx.pid; error_log {dir}/error.log;\n\
             events {{ worker_connections 256; }}\n\
             http {{ access_log off; default_type text/plain;\n\
               client_body_temp_path {dir}/body; proxy_temp_path {dir}/proxy;\n\
               fastcgi_temp_path {dir}/fcgi; uwsgi_temp_path {dir}/uwsgi; scgi_temp_path {dir}/scgi;\n\
               {http}\n\
               server {{ listen 127.0.0.1:{port}{listen_options}; {server} }} }}\n",
            dir = dir.display(),
        );
        let conf_path = dir.join("nginx.conf");
        std::fs::write(&conf_path, conf).unwrap();
        let child = tokio::process::Command::new("nginx")
            .arg("-c")
            .arg(&conf_path)
            .arg("-p")
            .arg(&dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("nginx (Debian nginx-light) is installed by scripts/deps.sh");
        let addr: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        within(Duration::from_secs(10), || async {
            tokio::net::TcpStream::connect(addr).await.is_ok()
        })
        .await;
        Nginx {
            addr,
            dir,
            _child: child,
        }
    }
}

/// Runs curl and returns its stdout; `-w` output goes last.
pub async fn curl(args: &[&str]) -> String {
    let out = tokio::process::Command::new("curl")
        .args(["-s", "--max-time", "20"])
        .args(args)
        .output()
        .await
        .unwrap();
    assert!(out.status.success(), "curl {args:?}: {out:?}");
    String::from_utf8(out.stdout).unwrap()
}
