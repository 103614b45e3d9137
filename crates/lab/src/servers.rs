//! Local memcached and cachalot processes for `compare` and the lab's tests:
//! start one on a free 127.0.0.1 port with the given `-m`/`-t`, wait until it
//! answers `version`, read its `stats`, and kill it when dropped.
//!
//! The free port comes from memcached's own mechanism, which cachalot copies:
//! `-p -1` lets the kernel pick, and the server writes "TCP INET: <port>" to
//! `$MEMCACHED_PORT_FILENAME` (memcached.c, `server_socket`), so parallel
//! runs never race for a port. Both servers get the same flags: `-l 127.0.0.1
//! -U 0 -m MB -t T` (and `-u root` when we are root, which memcached requires).
//!
//! The helpers [`stats`] and [`detect_kind`] work on any server address, so
//! `replay` uses them too: cachalot answers `version` exactly as memcached
//! 1.6.18 does, but `stats settings` has a `cachalot_version` line.

use std::collections::BTreeMap;
use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use cachalot_protocol::client::request::text;
use cachalot_protocol::client::{Frame, Reply, ReplyParser};

/// Which server software.
#[derive(
    clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum ServerKind {
    Memcached,
    Cachalot,
}

impl ServerKind {
    pub fn name(self) -> &'static str {
        match self {
            ServerKind::Memcached => "memcached",
            ServerKind::Cachalot => "cachalot",
        }
    }
}

/// How to start a local server.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    pub kind: ServerKind,
    /// `-m`, megabytes.
    pub memory_mb: u64,
    /// `-t`, worker threads.
    pub threads: u32,
    /// More flags, appended as given (e.g. `-I 2m`).
    pub extra_args: Vec<String>,
    /// The cachalot binary (None: [`cachalot_bin`]'s default).
    pub cachalot_bin: Option<PathBuf>,
}

impl ServerConfig {
    pub fn new(kind: ServerKind, memory_mb: u64, threads: u32) -> ServerConfig {
        ServerConfig {
            kind,
            memory_mb,
            threads,
            extra_args: Vec::new(),
            cachalot_bin: None,
        }
    }
}

/// How long a server may take to start answering.
const START_TIMEOUT: Duration = Duration::from_secs(20);

/// A running local server, killed (and reaped) on drop.
pub struct LocalServer {
    child: Child,
    addr: SocketAddr,
    kind: ServerKind,
    bin: PathBuf,
    args: Vec<String>,
    log: PathBuf,
}

impl LocalServer {
    /// Start the server and wait until it answers `version`.
    pub fn start(cfg: &ServerConfig) -> anyhow::Result<LocalServer> {
        let bin = match cfg.kind {
            ServerKind::Memcached => memcached_bin()?,
            ServerKind::Cachalot => cachalot_bin(cfg.cachalot_bin.as_deref())?,
        };
        let mut args: Vec<String> = [
            "-p",
            "-1",
            "-l",
            "127.0.0.1",
            "-U",
            "0",
            "-m",
            &cfg.memory_mb.to_string(),
            "-t",
            &cfg.threads.to_string(),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        if is_root() {
            args.extend(["-u".to_string(), "root".to_string()]);
        }
        args.extend(cfg.extra_args.iter().cloned());

        let port_file = scratch_path("port");
        let log = scratch_path("stderr.log");
        let stderr =
            std::fs::File::create(&log).with_context(|| format!("creating {}", log.display()))?;
        let child = Command::new(&bin)
            .args(&args)
            .env("MEMCACHED_PORT_FILENAME", &port_file)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        let mut server = LocalServer {
            child,
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            kind: cfg.kind,
            bin,
            args,
            log,
        };
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if server.addr.port() == 0 {
                if let Some(port) = read_port_file(&port_file) {
                    server.addr.set_port(port);
                    let _ = std::fs::remove_file(&port_file);
                }
            }
            if server.addr.port() != 0 && version(server.addr).is_ok() {
                return Ok(server);
            }
            if let Ok(Some(status)) = server.child.try_wait() {
                let _ = std::fs::remove_file(&port_file);
                bail!(
                    "{} {:?} exited with {status} before answering; stderr:\n{}",
                    server.bin.display(),
                    server.args,
                    server.stderr()
                );
            }
            if Instant::now() > deadline {
                let _ = std::fs::remove_file(&port_file);
                bail!(
                    "{} {:?} did not answer within {START_TIMEOUT:?}; stderr:\n{}",
                    server.bin.display(),
                    server.args,
                    server.stderr()
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn kind(&self) -> ServerKind {
        self.kind
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The binary and arguments it was started with.
    pub fn command_line(&self) -> Vec<String> {
        std::iter::once(self.bin.display().to_string())
            .chain(self.args.iter().cloned())
            .collect()
    }

    /// Its `stats`.
    pub fn stats(&self) -> anyhow::Result<BTreeMap<String, String>> {
        stats(self.addr, "stats")
    }

    /// What it wrote to stderr so far.
    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for LocalServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.log);
    }
}

fn scratch_path(tag: &str) -> PathBuf {
    static N: AtomicUsize = AtomicUsize::new(0);
    std::env::temp_dir().join(format!(
        "cachalot-lab-{}-{}-{tag}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ))
}

/// The first port of a `MEMCACHED_PORT_FILENAME` file ("TCP INET: <port>").
fn read_port_file(path: &Path) -> Option<u16> {
    let text = std::fs::read_to_string(path).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix("TCP INET: "))
        .and_then(|p| p.trim().parse().ok())
        .filter(|p| *p != 0)
}

/// Whether this process runs as root (memcached then needs `-u root`): the
/// effective uid in /proc/self/status, Linux's view without libc.
pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .and_then(|u| u.split_whitespace().nth(1).map(|e| e == "0"))
        })
        .unwrap_or(false)
}

/// memcached from PATH or /usr/bin; installed with apt-get when missing and
/// we are root (the Debian package is what `compare` measures against).
/// A memcached other than 1.6.18 is used, with a warning ([`crate::oracle`]).
pub fn memcached_bin() -> anyhow::Result<PathBuf> {
    let bin = find_memcached()?;
    crate::oracle::check_oracle(&bin);
    Ok(bin)
}

fn find_memcached() -> anyhow::Result<PathBuf> {
    if let Some(p) = find_in_path("memcached") {
        return Ok(p);
    }
    // One install at a time (parallel tests would fight over dpkg's lock);
    // whoever waited finds it installed.
    static INSTALL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _guard = INSTALL.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(p) = find_in_path("memcached") {
        return Ok(p);
    }
    if is_root() {
        eprintln!("memcached not found: installing the Debian package");
        let _ = Command::new("apt-get")
            .args(["update", "-q"])
            .stdout(Stdio::null())
            .status();
        let status = Command::new("apt-get")
            .args(["install", "-y", "-q", "memcached"])
            .env("DEBIAN_FRONTEND", "noninteractive")
            .stdout(Stdio::null())
            .status()
            .context("running apt-get install memcached")?;
        if status.success() {
            if let Some(p) = find_in_path("memcached") {
                return Ok(p);
            }
        }
    }
    bail!("memcached not found in PATH or /usr/bin: install it (apt-get install memcached)")
}

fn find_in_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/bin"), PathBuf::from("/usr/local/bin")])
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// The cachalot binary: the one given, else `$CACHALOT_BIN`, else the
/// `cachalot` next to this executable (`target/<profile>/`, also from a test
/// binary in `target/<profile>/deps/`), else `target/release/cachalot`
/// beside that profile directory.
pub fn cachalot_bin(given: Option<&Path>) -> anyhow::Result<PathBuf> {
    if let Some(p) = given {
        if p.is_file() {
            return Ok(p.to_path_buf());
        }
        bail!("cachalot binary {} not found", p.display());
    }
    if let Some(p) = std::env::var_os("CACHALOT_BIN") {
        let p = PathBuf::from(p);
        if p.is_file() {
            return Ok(p);
        }
        bail!("CACHALOT_BIN={} is not a file", p.display());
    }
    let candidates = default_cachalot_candidates();
    candidates
        .iter()
        .find(|p| p.is_file())
        .cloned()
        .ok_or_else(|| {
            anyhow::anyhow!(
                "cachalot binary not found (looked at {candidates:?}): run \
             `cargo build --release -p cachalot`, or pass --cachalot-bin / set CACHALOT_BIN"
            )
        })
}

fn default_cachalot_candidates() -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Some(dir) = std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(Path::to_path_buf))
    {
        out.push(dir.join("cachalot"));
        if dir.file_name().is_some_and(|n| n == "deps") {
            if let Some(profile) = dir.parent() {
                out.push(profile.join("cachalot"));
            }
        }
        let profile = if dir.file_name().is_some_and(|n| n == "deps") {
            dir.parent().map(Path::to_path_buf)
        } else {
            Some(dir.clone())
        };
        if let Some(target) = profile.as_deref().and_then(Path::parent) {
            out.push(target.join("release").join("cachalot"));
        }
    }
    out.dedup();
    out
}

fn connect(addr: SocketAddr) -> anyhow::Result<TcpStream> {
    let s = TcpStream::connect_timeout(&addr, Duration::from_secs(2))
        .with_context(|| format!("connecting to {addr}"))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    s.set_write_timeout(Some(Duration::from_secs(10)))?;
    s.set_nodelay(true)?;
    Ok(s)
}

/// Send one command line (`version`, `stats settings`) and hand each reply
/// frame to `take` until it returns `Some`.
fn ask<T>(
    addr: SocketAddr,
    command: &str,
    mut take: impl FnMut(&Frame<'_>) -> anyhow::Result<Option<T>>,
) -> anyhow::Result<T> {
    let mut s = connect(addr)?;
    let mut req = Vec::new();
    text::line(&mut req, &[command.as_bytes()]);
    s.write_all(&req)?;
    let mut p = ReplyParser::new();
    loop {
        let f = p
            .pull_from(&mut s)
            .with_context(|| format!("{addr}: reading the reply to {command:?}"))?;
        if let Some(t) = take(&f)? {
            return Ok(t);
        }
    }
}

/// The bytes of a reply, for a message.
fn shown(f: &Frame<'_>) -> String {
    String::from_utf8_lossy(&f.raw[..f.raw.len().min(120)]).into_owned()
}

/// The `version` reply's version ("1.6.18").
pub fn version(addr: SocketAddr) -> anyhow::Result<String> {
    ask(addr, "version", |f| match f.reply {
        Reply::Line(l) if l.starts_with(b"VERSION ") => {
            Ok(Some(String::from_utf8_lossy(&l[8..]).into_owned()))
        }
        _ => bail!("{addr}: unexpected version reply {:?}", shown(f)),
    })
}

/// A `stats` command's `STAT name value` lines (`command` is "stats",
/// "stats settings", ...).
pub fn stats(addr: SocketAddr, command: &str) -> anyhow::Result<BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    ask(addr, command, |f| {
        if f.reply == Reply::Line(b"END") {
            return Ok(Some(std::mem::take(&mut out)));
        }
        let Some((k, v)) = f.reply.stat() else {
            bail!("{addr}: unexpected {command:?} reply {:?}", shown(f));
        };
        let text = |b| String::from_utf8_lossy(b).into_owned();
        out.insert(text(k), text(v));
        Ok(None)
    })
}

/// Memcached or cachalot, from `stats settings` (cachalot adds
/// `cachalot_version`; everything else looks like memcached 1.6.18).
pub fn detect_kind(addr: SocketAddr) -> anyhow::Result<ServerKind> {
    let settings = stats(addr, "stats settings")?;
    Ok(if settings.contains_key("cachalot_version") {
        ServerKind::Cachalot
    } else {
        ServerKind::Memcached
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn port_file_parsing() {
        let p = scratch_path("test-port");
        std::fs::write(&p, "TCP INET: 41234\nTCP INET6: 41235\n").unwrap();
        assert_eq!(read_port_file(&p), Some(41234));
        std::fs::write(&p, "UDP INET: 1\n").unwrap();
        assert_eq!(read_port_file(&p), None);
        std::fs::write(&p, "TCP INET: 0\n").unwrap();
        assert_eq!(read_port_file(&p), None);
        std::fs::remove_file(&p).unwrap();
    }

    /// memcached is part of this machine's test setup (scripts/install-deps.sh
    /// installs it); the test starts one, reads stats and checks -m and kind.
    #[test]
    fn memcached_starts_answers_and_stops() {
        let server = LocalServer::start(&ServerConfig::new(ServerKind::Memcached, 8, 1))
            .expect("start memcached");
        let addr = server.addr();
        let st = server.stats().unwrap();
        assert_eq!(
            st.get("limit_maxbytes").map(String::as_str),
            Some("8388608")
        );
        assert_eq!(st.get("threads").map(String::as_str), Some("1"));
        assert_eq!(detect_kind(addr).unwrap(), ServerKind::Memcached);
        let pid = server.pid();
        drop(server);
        // Killed and reaped: the pid is gone and the port refuses.
        assert!(!Path::new(&format!("/proc/{pid}")).exists());
        assert!(TcpStream::connect(addr).is_err());
    }
}
