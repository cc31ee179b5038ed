//! Zero-downtime binary upgrade: the running process hands its listening
//! sockets to a new one over a Unix socket (`upgrade.socket`), with
//! `SCM_RIGHTS`, then drains and exits.
//!
//! Owns the handover socket (its path, permissions, stale files) and the
//! protocol, one text line per message:
//!
//! 1. new → old: `HELLO 2 <pid>` — the new process has loaded and checked
//!    its config (a config that fails never gets this far). A running
//!    process of protocol 1 answers `BUSY unsupported protocol`; the new
//!    one then asks again with `HELLO 1` and gets no `STATE` block.
//! 2. old → new: `FDS <n>`, then `n` lines `<kind>\t<configured address>\t<name>`,
//!    then one line `health\t<service>\t<node id>\t<address>\t<healthy|unhealthy>`
//!    per actively checked node with a verdict, then (protocol 2) one line
//!    `STATE <n>` followed by `n` bytes of JSON, the running state the new
//!    process resumes from ([`hopgate_control::Carried`]: the running config
//!    and its version, the version history, the drains), then `END`, sent with one
//!    `sendmsg` carrying the `n` descriptors in the same order (the public
//!    listeners and the admin API). Before it sends them, the old process
//!    saves its session bindings (memory store with `store.path`), so the
//!    new process loads them as it starts.
//! 3. The new process starts completely with those sockets (a listener whose
//!    name and configured address are unchanged reuses its socket; a new or
//!    moved one is bound fresh) and accepts on them: both processes accept
//!    from the same kernel queue for a moment.
//! 4. new → old: `DRAIN` (or `FAIL <why>` if it could not start: the old
//!    process logs why and keeps serving; a new process that vanishes
//!    without a word is treated the same).
//! 5. old → new: `DRAINING` once the old process has closed and removed its
//!    handover socket (so the new one binds the path); then the old process
//!    stops accepting at once and drains ([`crate::gateway::Gateway::handover_drain`]).
//!
//! Must not touch: how sockets are matched to listeners
//! ([`crate::listenfd`]) or served.

use std::io::{IoSlice, IoSliceMut, Write};
use std::mem::MaybeUninit;
use std::net::SocketAddr;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::os::unix::net::{UnixListener as StdUnixListener, UnixStream as StdUnixStream};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use rustix::net::{
    recvmsg, sendmsg, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, ReturnFlags,
    SendAncillaryBuffer, SendAncillaryMessage, SendFlags,
};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use hopgate_core::config::Health;

use crate::gateway::HandoverSource;
use crate::listenfd::{Handed, Inherited, Kind};

/// Protocol version in `HELLO` (2: with the `STATE` block).
const VERSION: u32 = 2;
/// The largest `STATE` block accepted.
const MAX_STATE: usize = 64 << 20;
/// The most descriptors one handover carries (listeners + admin).
const MAX_FDS: usize = 64;
/// How long either side waits for a protocol line (not for the new
/// process's start-up, see [`START_BOUND`]).
const LINE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the new process waits for the sockets (the old process saves
/// its session bindings first, which takes a while for a large store).
const HANDOVER_BOUND: Duration = Duration::from_secs(60);
/// How long the old process waits for the new one to start and say
/// `DRAIN` or `FAIL` before giving up on it and serving on.
const START_BOUND: Duration = Duration::from_secs(120);

/// The handover socket of a config: `upgrade.socket`, else
/// `hopgate-upgrade-<replica_id>.sock` when the config names its replica
/// (replicas started from one directory each get their own), else
/// `hopgate-upgrade.sock`; relative paths against the config file's
/// directory (the working directory for the embedded default config).
pub(crate) fn socket_path(
    configured: Option<&Path>,
    replica_id: Option<&str>,
    config_file: Option<&Path>,
) -> PathBuf {
    let p = match (configured, replica_id) {
        (Some(p), _) => p.to_path_buf(),
        (None, Some(id)) => PathBuf::from(format!("hopgate-upgrade-{}.sock", file_safe(id))),
        (None, None) => PathBuf::from(hopgate_core::config::DEFAULT_UPGRADE_SOCKET),
    };
    if p.is_absolute() {
        return p;
    }
    match config_file.and_then(Path::parent) {
        Some(dir) if !dir.as_os_str().is_empty() => dir.join(p),
        _ => p,
    }
}

/// `id` with every character but letters, digits, `-`, `_` and `.` made
/// `_`: a replica id as part of a file name.
fn file_safe(id: &str) -> String {
    id.chars()
        .map(|c| match c {
            'a'..='z' | 'A'..='Z' | '0'..='9' | '-' | '_' | '.' => c,
            _ => '_',
        })
        .collect()
}

/// A Unix stream with a line buffer and the descriptors that came with it.
struct Wire {
    s: StdUnixStream,
    buf: Vec<u8>,
    fds: Vec<OwnedFd>,
}

impl Wire {
    fn new(s: StdUnixStream, timeout: Duration) -> std::io::Result<Wire> {
        s.set_nonblocking(false)?;
        s.set_read_timeout(Some(timeout))?;
        s.set_write_timeout(Some(LINE_TIMEOUT))?;
        Ok(Wire {
            s,
            buf: Vec::new(),
            fds: Vec::new(),
        })
    }

    fn send(&mut self, line: &str) -> std::io::Result<()> {
        self.s.write_all(line.as_bytes())?;
        self.s.write_all(b"\n")
    }

    /// `text` with `fds` attached to its first byte.
    fn send_with_fds(&mut self, text: &str, fds: &[OwnedFd]) -> std::io::Result<()> {
        let borrowed: Vec<_> = fds.iter().map(AsFd::as_fd).collect();
        let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
        let mut control = SendAncillaryBuffer::new(&mut space);
        if !control.push(SendAncillaryMessage::ScmRights(&borrowed)) {
            return Err(std::io::Error::other("too many sockets for one message"));
        }
        let bytes = text.as_bytes();
        let n = sendmsg(
            &self.s,
            &[IoSlice::new(bytes)],
            &mut control,
            SendFlags::empty(),
        )?;
        self.s.write_all(&bytes[n..])
    }

    /// Reads more bytes, keeping any descriptors that arrive with them.
    fn fill(&mut self) -> std::io::Result<()> {
        let mut chunk = [0u8; 4096];
        let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
        let mut control = RecvAncillaryBuffer::new(&mut space);
        let msg = recvmsg(
            &self.s,
            &mut [IoSliceMut::new(&mut chunk)],
            &mut control,
            RecvFlags::CMSG_CLOEXEC,
        )
        .map_err(std::io::Error::from)?;
        for m in control.drain() {
            if let RecvAncillaryMessage::ScmRights(fds) = m {
                self.fds.extend(fds);
            }
        }
        if msg.flags.contains(ReturnFlags::CTRUNC) {
            return Err(std::io::Error::other("descriptors truncated"));
        }
        if msg.bytes == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        self.buf.extend_from_slice(&chunk[..msg.bytes]);
        Ok(())
    }

    /// The next `n` bytes.
    fn block(&mut self, n: usize) -> std::io::Result<Vec<u8>> {
        while self.buf.len() < n {
            self.fill()?;
        }
        Ok(self.buf.drain(..n).collect())
    }

    fn line(&mut self) -> std::io::Result<String> {
        loop {
            if let Some(i) = self.buf.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = self.buf.drain(..=i).collect();
                return Ok(String::from_utf8_lossy(&line[..i]).into_owned());
            }
            if self.buf.len() > 64 << 10 {
                return Err(std::io::Error::other("protocol line too long"));
            }
            self.fill()?;
        }
    }
}

/// Says what went wrong with an I/O step of the protocol.
fn io_why(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::UnexpectedEof => "the other process closed the connection".to_owned(),
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => {
            "timed out waiting for the other process".to_owned()
        }
        _ => e.to_string(),
    }
}

/// One `health` line's fields: service, node id, address, verdict.
fn parse_health(fields: &str) -> Option<(String, String, SocketAddr, Health)> {
    let mut f = fields.split('\t');
    let (service, id, addr, h) = (f.next()?, f.next()?, f.next()?, f.next()?);
    let health = match h {
        "healthy" => Health::Healthy,
        "unhealthy" => Health::Unhealthy,
        _ => return None,
    };
    Some((
        service.to_owned(),
        id.to_owned(),
        addr.parse().ok()?,
        health,
    ))
}

// ----- the new process -----

/// The new process's end of a handover in progress.
pub(crate) struct Taking {
    wire: Wire,
    old_pid: Option<u32>,
}

/// Connects to the running process and receives its sockets, and (from a
/// process of protocol 2) the running state to resume from.
pub(crate) async fn connect(
    path: &Path,
) -> anyhow::Result<(Taking, Inherited, Option<hopgate_control::Carried>)> {
    let path = path.to_path_buf();
    tokio::task::spawn_blocking(move || match receive(&path, VERSION)? {
        Received::Refused(why) if why == "BUSY unsupported protocol" => {
            tracing::info!(
                "upgrade: the running process speaks protocol 1; its state is not carried"
            );
            match receive(&path, 1)? {
                Received::Refused(why) => {
                    anyhow::bail!("--upgrade: the running process refused: {why}")
                }
                Received::Sockets(x) => Ok(*x),
            }
        }
        Received::Refused(why) => anyhow::bail!("--upgrade: the running process refused: {why}"),
        Received::Sockets(x) => Ok(*x),
    })
    .await?
}

/// What one `HELLO` got.
enum Received {
    Refused(String),
    Sockets(Box<(Taking, Inherited, Option<hopgate_control::Carried>)>),
}

/// One attempt at the handover with protocol `version`.
fn receive(path: &Path, version: u32) -> anyhow::Result<Received> {
    let s = StdUnixStream::connect(path).with_context(|| {
        format!(
            "--upgrade: no running hopgate answers on {} (upgrade.socket)",
            path.display()
        )
    })?;
    let old_pid = rustix::net::sockopt::socket_peercred(&s)
        .ok()
        .map(|c| c.pid.as_raw_nonzero().get() as u32);
    let mut wire = Wire::new(s, HANDOVER_BOUND)?;
    let step = |e: std::io::Error| anyhow::anyhow!("--upgrade: {}", io_why(&e));
    wire.send(&format!("HELLO {version} {}", std::process::id()))
        .map_err(step)?;
    let head = wire.line().map_err(step)?;
    let n: usize = match head.strip_prefix("FDS ") {
        Some(n) => n.parse().context("--upgrade: bad FDS line")?,
        None => return Ok(Received::Refused(head)),
    };
    let mut meta = Vec::with_capacity(n);
    let mut health = Vec::new();
    let mut carried = None;
    loop {
        let l = wire.line().map_err(step)?;
        if l == "END" {
            break;
        }
        if let Some(h) = l.strip_prefix("health\t") {
            health.extend(parse_health(h));
            continue;
        }
        if let Some(len) = l.strip_prefix("STATE ") {
            let len: usize = len.parse().context("--upgrade: bad STATE line")?;
            anyhow::ensure!(len <= MAX_STATE, "--upgrade: a STATE block of {len} bytes");
            let block = wire.block(len).map_err(step)?;
            carried = hopgate_control::Carried::from_json(&block)
                .inspect_err(|e| tracing::warn!(error = %e, "upgrade: the running state cannot be read; starting from the config file"))
                .ok();
            continue;
        }
        meta.push(parse_socket(&l)?);
    }
    anyhow::ensure!(
        meta.len() == n && wire.fds.len() == n,
        "--upgrade: expected {n} sockets, got {} descriptions and {} descriptors",
        meta.len(),
        wire.fds.len()
    );
    let socks = meta
        .into_iter()
        .zip(wire.fds.drain(..))
        .map(|((kind, configured, name), fd)| Handed {
            kind,
            name,
            configured: Some(configured),
            sock: std::net::TcpListener::from(fd),
        })
        .collect::<Vec<_>>();
    tracing::info!(
        sockets = socks.len(),
        old_pid,
        state = carried.is_some(),
        "upgrade: received the listening sockets"
    );
    Ok(Received::Sockets(Box::new((
        Taking { wire, old_pid },
        Inherited::handed_over(socks, health),
        carried,
    ))))
}

/// One socket line: kind, configured address, name.
fn parse_socket(l: &str) -> anyhow::Result<(Kind, SocketAddr, String)> {
    let mut parts = l.splitn(3, '\t');
    let (Some(kind), Some(addr), Some(name)) = (parts.next(), parts.next(), parts.next()) else {
        anyhow::bail!("--upgrade: bad socket line {l:?}");
    };
    let kind = Kind::parse(kind).with_context(|| format!("--upgrade: bad kind in {l:?}"))?;
    let addr: SocketAddr = addr
        .parse()
        .with_context(|| format!("--upgrade: bad address in {l:?}"))?;
    Ok((kind, addr, name.to_owned()))
}

impl Taking {
    /// Tells the old process why this one could not start; it keeps serving.
    pub(crate) async fn fail(mut self, why: String) {
        let _ = tokio::task::spawn_blocking(move || {
            let line = why.replace(['\n', '\r'], " ");
            let _ = self.wire.send(&format!("FAIL {line}"));
        })
        .await;
    }

    /// This process serves: tells the old one to drain, and waits until it
    /// has let go of the handover socket.
    pub(crate) async fn take_over(mut self) -> anyhow::Result<()> {
        let old_pid = self.old_pid;
        tokio::task::spawn_blocking(move || {
            self.wire
                .send("DRAIN")
                .and_then(|()| self.wire.line())
                .map_err(|e| anyhow::anyhow!("{}", io_why(&e)))
                .and_then(|l| {
                    if l == "DRAINING" {
                        Ok(())
                    } else {
                        Err(anyhow::anyhow!("unexpected answer {l:?}"))
                    }
                })
        })
        .await??;
        tracing::info!(
            old_pid,
            "upgrade: serving; the previous process is draining"
        );
        Ok(())
    }
}

// ----- the running process -----

/// The handover socket of the running process.
pub(crate) struct Server {
    path: PathBuf,
    /// Device and inode of the socket file this process created: it
    /// removes the file only while it is still that one.
    ident: (u64, u64),
    task: JoinHandle<()>,
}

/// The file at `path`, if it is the socket with this identity.
fn is_ours(path: &Path, ident: (u64, u64)) -> bool {
    std::fs::symlink_metadata(path).is_ok_and(|m| (m.dev(), m.ino()) == ident)
}

fn remove_if_ours(path: &Path, ident: (u64, u64)) {
    if is_ours(path, ident) {
        let _ = std::fs::remove_file(path);
    }
}

/// Binds the handover socket (mode 0600) at `path`, replacing a stale one
/// left by a process that died; `None` (logged) when the path is in use by
/// a live process or unusable: this process then runs without upgrades.
fn bind(path: &Path) -> Option<(StdUnixListener, (u64, u64))> {
    let shown = path.display();
    if let Ok(m) = std::fs::symlink_metadata(path) {
        if !m.file_type().is_socket() {
            tracing::warn!(path = %shown, "upgrade.socket: the path exists and is not a socket; binary upgrades are off for this process");
            return None;
        }
        match StdUnixStream::connect(path) {
            Ok(_) => {
                tracing::warn!(path = %shown, "upgrade.socket: another running process listens on it; binary upgrades are off for this process (give each instance its own upgrade.socket)");
                return None;
            }
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                tracing::info!(path = %shown, "upgrade.socket: removing a stale socket left by a process that is gone");
                let _ = std::fs::remove_file(path);
            }
            Err(e) => {
                tracing::warn!(path = %shown, error = %e, "upgrade.socket: cannot check the existing socket; binary upgrades are off for this process");
                return None;
            }
        }
    }
    // Bound under a temporary name, restricted, then renamed into place:
    // the socket is never reachable at its path with looser permissions.
    let name = path.file_name().map_or_else(
        || "hopgate-upgrade.sock".into(),
        |n| n.to_string_lossy().into_owned(),
    );
    let tmp = path.with_file_name(format!(".{name}.{}.tmp", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    let bound = StdUnixListener::bind(&tmp)
        .and_then(|l| {
            std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o600))?;
            std::fs::rename(&tmp, path)?;
            let m = std::fs::symlink_metadata(path)?;
            l.set_nonblocking(true)?;
            Ok((l, (m.dev(), m.ino())))
        })
        .inspect_err(|_| {
            let _ = std::fs::remove_file(&tmp);
        });
    match bound {
        Ok(b) => Some(b),
        Err(e) => {
            tracing::warn!(path = %shown, error = %e, "upgrade.socket: cannot listen; binary upgrades are off for this process");
            None
        }
    }
}

impl Server {
    /// Listens on `path`; `handed` fires once a new process has taken the
    /// sockets and this one must drain.
    pub(crate) fn start(
        path: &Path,
        source: HandoverSource,
        handed: oneshot::Sender<()>,
    ) -> Option<Server> {
        let (listener, ident) = bind(path)?;
        let listener = match tokio::net::UnixListener::from_std(listener) {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!(error = %e, "upgrade.socket: cannot listen; binary upgrades are off for this process");
                remove_if_ours(path, ident);
                return None;
            }
        };
        tracing::info!(path = %path.display(), "upgrade socket listening");
        let p = path.to_path_buf();
        let task = tokio::spawn(async move {
            loop {
                let stream = match listener.accept().await {
                    Ok((s, _)) => s,
                    Err(e) => {
                        tracing::warn!(error = %e, "upgrade socket: accept failed");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                };
                match hand_over(stream, &source).await {
                    // Another process checking whether the socket is live.
                    Ok(None) => {
                        tracing::debug!("upgrade socket: a connection closed without a word");
                    }
                    Ok(Some(wire)) => {
                        // Gone before the answer: the new process binds the path.
                        drop(listener);
                        remove_if_ours(&p, ident);
                        let _ = tokio::task::spawn_blocking(move || {
                            let mut wire = wire;
                            if let Err(e) = wire.send("DRAINING") {
                                tracing::warn!(error = %e, "upgrade: cannot confirm the drain to the new process");
                            }
                        })
                        .await;
                        let _ = handed.send(());
                        return;
                    }
                    Err(e) => {
                        tracing::error!(error = %format!("{e:#}"), "upgrade aborted; this process keeps serving");
                    }
                }
            }
        });
        Some(Server {
            path: path.to_path_buf(),
            ident,
            task,
        })
    }

    /// Stops listening and removes the socket file (shutdown).
    pub(crate) fn stop(self) {
        self.task.abort();
        remove_if_ours(&self.path, self.ident);
    }
}

/// One handover, up to the new process's `DRAIN`; the connection is
/// returned to confirm it. `None`: the peer closed without a word (another
/// process checking whether the socket is live, see [`bind`]).
async fn hand_over(
    stream: tokio::net::UnixStream,
    source: &HandoverSource,
) -> anyhow::Result<Option<Wire>> {
    let stream = stream.into_std()?;
    let peer = rustix::net::sockopt::socket_peercred(&stream)?;
    let me = rustix::process::geteuid();
    anyhow::ensure!(
        peer.uid == me || peer.uid.is_root(),
        "a process of uid {} connected to the upgrade socket; only uid {} (or root) may take the sockets",
        peer.uid.as_raw(),
        me.as_raw()
    );
    let mut wire = Wire::new(stream, LINE_TIMEOUT)?;
    let (hello, wire) = tokio::task::spawn_blocking(move || (wire.line(), wire)).await?;
    let mut wire = wire;
    let hello = match hello {
        Ok(h) => h,
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof && wire.buf.is_empty() => {
            return Ok(None)
        }
        Err(e) => anyhow::bail!("{}", io_why(&e)),
    };
    let (version, new_pid) = match hello.split(' ').collect::<Vec<_>>()[..] {
        ["HELLO", v, pid] if matches!(v.parse::<u32>(), Ok(1..=VERSION)) => {
            (v.parse::<u32>().unwrap_or(1), pid.to_owned())
        }
        _ => {
            let _ = wire.send("BUSY unsupported protocol");
            anyhow::bail!("unexpected greeting {hello:?}");
        }
    };
    tracing::info!(new_pid = %new_pid, "upgrade: a new process asks for the listening sockets");
    if let Some(n) = source.save_sessions().await {
        tracing::info!(
            bindings = n,
            "upgrade: session bindings saved for the new process"
        );
    }
    let socks = source.sockets().await?;
    let mut text = format!("FDS {}\n", socks.len());
    for (kind, configured, name, _) in &socks {
        text.push_str(&format!("{}\t{configured}\t{name}\n", kind.as_str()));
    }
    for (service, id, addr, health) in source.health() {
        let h = if health == Health::Healthy {
            "healthy"
        } else {
            "unhealthy"
        };
        text.push_str(&format!("health\t{service}\t{id}\t{addr}\t{h}\n"));
    }
    if version >= 2 {
        match source.carry().to_json() {
            Ok(state) => {
                text.push_str(&format!("STATE {}\n", state.len()));
                text.push_str(&state);
            }
            Err(e) => {
                tracing::warn!(error = %e, "upgrade: cannot write the running state; the new process starts from its config file")
            }
        }
    }
    text.push_str("END\n");
    let fds: Vec<OwnedFd> = socks.into_iter().map(|s| s.3).collect();
    let (sent, wire) = tokio::task::spawn_blocking(move || {
        let r = wire.send_with_fds(&text, &fds).and_then(|()| {
            // From here, the new process's start-up.
            wire.s.set_read_timeout(Some(START_BOUND))?;
            wire.line()
        });
        drop(fds);
        (r, wire)
    })
    .await?;
    let answer = sent.map_err(|e| {
        anyhow::anyhow!(
            "the new process (pid {new_pid}) stopped before taking over: {}",
            io_why(&e)
        )
    })?;
    if answer == "DRAIN" {
        tracing::info!(new_pid = %new_pid, "upgrade: the new process serves; draining this one");
        return Ok(Some(wire));
    }
    match answer.strip_prefix("FAIL ") {
        Some(why) => anyhow::bail!("the new process (pid {new_pid}) failed to start: {why}"),
        None => anyhow::bail!("unexpected answer from the new process: {answer:?}"),
    }
}

/// SIGUSR2: starts `hopgate run --upgrade` from the binary now installed at
/// this process's path, with the same config file, pid file and log format; its exit
/// status is logged if it ends early.
pub(crate) fn spawn_new(config: Option<&Path>, pid_file: Option<&Path>, log_format: &str) {
    let exe = match std::env::current_exe() {
        Ok(p) => {
            // The file this process runs was replaced by the new binary.
            let s = p.to_string_lossy();
            match s.strip_suffix(" (deleted)") {
                Some(orig) => PathBuf::from(orig),
                None => p,
            }
        }
        Err(e) => {
            tracing::error!(error = %e, "SIGUSR2: cannot find this binary's path; no upgrade");
            return;
        }
    };
    let mut cmd = std::process::Command::new(&exe);
    cmd.arg("--log-format")
        .arg(log_format)
        .arg("run")
        .arg("--upgrade");
    if let Some(c) = config {
        cmd.arg("--config").arg(c);
    }
    if let Some(p) = pid_file {
        cmd.arg("--pid-file").arg(p);
    }
    match cmd.spawn() {
        Ok(mut child) => {
            let pid = child.id();
            tracing::info!(exe = %exe.display(), pid, "SIGUSR2: started the new process");
            // Reaped by a thread of its own: tokio's child reaper would
            // cost every turn of the event loop (see the workspace's
            // tokio features).
            let waiter = std::thread::Builder::new()
                .name("hopgate-upgrade-wait".into())
                .spawn(move || {
                    if let Ok(status) = child.wait() {
                        if !status.success() {
                            tracing::error!(pid, %status, "SIGUSR2: the new process exited; this one keeps serving");
                        }
                    }
                });
            if let Err(e) = waiter {
                tracing::warn!(pid, error = %e, "SIGUSR2: no thread to wait for the new process; its exit status will not be logged");
            }
        }
        Err(e) => {
            tracing::error!(exe = %exe.display(), error = %e, "SIGUSR2: cannot start the new process; no upgrade")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_socket_path_sits_next_to_the_config_file() {
        let cfg = Path::new("/etc/hopgate/hopgate.yaml");
        assert_eq!(
            socket_path(None, None, Some(cfg)),
            Path::new("/etc/hopgate/hopgate-upgrade.sock")
        );
        assert_eq!(
            socket_path(Some(Path::new("run/up.sock")), Some("gw-1"), Some(cfg)),
            Path::new("/etc/hopgate/run/up.sock")
        );
        assert_eq!(
            socket_path(Some(Path::new("/run/hopgate/up.sock")), None, Some(cfg)),
            Path::new("/run/hopgate/up.sock")
        );
        // The embedded default (no file) and a bare file name: the working
        // directory.
        assert_eq!(
            socket_path(None, None, None),
            Path::new("hopgate-upgrade.sock")
        );
        assert_eq!(
            socket_path(None, None, Some(Path::new("hopgate.yaml"))),
            Path::new("hopgate-upgrade.sock")
        );
        // A named replica: its own socket, the id made safe for a file name.
        assert_eq!(
            socket_path(None, Some("gw-2"), Some(cfg)),
            Path::new("/etc/hopgate/hopgate-upgrade-gw-2.sock")
        );
        assert_eq!(
            socket_path(None, Some("a/b c"), None),
            Path::new("hopgate-upgrade-a_b_c.sock")
        );
    }

    /// What the handover relies on: the accept queue belongs to the socket,
    /// so a connection queued but not yet accepted survives the old
    /// process closing its descriptor, and the other descriptor accepts it.
    #[test]
    fn a_queued_connection_survives_closing_one_descriptor() {
        let old = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = old.local_addr().unwrap();
        let new = std::net::TcpListener::from(old.as_fd().try_clone_to_owned().unwrap());
        let mut client = std::net::TcpStream::connect(addr).unwrap();
        client.write_all(b"queued").unwrap();
        drop(old);
        let (mut served, _) = new.accept().unwrap();
        let mut buf = [0u8; 6];
        std::io::Read::read_exact(&mut served, &mut buf).unwrap();
        assert_eq!(&buf, b"queued");
        served.write_all(b"ok").unwrap();
        let mut answer = [0u8; 2];
        std::io::Read::read_exact(&mut client, &mut answer).unwrap();
        assert_eq!(&answer, b"ok");
    }

    #[test]
    fn descriptors_and_lines_cross_a_socket_pair() {
        let (a, b) = StdUnixStream::pair().unwrap();
        let mut tx = Wire::new(a, LINE_TIMEOUT).unwrap();
        let mut rx = Wire::new(b, LINE_TIMEOUT).unwrap();
        let l1 = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let l2 = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addrs = [l1.local_addr().unwrap(), l2.local_addr().unwrap()];
        let fds = vec![OwnedFd::from(l1), OwnedFd::from(l2)];
        tx.send_with_fds("FDS 2\nlistener\t127.0.0.1:0\tpublic\n", &fds)
            .unwrap();
        tx.send("END").unwrap();
        assert_eq!(rx.line().unwrap(), "FDS 2");
        assert_eq!(rx.line().unwrap(), "listener\t127.0.0.1:0\tpublic");
        assert_eq!(rx.line().unwrap(), "END");
        let got: Vec<SocketAddr> = rx
            .fds
            .drain(..)
            .map(|fd| std::net::TcpListener::from(fd).local_addr().unwrap())
            .collect();
        assert_eq!(got, addrs);
        drop(tx);
        assert_eq!(
            rx.line().unwrap_err().kind(),
            std::io::ErrorKind::UnexpectedEof
        );
    }
}
