//! hopgate's own HTTP/1.1 upstream client against a server this project did
//! not write (nginx, the Debian package), driven by a client it did not
//! write either (curl): length-delimited and chunked (gzip) bodies, HEAD,
//! error statuses and several requests over kept-alive connections.

use std::process::Stdio;
use std::time::Duration;

use crate::harness::{config, temp_path, within, Gateway};

/// An nginx serving `root` on a free loopback port, one process
/// (`master_process off`, so killing it leaves no worker behind); killed
/// when dropped.
struct Nginx {
    addr: std::net::SocketAddr,
    dir: std::path::PathBuf,
    _child: tokio::process::Child,
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Nginx {
    async fn start() -> Nginx {
        let dir = temp_path("nginx");
        let root = dir.join("root");
        std::fs::create_dir_all(&root).unwrap();
        // 200 KiB of text, so gzip answers it chunked.
        let text: String = (0..6_000)
            .map(|i| format!("line {i} of the nginx interop file\n"))
            .collect();
        std::fs::write(root.join("big.txt"), &text).unwrap();
        std::fs::write(root.join("small.txt"), "hello from nginx\n").unwrap();
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let conf = format!(
            "master_process off; daemon off; pid {dir}/nginx.pid; error_log {dir}/error.log;\n\
             events {{ worker_connections 256; }}\n\
             http {{ access_log off; default_type text/plain;\n\
               client_body_temp_path {dir}/body; proxy_temp_path {dir}/proxy;\n\
               fastcgi_temp_path {dir}/fcgi; uwsgi_temp_path {dir}/uwsgi; scgi_temp_path {dir}/scgi;\n\
               gzip on; gzip_types text/plain; gzip_min_length 1;\n\
               server {{ listen 127.0.0.1:{port}; root {root}; keepalive_requests 1000; }} }}\n",
            dir = dir.display(),
            root = root.display(),
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
async fn curl(args: &[&str]) -> String {
    let out = tokio::process::Command::new("curl")
        .args(["-s", "--max-time", "20"])
        .args(args)
        .output()
        .await
        .unwrap();
    assert!(out.status.success(), "curl {args:?}: {out:?}");
    String::from_utf8(out.stdout).unwrap()
}

#[tokio::test]
async fn curl_through_hopgate_to_nginx_sees_what_nginx_serves() {
    let n = Nginx::start().await;
    let svc = format!(
        "  - name: web\n    nodes:\n      - {{ id: nginx, address: \"{}\" }}\n",
        n.addr
    );
    let gw = Gateway::start(&config(
        &svc,
        "  - { id: all, match: { path_prefix: / }, service: web }",
    ))
    .await;
    let direct = |p: &str| format!("http://{}{p}", n.addr);
    let via = |p: &str| gw.url(p);

    // Length-delimited and gzip-chunked bodies arrive byte for byte.
    for (path, extra) in [("/big.txt", None), ("/big.txt", Some("--compressed"))] {
        let mut a = vec![];
        if let Some(e) = extra {
            a.push(e);
        }
        let d = direct(path);
        let v = via(path);
        let mut da = a.clone();
        da.push(&d);
        let mut va = a.clone();
        va.push(&v);
        let want = curl(&da).await;
        assert_eq!(want.lines().count(), 6_000, "{path}");
        assert!(want.starts_with("line 0 of the nginx interop file\n"));
        assert_eq!(curl(&va).await, want, "{path} {extra:?}");
    }
    // The compressed answer really was chunked on nginx's side.
    let head = curl(&[
        "-D",
        "-",
        "-o",
        "/dev/null",
        "--compressed",
        &direct("/big.txt"),
    ])
    .await;
    assert!(
        head.to_ascii_lowercase()
            .contains("transfer-encoding: chunked"),
        "{head}"
    );

    // HEAD, 404 and 405 pass through with nginx's status; HEAD has no body.
    let status = |args: Vec<String>| async move {
        let mut a: Vec<&str> = args.iter().map(String::as_str).collect();
        a.extend(["-o", "/dev/null", "-w", "%{http_code} %{size_download}"]);
        curl(&a).await
    };
    assert_eq!(status(vec!["-I".into(), via("/small.txt")]).await, "200 0");
    assert_eq!(
        status(vec![via("/missing.txt")]).await.split(' ').next(),
        Some("404")
    );
    assert_eq!(
        status(vec!["-X".into(), "DELETE".into(), via("/small.txt")])
            .await
            .split(' ')
            .next(),
        Some("405")
    );

    // Several requests on one client connection, each answered in full.
    let urls: Vec<String> = (0..5).map(|_| via("/small.txt")).collect();
    let mut args: Vec<&str> = vec![];
    for u in &urls {
        args.push(u);
    }
    assert_eq!(curl(&args).await, "hello from nginx\n".repeat(5));
}
