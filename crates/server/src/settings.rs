//! Server settings, from memcached's command-line flags (`-p`, `-m`, `-o ...`).
//! Parsing lives in `net` for now; this is the plain data every part reads.

use std::path::PathBuf;

/// Which protocols a connection may speak (`-B`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProtocolChoice {
    Auto,
    Ascii,
    Binary,
}

#[derive(Clone, Debug)]
pub struct Settings {
    /// `-p`
    pub port: u16,
    /// `-l` (comma-separated in memcached; each one is listened on)
    pub listen: Vec<String>,
    /// `-s`
    pub unix_socket: Option<PathBuf>,
    /// `-a` permissions of the unix socket (octal)
    pub unix_mask: u32,
    /// `-U` (only 0 is supported: UDP off)
    pub udp_port: u16,
    /// `-c`
    pub max_conns: usize,
    /// `-t`
    pub threads: usize,
    /// `-R`
    pub reqs_per_event: usize,
    /// `-b` listen backlog
    pub backlog: i32,
    /// `-B`
    pub protocol: ProtocolChoice,
    /// `-A`
    pub shutdown_enabled: bool,
    /// `-F` disables flush_all
    pub flush_enabled: bool,
    /// `-v` count
    pub verbose: u8,
    /// `-d`
    pub daemonize: bool,
    /// `-P`
    pub pid_file: Option<PathBuf>,
    /// `-u`
    pub user: Option<String>,
    /// `-o idle_timeout=` seconds (0 = never)
    pub idle_timeout: u64,
    /// Maximum bytes of a request line without "\n" (memcached: 2048 for keys, more for meta).
    pub max_line: usize,
    /// The engine's settings (`-m -I -f -n -C -M -L`, `-o slab_*`).
    pub engine: cachalot_engine::Config,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            port: 11211,
            listen: vec!["127.0.0.1".to_string()],
            unix_socket: None,
            unix_mask: 0o700,
            udp_port: 0,
            max_conns: 1024,
            threads: std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(4),
            reqs_per_event: 20,
            backlog: 1024,
            protocol: ProtocolChoice::Auto,
            shutdown_enabled: false,
            flush_enabled: true,
            verbose: 0,
            daemonize: false,
            pid_file: None,
            user: None,
            idle_timeout: 0,
            max_line: 2048,
            engine: cachalot_engine::Config::default(),
        }
    }
}
