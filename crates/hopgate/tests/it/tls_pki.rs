//! A throwaway PKI for the TLS tests, made with the `openssl` command:
//! a CA, and certificates it signs (current or already expired), in a
//! temporary directory removed on drop. Plus `curl` over HTTPS and a raw
//! rustls client for what curl cannot show (one connection across steps,
//! session resumption).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

use crate::harness::temp_path;

fn run(cmd: &mut Command) {
    let out = cmd.output().expect("openssl runs");
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A CA and the certificates it issued, in a temporary directory.
pub struct Pki {
    pub dir: PathBuf,
}

impl Pki {
    pub fn new() -> Pki {
        let dir = temp_path("pki");
        std::fs::create_dir_all(&dir).unwrap();
        let pki = Pki { dir };
        pki.self_signed("ca", "test CA");
        pki
    }

    pub fn path(&self, file: &str) -> PathBuf {
        self.dir.join(file)
    }

    /// `name.pem` and `name.key`: a self-signed CA certificate.
    fn self_signed(&self, name: &str, cn: &str) {
        run(Command::new("openssl")
            .current_dir(&self.dir)
            .args(["req", "-x509", "-newkey", "ec", "-pkeyopt"])
            .args(["ec_paramgen_curve:P-256", "-nodes", "-days", "30"])
            .args([
                "-keyout",
                &format!("{name}.key"),
                "-out",
                &format!("{name}.pem"),
            ])
            .args(["-subj", &format!("/CN={cn}")]));
    }

    fn csr(&self, name: &str, sans: &str) {
        run(Command::new("openssl")
            .current_dir(&self.dir)
            .args(["req", "-new", "-newkey", "ec", "-pkeyopt"])
            .args(["ec_paramgen_curve:P-256", "-nodes"])
            .args([
                "-keyout",
                &format!("{name}.key"),
                "-out",
                &format!("{name}.csr"),
            ])
            .args(["-subj", &format!("/CN={name}")]));
        std::fs::write(
            self.path(&format!("{name}.ext")),
            format!(
                "subjectAltName={sans}\nextendedKeyUsage=serverAuth,clientAuth\nbasicConstraints=CA:FALSE\n"
            ),
        )
        .unwrap();
    }

    /// `name.pem` (CN=name, these SANs, like `DNS:example.com,IP:127.0.0.1`)
    /// and `name.key`, signed by the CA, valid for 30 days.
    pub fn issue(&self, name: &str, sans: &str) -> (PathBuf, PathBuf) {
        self.csr(name, sans);
        run(Command::new("openssl")
            .current_dir(&self.dir)
            .args(["x509", "-req", "-in", &format!("{name}.csr")])
            .args(["-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial"])
            .args(["-days", "30", "-out", &format!("{name}.pem")])
            .args(["-extfile", &format!("{name}.ext")]));
        (
            self.path(&format!("{name}.pem")),
            self.path(&format!("{name}.key")),
        )
    }

    /// Like [`Pki::issue`], but valid only on 1–2 January 2020.
    pub fn issue_expired(&self, name: &str, sans: &str) -> (PathBuf, PathBuf) {
        self.csr(name, sans);
        let d = self.dir.display();
        std::fs::write(self.path("index.txt"), "").unwrap();
        std::fs::write(self.path("serial"), "1000\n").unwrap();
        std::fs::write(
            self.path("ca.cnf"),
            format!(
                "[ca]\ndefault_ca = d\n[d]\ndatabase = {d}/index.txt\nnew_certs_dir = {d}\nserial = {d}/serial\ndefault_md = sha256\npolicy = p\nunique_subject = no\n[p]\ncommonName = supplied\n"
            ),
        )
        .unwrap();
        run(Command::new("openssl")
            .current_dir(&self.dir)
            .args(["ca", "-batch", "-config", "ca.cnf", "-notext"])
            .args(["-cert", "ca.pem", "-keyfile", "ca.key"])
            .args([
                "-startdate",
                "20200101000000Z",
                "-enddate",
                "20200102000000Z",
            ])
            .args(["-extfile", &format!("{name}.ext")])
            .args([
                "-in",
                &format!("{name}.csr"),
                "-out",
                &format!("{name}.pem"),
            ]));
        (
            self.path(&format!("{name}.pem")),
            self.path(&format!("{name}.key")),
        )
    }

    /// Copies `from` over `to` the way certificate tools do: a new file
    /// renamed into place.
    pub fn replace(&self, from: &Path, to: &Path) {
        let tmp = to.with_extension("new");
        std::fs::copy(from, &tmp).unwrap();
        std::fs::rename(&tmp, to).unwrap();
    }
}

impl Drop for Pki {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// What one `curl` call over HTTPS saw.
#[derive(Debug)]
pub struct Fetched {
    pub status: u16,
    /// `1.1` or `2`.
    pub http_version: String,
    /// The server certificate's subject (`CN=site`).
    pub subject: String,
    pub body: String,
}

/// `curl https://NAME:PORT/PATH` with NAME resolved to 127.0.0.1, trusting
/// `ca` (or nothing: `ca = None` means `-k`), plus `extra` arguments.
pub fn curl(ca: Option<&Path>, name: &str, port: u16, path: &str, extra: &[&str]) -> Fetched {
    let mut cmd = Command::new("curl");
    cmd.args(["-sS", "-v", "--max-time", "20", "--noproxy", "*"])
        .args(["--resolve", &format!("{name}:{port}:127.0.0.1")])
        .args(["-w", "\n%{http_code} %{http_version}"]);
    match ca {
        Some(ca) => cmd.arg("--cacert").arg(ca),
        None => cmd.arg("-k"),
    };
    let out = cmd
        .args(extra)
        .arg(format!("https://{name}:{port}{path}"))
        .output()
        .expect("curl runs");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "curl failed: {stderr}");
    let (body, last) = stdout.rsplit_once('\n').unwrap();
    let (code, version) = last.split_once(' ').unwrap();
    let subject = stderr
        .lines()
        .find_map(|l| l.trim_start_matches(['*', ' ']).strip_prefix("subject: "))
        .unwrap_or_default()
        .to_owned();
    Fetched {
        status: code.parse().unwrap(),
        http_version: version.to_owned(),
        subject,
        body: body.to_owned(),
    }
}

/// A rustls client trusting `ca`, offering `http/1.1`.
pub fn rustls_client(ca: &Path) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(ca).unwrap() {
        roots.add(c.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Arc::new(config)
}

/// A TLS connection to 127.0.0.1:`port` with SNI `name`.
pub async fn tls_connect(
    config: &Arc<rustls::ClientConfig>,
    name: &str,
    port: u16,
) -> TlsStream<TcpStream> {
    let tcp = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    tokio_rustls::TlsConnector::from(Arc::clone(config))
        .connect(ServerName::try_from(name.to_owned()).unwrap(), tcp)
        .await
        .unwrap()
}

/// Whether the server presented the (first) certificate in `pem`.
pub fn presented(s: &TlsStream<TcpStream>, pem: &Path) -> bool {
    let peer = &s.get_ref().1.peer_certificates().unwrap()[0];
    let file = CertificateDer::from_pem_file(pem).unwrap();
    peer.as_ref() == file.as_ref()
}

/// One HTTP/1.1 keep-alive GET on `s`: the status and the body.
pub async fn get_on(s: &mut TlsStream<TcpStream>, host: &str, path: &str) -> (u16, String) {
    let req = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n");
    s.write_all(req.as_bytes()).await.unwrap();
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        let n = tokio::time::timeout(std::time::Duration::from_secs(20), s.read(&mut chunk))
            .await
            .expect("response in time")
            .unwrap();
        assert!(n > 0, "connection closed before the response ended");
        buf.extend_from_slice(&chunk[..n]);
        let text = String::from_utf8_lossy(&buf);
        let Some((head, body)) = text.split_once("\r\n\r\n") else {
            continue;
        };
        let len: usize = head
            .lines()
            .find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.eq_ignore_ascii_case("content-length")
                    .then(|| v.trim().parse().unwrap())
            })
            .expect("a Content-Length");
        if body.len() >= len {
            let status = head[9..12].parse().unwrap();
            return (status, body[..len].to_owned());
        }
    }
}
