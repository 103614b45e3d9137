//! Server settings, from memcached's command-line flags (`-p`, `-m`, `-o ...`).
//!
//! This is the plain data every part of the server reads; the parser that fills
//! it from argv is `net::cli` (memcached 1.6's `getopt_long` flags and `-o`
//! sub-options). Fields that only exist so `stats settings` can report what was
//! asked for (LRU tuning knobs cachalot does not need) are kept as given.

use std::path::PathBuf;

/// Which protocols a connection may speak (`-B`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProtocolChoice {
    Auto,
    Ascii,
    Binary,
}

impl ProtocolChoice {
    /// The name memcached prints in `stats settings` (`binding_protocol`).
    pub fn name(self) -> &'static str {
        match self {
            ProtocolChoice::Auto => "auto-negotiate",
            ProtocolChoice::Ascii => "ascii",
            ProtocolChoice::Binary => "binary",
        }
    }
}

#[derive(Clone, Debug)]
pub struct Settings {
    /// `-p` (0 = no TCP listener, as in memcached)
    pub port: u16,
    /// `-p -1`: bind an ephemeral port (memcached's test mode; the port is
    /// reported through `port_file`).
    pub port_ephemeral: bool,
    /// `$MEMCACHED_PORT_FILENAME`: where to write "TCP INET: <port>" lines
    /// once the listeners are bound (memcached's test-suite hook).
    pub port_file: Option<PathBuf>,
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
    /// `-o ext_threads`: threads that read the flash tier for parked GETs
    /// when the workers do not use io_uring.
    pub flash_readers: usize,
    /// `-o flash_io=uring|threads`: each worker reads flash through its own
    /// io_uring (where the kernel allows it) rather than reader threads.
    pub flash_uring: bool,
    /// `-o net_io=uring|epoll`: each worker reads its plain TCP connections
    /// through its own io_uring (where the kernel allows it) rather than
    /// waiting on epoll and reading each socket (issue 35).
    pub net_uring: bool,
    /// `-o zzone_demote_all=1`, a test knob (the differential tester's):
    /// after every command, every item of the N-zone is demoted to the
    /// Z-zone (`Cache::demote_all`), so commands read compressed blocks.
    pub zzone_demote_all: bool,
    /// `-R`
    pub reqs_per_event: usize,
    /// `-b` listen backlog
    pub backlog: i32,
    /// `-B`
    pub protocol: ProtocolChoice,
    /// `-o trace_file=PATH` and its `trace_*` options: a sampled trace of
    /// the requests (`capture`).
    pub trace: Option<crate::capture::TraceConfig>,
    /// `-o metrics_listen=HOST:PORT`: the Prometheus endpoint (`metrics`).
    pub metrics_listen: Option<String>,
    /// `-o hotkeys=0|1`: count requests per key in each worker for `stats
    /// hotkeys` (`hotkeys`; on by default).
    pub hotkeys: bool,
    /// `-o mrc=0|1`: keep the live miss-ratio curve of `stats mrc` (`mrc`;
    /// on by default).
    pub mrc: bool,
    /// `-Y`: the users a connection must authenticate as (text only).
    pub auth: Option<std::sync::Arc<crate::auth::AuthFile>>,
    /// `-o log_format=text|logfmt`: the shape of stderr's lines (`log`).
    pub log_format: crate::log::Format,
    /// `-e`: where items go at a clean shutdown and come back from at start
    /// (`cachalot_engine::warm`).
    pub memory_file: Option<PathBuf>,
    /// `-Z` and `-o ssl_*`.
    pub tls: crate::tls::TlsSettings,
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

    // --- Accepted for compatibility; reported by `stats settings`. ---
    /// `-D <char>`: prefix delimiter for per-prefix stats.
    pub prefix_delimiter: char,
    /// `-D` given: per-prefix stats collection on (`detail_enabled`).
    pub detail_enabled: bool,
    /// `-X` clears this (`stats cachedump` / `lru_crawler metadump` allowed).
    pub dump_enabled: bool,
    /// `-W` clears this (`watch` allowed).
    pub watch_enabled: bool,
    /// `-k`: lock all paged memory (mlockall).
    pub lock_memory: bool,
    /// `-r`: raise the core file limit to the maximum.
    pub enable_coredumps: bool,
    /// `-o maxconns_fast` (default on): reject over-limit connections at once.
    pub maxconns_fast: bool,
    /// `-o hashpower=N`: initial index size hint (0 = default).
    pub hashpower_init: u8,
    /// `-o hash_algorithm=` (reported only: the index always hashes with xxh3).
    pub hash_algorithm: String,
    /// `-o tail_repair_time=` (reported only).
    pub tail_repair_time: u64,
    /// `-o lru_crawler` / `no_lru_crawler`.
    pub lru_crawler: bool,
    /// `-o lru_crawler_sleep=` microseconds.
    pub lru_crawler_sleep: u64,
    /// `-o lru_crawler_tocrawl=`.
    pub lru_crawler_tocrawl: u64,
    /// `-o lru_maintainer` / `no_lru_maintainer`.
    pub lru_maintainer: bool,
    /// `-o hot_lru_pct=`.
    pub hot_lru_pct: u32,
    /// `-o warm_lru_pct=`.
    pub warm_lru_pct: u32,
    /// `-o hot_max_factor=`.
    pub hot_max_factor: f64,
    /// `-o warm_max_factor=`.
    pub warm_max_factor: f64,
    /// `-o temporary_ttl=`.
    pub temporary_ttl: u64,
    /// `-o slab_automove_ratio=`.
    pub slab_automove_ratio: f64,
    /// `-o slab_automove_window=`.
    pub slab_automove_window: u32,
    /// `-o watcher_logbuf_size=` in bytes (given in kilobytes).
    pub watcher_logbuf_size: usize,
    /// `-o worker_logbuf_size=` in bytes (given in kilobytes).
    pub worker_logbuf_size: usize,
    /// `-o read_buf_mem_limit=` in bytes (given in megabytes; 0 = unlimited).
    pub read_buf_mem_limit: usize,
    /// `-o track_sizes`.
    pub track_sizes: bool,
    /// `-o no_hashexpand` clears this.
    pub hash_expand: bool,
    /// `-o modern` given (nothing to change in 1.6).
    pub modern: bool,
}

impl Settings {
    /// Where the items in memory go at a clean stop and come back from at
    /// start: `-e`, else, with a flash tier, `<ext_path>.memory` beside its
    /// file, so that a clean stop keeps the whole cache, memory and flash
    /// (issue 32). Loaded once and removed, as `-e`'s file is.
    pub fn warm_file(&self) -> Option<PathBuf> {
        self.memory_file.clone().or_else(|| {
            let flash = self.engine.flash.as_ref()?;
            let mut p = flash.path.clone().into_os_string();
            p.push(".memory");
            Some(PathBuf::from(p))
        })
    }
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            port: 11211,
            port_ephemeral: false,
            port_file: None,
            listen: vec!["127.0.0.1".to_string()],
            unix_socket: None,
            unix_mask: 0o700,
            udp_port: 0,
            max_conns: 1024,
            threads: std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(4),
            flash_readers: 4,
            flash_uring: true,
            net_uring: true,
            zzone_demote_all: false,
            reqs_per_event: 20,
            backlog: 1024,
            protocol: ProtocolChoice::Auto,
            auth: None,
            log_format: Default::default(),
            memory_file: None,
            tls: Default::default(),
            metrics_listen: None,
            trace: None,
            shutdown_enabled: false,
            flush_enabled: true,
            verbose: 0,
            daemonize: false,
            pid_file: None,
            user: None,
            idle_timeout: 0,
            max_line: 2048,
            engine: cachalot_engine::Config::default(),
            prefix_delimiter: ':',
            detail_enabled: false,
            dump_enabled: true,
            watch_enabled: true,
            lock_memory: false,
            hotkeys: true,
            mrc: true,
            enable_coredumps: false,
            maxconns_fast: true,
            hashpower_init: 0,
            hash_algorithm: "murmur3".to_string(),
            tail_repair_time: 0,
            lru_crawler: true,
            lru_crawler_sleep: 100,
            lru_crawler_tocrawl: 0,
            lru_maintainer: true,
            hot_lru_pct: 20,
            warm_lru_pct: 40,
            hot_max_factor: 0.2,
            warm_max_factor: 2.0,
            temporary_ttl: 61,
            slab_automove_ratio: 0.8,
            slab_automove_window: 30,
            watcher_logbuf_size: 256 * 1024,
            worker_logbuf_size: 64 * 1024,
            read_buf_mem_limit: 0,
            track_sizes: false,
            hash_expand: true,
            modern: false,
        }
    }
}
