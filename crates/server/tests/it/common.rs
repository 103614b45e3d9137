//! Shared helper for end-to-end tests: run the real `cachalot` binary on a
//! free 127.0.0.1 port, wait until it accepts, and kill it when dropped.
//!
//! Which binary: `$CACHALOT_BIN` if set (scripts/test.sh points it at the
//! release build); otherwise `cachalot` next to this test executable's
//! `deps/` directory, i.e. `$CARGO_TARGET_DIR/<profile>/cachalot`, the one
//! `cargo build -p cachalot` produced for the same profile. Nothing is built
//! here (`env!("CARGO_BIN_EXE_cachalot")` only exists inside the cachalot
//! package), so build the binary before `cargo test -p cachalot-server`;
//! `cargo build --workspace` or scripts/test.sh do it.
//!
//! Port: unless the test passes `-p`, the server gets memcached's `-p -1`
//! (the kernel picks a free port) and reports it through
//! `MEMCACHED_PORT_FILENAME`, so tests running in parallel never collide.
//!
//! Arguments are appended after the helper's defaults (`-p -1 -l 127.0.0.1
//! -U 0 -u root`), each default only when the test did not give that flag. `-u root` is always passed unless the
//! test has `-u`: cachalot, like memcached, refuses to run as root without
//! it, and ignores it when not root.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// How long a server may take to start accepting.
const START_TIMEOUT: Duration = Duration::from_secs(15);

/// The `cachalot` binary under test (see the module comment).
pub fn cachalot_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("CACHALOT_BIN") {
        return PathBuf::from(p);
    }
    let exe = std::env::current_exe().expect("current_exe");
    // target/<profile>/deps/<test-binary> -> target/<profile>/cachalot
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("test binary lives in target/<profile>/deps");
    profile_dir.join("cachalot")
}

/// A unique scratch path in the temp dir (log files, unix sockets, pid files).
pub fn temp_path(tag: &str) -> PathBuf {
    static N: AtomicUsize = AtomicUsize::new(0);
    std::env::temp_dir().join(format!(
        "cachalot-test-{}-{}-{tag}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ))
}

/// A port that was free a moment ago (racy: prefer the helper's `-p -1`).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("bind 127.0.0.1:0")
}

fn has_flag(args: &[&str], short: &str, long: &str) -> bool {
    args.iter()
        .any(|a| a.starts_with(short) && !a.starts_with("--") || a.starts_with(long))
}

/// A running cachalot process, killed on drop.
pub struct Server {
    child: Child,
    addr: SocketAddr,
    unix: Option<PathBuf>,
    log: PathBuf,
    port_file: PathBuf,
}

/// Start `cachalot` with these extra arguments (panics if it does not come up).
pub fn spawn_server(args: &[&str]) -> Server {
    Server::start(args)
}

impl Server {
    /// Start `cachalot` with these extra arguments (panics if it does not come up).
    pub fn start(args: &[&str]) -> Server {
        Server::try_start(args).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Start and wait until it accepts; `Err` carries the exit status and
    /// stderr if it exited or timed out instead.
    ///
    /// Unless the test chose a port, the server is started with memcached's
    /// `-p -1` (any free port) and reports the port it bound through
    /// `MEMCACHED_PORT_FILENAME`, so parallel tests can never race for one.
    pub fn try_start(args: &[&str]) -> Result<Server, String> {
        let bin = cachalot_bin();
        if !bin.exists() {
            return Err(format!(
                "cachalot binary not found at {}: run `cargo build -p cachalot` \
                 (same profile) first, or set CACHALOT_BIN",
                bin.display()
            ));
        }
        let mut full: Vec<String> = Vec::new();
        let unix = args
            .iter()
            .position(|a| *a == "-s" || a.starts_with("--unix-socket"))
            .and_then(|i| {
                if let Some(v) = args[i].strip_prefix("--unix-socket=") {
                    Some(PathBuf::from(v))
                } else {
                    args.get(i + 1).map(PathBuf::from)
                }
            });
        let own_port = has_flag(args, "-p", "--port");
        if !own_port {
            full.extend(["-p".into(), "-1".into()]);
        }
        if !has_flag(args, "-l", "--listen") {
            full.extend(["-l".into(), "127.0.0.1".into()]);
        }
        if !has_flag(args, "-U", "--udp-port") {
            full.extend(["-U".into(), "0".into()]);
        }
        if !has_flag(args, "-u", "--user") {
            full.extend(["-u".into(), "root".into()]);
        }
        full.extend(args.iter().map(|s| s.to_string()));

        let log = temp_path("stderr.log");
        let port_file = temp_path("port");
        let stderr = std::fs::File::create(&log).map_err(|e| format!("log file: {e}"))?;
        let child = Command::new(&bin)
            .args(&full)
            .env("MEMCACHED_PORT_FILENAME", &port_file)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .map_err(|e| format!("spawn {}: {e}", bin.display()))?;
        let mut server = Server {
            child,
            addr: SocketAddr::from(([127, 0, 0, 1], port_from_args(&full).unwrap_or(0))),
            unix,
            log,
            port_file: port_file.clone(),
        };
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if server.unix.is_none() && !own_port && server.addr.port() == 0 {
                if let Some(port) = read_port_file(&port_file) {
                    server.addr.set_port(port);
                    let _ = std::fs::remove_file(&port_file);
                }
            }
            let up = match &server.unix {
                Some(path) => UnixStream::connect(path).is_ok(),
                None if server.addr.port() == 0 => false,
                None => {
                    TcpStream::connect_timeout(&server.addr, Duration::from_millis(200)).is_ok()
                }
            };
            if up {
                return Ok(server);
            }
            if let Ok(Some(status)) = server.child.try_wait() {
                return Err(format!(
                    "cachalot {full:?} exited with {status} before accepting; stderr:\n{}",
                    server.stderr()
                ));
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "cachalot {full:?} did not accept within {START_TIMEOUT:?}; stderr:\n{}",
                    server.stderr()
                ));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// The TCP address (127.0.0.1:port).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// A TCP connection with 10 s timeouts, so a hung server fails the test.
    pub fn connect(&self) -> TcpStream {
        let s = TcpStream::connect(self.addr).expect("connect to cachalot");
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.set_write_timeout(Some(Duration::from_secs(10))).unwrap();
        s
    }

    /// Send `request`, then read until the reply ends with `end` (or the
    /// server closes the connection); returns what was read.
    pub fn ask(&self, request: &[u8], end: &[u8]) -> Vec<u8> {
        let mut s = self.connect();
        s.write_all(request).unwrap();
        read_until(&mut s, end)
    }

    /// What the server wrote to stderr so far.
    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Whether the process has exited (and its status).
    pub fn try_wait(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// Wait up to `timeout` for the process to exit on its own.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        wait_child(&mut self.child, timeout)
    }

    /// A number from `stats [group]` (`group` "" for plain `stats`); 0 when
    /// absent. The group must be one the server knows: an unknown one
    /// answers `ERROR`, and this waits for the read timeout.
    pub fn stat(&self, group: &str, name: &str) -> u64 {
        let req = format!("stats {group}\r\n").replace("stats \r", "stats\r");
        let reply = self.ask(req.as_bytes(), b"END\r\n");
        String::from_utf8_lossy(&reply)
            .lines()
            .find_map(|l| {
                l.strip_prefix(&format!("STAT {name} "))?
                    .trim()
                    .parse()
                    .ok()
            })
            .unwrap_or(0)
    }

    /// Send a signal (e.g. libc::SIGTERM) with the `kill` command.
    pub fn signal(&self, name: &str) {
        let ok = Command::new("kill")
            .args([format!("-{name}"), self.pid().to_string()])
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        assert!(ok, "kill -{name} {}", self.pid());
    }
}

/// Wait up to `timeout` for `child` to exit on its own (polling its
/// status); None if it is still running then.
pub fn wait_child(child: &mut Child, timeout: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Ok(Some(s)) = child.try_wait() {
            return Some(s);
        }
        if Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Read until the data ends with `end`, EOF, or the socket's timeout.
pub fn read_until(s: &mut impl Read, end: &[u8]) -> Vec<u8> {
    read_until_whole(s, |out| out.ends_with(end))
}

/// Read until `whole` says what came is a whole reply, or the stream ends
/// (or times out).
pub fn read_until_whole(s: &mut impl Read, whole: impl Fn(&[u8]) -> bool) -> Vec<u8> {
    let mut out = Vec::new();
    let mut buf = [0u8; 65536];
    while !whole(&out) {
        match read_some(s, &mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => out.extend_from_slice(&buf[..n]),
        }
    }
    out
}

/// One `read`, retried on EINTR: a socket with a timeout returns EINTR on
/// Linux when the process was stopped and continued, even without handlers
/// (signal(7)), and test processes do get stopped under load.
pub fn read_some(s: &mut impl Read, buf: &mut [u8]) -> std::io::Result<usize> {
    loop {
        match s.read(buf) {
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            other => return other,
        }
    }
}

/// A process's resident memory (`VmRSS`), in bytes.
pub fn rss_bytes(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .expect("read /proc/<pid>/status")
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .expect("VmRSS in /proc/<pid>/status")
        * 1024
}

/// The first port in a `MEMCACHED_PORT_FILENAME` file ("TCP INET: <port>").
pub fn read_port_file(path: &Path) -> Option<u16> {
    std::fs::read_to_string(path)
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("TCP INET: "))
        .and_then(|p| p.trim().parse().ok())
}

/// The `-p` value in an argument list (last one wins).
fn port_from_args(args: &[String]) -> Option<u16> {
    let mut port = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if a == "-p" || a == "--port" {
            port = it.next().and_then(|v| v.parse().ok());
        } else if let Some(v) = a.strip_prefix("--port=") {
            port = v.parse().ok();
        } else if let Some(v) = a.strip_prefix("-p") {
            if !v.is_empty() {
                port = v.parse().ok();
            }
        }
    }
    port
}

impl Drop for Server {
    fn drop(&mut self) {
        if std::thread::panicking() {
            // The server's side of the story helps explain a failed test.
            eprintln!("--- cachalot stderr ---\n{}", self.stderr());
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.log);
        let _ = std::fs::remove_file(&self.port_file);
    }
}

/// The Python with the suite's packages: `$CACHALOT_PYTHON`, else the
/// `.venv` scripts/install-deps.sh makes, else `python3`.
pub fn python() -> PathBuf {
    if let Some(p) = std::env::var_os("CACHALOT_PYTHON").filter(|p| !p.is_empty()) {
        return PathBuf::from(p);
    }
    let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.venv/bin/python");
    if venv.exists() {
        venv
    } else {
        PathBuf::from("python3")
    }
}

/// The lab's oracle check (one file for both crates, std only).
#[path = "../../../lab/src/oracle.rs"]
mod oracle;

/// The memcached binary: `$MEMCACHED_BIN` or the Debian package's. Missing
/// is a failure, not a skip: the tests that use it are oracle checks. One
/// that is not memcached 1.6.18 is used, with a warning on stderr
/// (`crates/lab/src/oracle.rs`).
pub fn memcached_bin() -> PathBuf {
    let bin = std::env::var_os("MEMCACHED_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/bin/memcached"));
    assert!(
        bin.exists(),
        "memcached not found at {}: the oracle tests need memcached 1.6 \
         (Debian: `apt-get install memcached`, or run scripts/install-deps.sh), \
         or set MEMCACHED_BIN",
        bin.display()
    );
    oracle::check_oracle(&bin);
    bin
}

/// A running memcached on a free port, killed on drop.
pub struct Memcached {
    child: Child,
    addr: SocketAddr,
}

impl Memcached {
    pub fn start(flags: &[&str]) -> Memcached {
        let port_file = temp_path("memcached-port");
        let child = Command::new(memcached_bin())
            .args(["-p", "-1", "-U", "0", "-l", "127.0.0.1", "-u", "root"])
            .args(flags)
            .env("MEMCACHED_PORT_FILENAME", &port_file)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn memcached");
        let mut m = Memcached {
            child,
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
        };
        let deadline = Instant::now() + Duration::from_secs(15);
        while m.addr.port() == 0 || std::net::TcpStream::connect(m.addr).is_err() {
            if let Some(p) = read_port_file(&port_file) {
                m.addr.set_port(p);
            }
            if let Ok(Some(status)) = m.child.try_wait() {
                panic!("memcached {flags:?} exited with {status}");
            }
            assert!(Instant::now() < deadline, "memcached did not start");
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = std::fs::remove_file(&port_file);
        m
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Send a signal (`kill -<name>`) and wait up to `timeout` for the exit.
    pub fn stop_with(&mut self, name: &str, timeout: Duration) -> Option<ExitStatus> {
        let ok = Command::new("kill")
            .args([format!("-{name}"), self.child.id().to_string()])
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        assert!(ok, "kill -{name} memcached");
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }
}

impl Drop for Memcached {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
