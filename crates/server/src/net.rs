//! The network server: start-up (memcached's command line, privileges,
//! daemonizing, pid file), the acceptor, the worker event loops and shutdown.
//!
//! Threads, as in memcached 1.6: one acceptor (the "dispatcher") that takes
//! new connections from every listener and hands them round robin to `-t`
//! workers, each running its own mio event loop; a clock thread (memcached's
//! `clock_handler`) and a maintenance thread that gives the engine a little
//! background time (memcached's LRU crawler / maintainer / slab rebalancer).
//! A single acceptor was chosen over SO_REUSEPORT listeners in every worker:
//! the kernel's reuseport hashing can pile many connections on one worker,
//! while round robin keeps them even, and `-c` stays a simple counter.

pub mod cli;
pub mod conn;
pub mod exit;
pub mod flash_io;
pub mod flash_read;
pub mod listener;
pub mod os;
pub mod ring;
pub mod uring;
pub mod worker;

use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use cachalot_engine::{Cache, Clock};
use mio::{Events, Interest, Poll, Token};

use self::cli::Action;
use self::conn::Stream;
use self::exit::{EX_OSERR, EX_USAGE};
use self::listener::Listener;
use self::worker::{NewConn, Worker, WorkerHandle};
use crate::log::{self, Level};
use crate::owner::{self, Owned};
use crate::settings::Settings;
use crate::stats::{ConnEntry, ConnState, Shared, ThreadStats};

/// memcached's reply to a connection over the `-c` limit.
const TOO_MANY_CONNS: &[u8] = b"ERROR Too many open connections\r\n";
/// How often the acceptor looks at the shutdown flags.
const ACCEPT_TICK: Duration = Duration::from_millis(50);
/// Engine chunks visited per `maintain` call; small so the lock is brief
/// (each may be an eviction or a demotion: at 512, the maintainer's holds
/// reached 1 ms during a fill, issue 34). A call also stops after
/// `MAINTAIN_SLICE` of work (a third of its budget when it demotes): not
/// made up with more calls, as each hold costs the maintainer two system
/// calls for its priority (`crate::priority`), and four times the calls
/// made them 1.4% of the server's CPU on YCSB-B (`perf`); the stores
/// drain a page in transit too.
const MAINTAIN_BUDGET: usize = 64;
/// The engine counts its slices (`Cache::maintain_slices`) in 512 chunks.
const CALLS_PER_SLICE: usize = 512 / MAINTAIN_BUDGET;
/// Trim the heap once this many connections closed since the last high mark.
const TRIM_AFTER_CLOSED: usize = 1000;

/// Entry point of the `cachalot` binary (argv including the program name).
pub fn main_with_args(args: Vec<OsString>) -> i32 {
    let args: Vec<String> = args
        .into_iter()
        .skip(1)
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let parsed = match cli::parse(&args) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("{}", e.message);
            return e.code;
        }
    };
    for w in &parsed.warnings {
        eprintln!("{w}");
    }
    match parsed.action {
        Action::Help => {
            print!("{}", cli::usage());
            0
        }
        Action::Version => {
            println!("{}", cli::version());
            0
        }
        Action::License => {
            println!("{}", cli::license());
            0
        }
        Action::Run(settings) => run(*settings),
    }
}

/// Start a server from parsed settings and serve until shutdown (the
/// `shutdown` command, SIGTERM or SIGINT). Returns the exit code.
pub fn run(mut settings: Settings) -> i32 {
    // Process-level set-up happens first, while there is only one thread
    // (fork and setuid are unsafe in a threaded process).
    os::return_large_frees();
    let fds_needed = settings.max_conns as u64 + 64 + 4 * settings.threads as u64;
    if let Err((msg, code)) = os::ensure_nofile(fds_needed) {
        eprintln!("{msg}");
        return code;
    }
    if settings.enable_coredumps {
        if let Err(e) = os::raise_core_limit() {
            eprintln!("failed to ensure corefile creation: {e}");
            return EX_OSERR;
        }
    }
    if let Err((msg, code)) = os::drop_privileges(settings.user.as_deref()) {
        eprintln!("{msg}");
        return code;
    }
    if let Some(path) = std::env::var_os("MEMCACHED_PORT_FILENAME") {
        settings.port_file = Some(PathBuf::from(path));
    }
    if settings.daemonize {
        // The daemon changes directory to "/": keep relative paths meaningful.
        for p in [
            &mut settings.pid_file,
            &mut settings.unix_socket,
            &mut settings.port_file,
            &mut settings.memory_file,
        ]
        .into_iter()
        .flatten()
        {
            if let Ok(abs) = std::path::absolute(&*p) {
                *p = abs;
            }
        }
        if let Some(t) = &mut settings.trace {
            if let Ok(abs) = std::path::absolute(&t.path) {
                t.path = abs;
            }
        }
        if let Err(e) = os::daemonize(settings.enable_coredumps, settings.verbose > 0) {
            eprintln!("failed to daemon() in order to daemonize: {e}");
            return EX_OSERR;
        }
    }
    if settings.lock_memory {
        if let Err(e) = os::lock_memory() {
            eprintln!(
                "warning: -k invalid, mlockall() failed: {e}\n\
                 Proceeding without locking memory"
            );
        }
    }

    // Signals are caught before anything listens, so a SIGTERM sent as soon
    // as the port answers still means a clean shutdown.
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        if let Err(e) = signal_hook::flag::register(sig, stop.clone()) {
            eprintln!("failed to install signal handler: {e}");
        }
    }
    // memcached survives SIGHUP (and SIGUSR1 without a memory file): a
    // closed terminal must not take the cache down. With `-e`, SIGUSR1 is
    // memcached's graceful stop for a restart.
    let ignored = Arc::new(AtomicBool::new(false));
    let usr1 = match settings.memory_file {
        Some(_) => stop.clone(),
        None => ignored.clone(),
    };
    let _ = signal_hook::flag::register(signal_hook::consts::SIGHUP, ignored);
    let _ = signal_hook::flag::register(signal_hook::consts::SIGUSR1, usr1);
    let pid_file = settings.pid_file.clone();
    let server = match Server::start_with_stop(settings, stop) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("{}", e.message);
            return e.code;
        }
    };
    let verbose = server.settings.verbose;
    server.wait();
    if let Some(path) = &pid_file {
        let _ = std::fs::remove_file(path);
    }
    if verbose > 1 {
        eprintln!("Exiting normally");
    }
    0
}

/// A start-up failure: the message for stderr and memcached's exit code.
#[derive(Debug)]
pub struct StartError {
    pub message: String,
    pub code: i32,
}

/// A running server (engine, listeners and threads). `run` drives one for the
/// binary; tests can start one in-process.
pub struct Server {
    settings: Arc<Settings>,
    shared: Arc<Shared>,
    cache: Arc<Cache>,
    stop: Arc<AtomicBool>,
    tcp_addrs: Vec<SocketAddr>,
    unix_path: Option<PathBuf>,
    acceptor: Option<JoinHandle<()>>,
    workers: Vec<JoinHandle<()>>,
    background: Vec<JoinHandle<()>>,
    readers: Option<Arc<flash_io::Readers>>,
    /// With `-o trace_file`: the trace writer, which ends the file once the
    /// workers have stopped.
    capture_writer: Option<JoinHandle<()>>,
    /// The flash and `-e` files this process holds (`owner`), kept until
    /// the server is dropped.
    _owned: Vec<Owned>,
}

impl Server {
    /// Build the engine, bind the listeners and start every thread.
    pub fn start(settings: Settings) -> Result<Server, StartError> {
        Server::start_with_stop(settings, Arc::new(AtomicBool::new(false)))
    }

    /// `start`, stopping when `stop` becomes true (e.g. set by a signal).
    pub fn start_with_stop(
        settings: Settings,
        stop: Arc<AtomicBool>,
    ) -> Result<Server, StartError> {
        // Before the engine reads or writes a file, and before any port.
        let owned = take_files(&settings)?;
        let clock = Arc::new(Clock::new());
        let mut engine = settings.engine.clone();
        if settings.hotkeys {
            engine.observer_bytes += settings.threads * crate::hotkeys::SKETCH_BYTES;
        }
        if settings.mrc {
            engine.observer_bytes +=
                crate::mrc::Curve::memory_bytes(engine.memory_limit, settings.detail_enabled);
        }
        if settings.detail_enabled {
            engine.observer_bytes += crate::prefixes::memory_bytes(settings.threads);
        }
        let cache = Cache::new(engine, clock.clone()).map_err(|e| StartError {
            message: format!("{e}"),
            code: EX_USAGE,
        })?;
        let cache = Arc::new(cache);
        // Certificates are loaded before anything listens (memcached's order
        // and exit code).
        let tls = match settings.tls.enabled {
            true => Some(Arc::new(
                crate::tls::Tls::new(&settings.tls, clock.now()).map_err(|message| StartError {
                    message,
                    code: EX_USAGE,
                })?,
            )),
            false => None,
        };
        // A warm restart's items are back before anyone can ask for them.
        if let Some(path) = settings.warm_file() {
            warm_load(&cache, &path, &settings)?;
        }
        let listeners = listener::bind_all(&settings).map_err(|e| StartError {
            message: e.message,
            code: e.code,
        })?;
        if listeners.is_empty() && settings.verbose > 0 {
            eprintln!("WARNING: no listening sockets (-p 0 without -s)");
        }
        // The trace file is opened once the ports are bound (a server that
        // cannot start leaves an earlier trace alone) and before anything
        // is accepted; a path that cannot be written stops the start: a
        // capture asked for and not made would go unnoticed.
        let capture = match &settings.trace {
            Some(t) => Some(
                crate::capture::Capture::start(t.clone()).map_err(|e| StartError {
                    message: format!("failed to open trace_file {}: {e}", t.path.display()),
                    code: exit::EXIT_FAILURE,
                })?,
            ),
            None => None,
        };
        let (capture, capture_writer) = match capture {
            Some((c, w)) => (Some(c), Some(w)),
            None => (None, None),
        };
        if let Some(path) = &settings.pid_file {
            // Written once the sockets are bound but before anything is
            // accepted, so whoever sees the port open can read the pid.
            // memcached warns and carries on when it cannot be written.
            if let Err(e) = std::fs::write(path, format!("{}\n", std::process::id())) {
                eprintln!(
                    "Could not open the pid file {} for writing: {e}",
                    path.display()
                );
            }
        }
        let tcp_addrs: Vec<SocketAddr> = listeners
            .iter()
            .filter_map(|l| match l {
                Listener::Tcp { addr, .. } => Some(*addr),
                Listener::Unix { .. } => None,
            })
            .collect();
        // Bound before the port file says the server is up.
        let metrics = match &settings.metrics_listen {
            Some(addr) => Some(crate::metrics::bind(addr).map_err(|e| StartError {
                message: format!("failed to listen on metrics_listen={addr}: {e}"),
                code: exit::EXIT_FAILURE,
            })?),
            None => None,
        };
        if let Some(path) = &settings.port_file {
            write_port_file(path, &tcp_addrs);
        }
        let unix_path = listeners.iter().find_map(|l| match l {
            Listener::Unix { path, .. } => Some(path.clone()),
            Listener::Tcp { .. } => None,
        });

        let threads: Vec<Arc<ThreadStats>> = (0..settings.threads)
            .map(|_| {
                Arc::new(ThreadStats {
                    hot: match settings.hotkeys {
                        true => crate::hotkeys::Sketch::new(&clock),
                        false => crate::hotkeys::Sketch::default(),
                    },
                    ..ThreadStats::default()
                })
            })
            .collect();
        let shared = Arc::new(Shared {
            threads: threads.clone(),
            tls,
            prefixes: crate::prefixes::Registry::new(
                settings.prefix_delimiter,
                settings.detail_enabled,
            ),
            mrc: settings
                .mrc
                .then(|| crate::mrc::Curve::new(settings.engine.memory_limit, clock.now())),
            capture,
            ..Shared::default()
        });
        shared.verbosity.store(settings.verbose, Ordering::Relaxed);
        cache.set_eviction_tap(shared.prefixes.tap());
        // Reader threads only where the workers cannot have their own
        // io_uring (refused by the kernel, or `-o flash_io=threads`).
        let mut settings = settings;
        settings.flash_uring &= ring::available();
        settings.net_uring &= uring::available();
        let settings = Arc::new(settings);
        let clients = Arc::new(AtomicUsize::new(0));
        let io_err = |e: std::io::Error| StartError {
            message: format!("failed to start worker threads: {e}"),
            code: EX_OSERR,
        };

        let uring = settings.flash_uring;
        let readers = match cache.has_flash() && !uring {
            true => Some(Arc::new(
                flash_io::Readers::start(cache.clone(), settings.flash_readers).map_err(io_err)?,
            )),
            false => None,
        };
        let mut handles = Vec::new();
        let mut workers = Vec::new();
        for (i, stats) in threads.into_iter().enumerate() {
            let (worker, handle) = Worker::new(
                cache.clone(),
                settings.clone(),
                shared.clone(),
                stats,
                clients.clone(),
                readers.clone(),
                uring,
            )
            .map_err(io_err)?;
            handles.push(handle);
            workers.push(
                std::thread::Builder::new()
                    .name(format!("worker-{i}"))
                    .spawn(move || worker.run())
                    .map_err(io_err)?,
            );
        }

        let mut background = Vec::new();
        let spawn = |name: &str, f: fn(&Cache, &Clock, &Shared, &AtomicBool)| {
            let (cache, clock, shared, stop) =
                (cache.clone(), clock.clone(), shared.clone(), stop.clone());
            std::thread::Builder::new()
                .name(name.into())
                .spawn(move || f(&cache, &clock, &shared, &stop))
                .map_err(io_err)
        };
        background.push(spawn("clock", |_, clock, shared, stop| {
            clock_thread(clock, shared, stop)
        })?);
        background.push(spawn("maintainer", |cache, _, shared, stop| {
            maintainer_thread(cache, shared, stop)
        })?);
        if cache.start_zone_writer() {
            background.push(spawn("zone-writer", |cache, _, shared, stop| {
                zone_writer_thread(cache, shared, stop)
            })?);
        }
        if cache.has_flash() {
            background.push(spawn("flash-writer", |cache, _, shared, stop| {
                flash_writer_thread(cache, shared, stop)
            })?);
        }
        if let Some(listener) = metrics {
            let (cache, settings, shared, stop) = (
                cache.clone(),
                settings.clone(),
                shared.clone(),
                stop.clone(),
            );
            background.push(
                std::thread::Builder::new()
                    .name("metrics".into())
                    .spawn(move || crate::metrics::serve(listener, cache, settings, shared, stop))
                    .map_err(io_err)?,
            );
        }

        let acceptor = Acceptor {
            poll: Poll::new().map_err(io_err)?,
            listeners,
            workers: handles,
            next: 0,
            settings: settings.clone(),
            shared: shared.clone(),
            stop: stop.clone(),
            clients,
        };
        let acceptor = std::thread::Builder::new()
            .name("acceptor".into())
            .spawn(move || acceptor.run())
            .map_err(io_err)?;

        Ok(Server {
            settings,
            shared,
            cache,
            stop,
            tcp_addrs,
            unix_path,
            acceptor: Some(acceptor),
            workers,
            background,
            readers,
            capture_writer,
            _owned: owned,
        })
    }

    /// The TCP addresses actually bound (useful with `-l host:0`).
    pub fn tcp_addrs(&self) -> &[SocketAddr] {
        &self.tcp_addrs
    }

    pub fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    pub fn cache(&self) -> &Arc<Cache> {
        &self.cache
    }

    /// A flag that stops the server when set (signal handlers set it).
    pub fn stop_flag(&self) -> Arc<AtomicBool> {
        self.stop.clone()
    }

    /// Ask the server to stop; `wait` then returns.
    pub fn shutdown(&self) {
        self.stop.store(true, Ordering::SeqCst);
    }

    /// Block until the server has stopped and every thread has exited, then
    /// remove the unix socket file.
    pub fn wait(mut self) {
        if let Some(a) = self.acceptor.take() {
            let _ = a.join();
        }
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
        // Every worker has handed over its last events.
        if let (Some(c), Some(w)) = (&self.shared.capture, self.capture_writer.take()) {
            c.close();
            let _ = w.join();
        }
        if let Some(r) = &self.readers {
            r.stop();
        }
        self.stop.store(true, Ordering::SeqCst);
        for b in self.background.drain(..) {
            b.thread().unpark();
            let _ = b.join();
        }
        if let Some(path) = self.settings.warm_file() {
            // Every thread that changes items has stopped.
            let started = std::time::Instant::now();
            let format = self.settings.log_format;
            let file = path.display();
            match cachalot_engine::warm::save(&self.cache, &path) {
                Ok(s) if self.settings.verbose > 0 => {
                    let secs = started.elapsed().as_secs_f64();
                    log::emit(
                        format,
                        Level::Info,
                        "warm_saved",
                        format_args!(
                            "warm restart: saved {} items ({} bytes) to {file} in {secs:.3} s",
                            s.items, s.bytes
                        ),
                        &[
                            ("items", &s.items),
                            ("bytes", &s.bytes),
                            ("file", &file),
                            ("secs", &secs),
                        ],
                    );
                }
                Ok(_) => {}
                Err(e) => log::emit(
                    format,
                    Level::Error,
                    "warm_save_failed",
                    format_args!("warm restart: could not save to {file}: {e}"),
                    &[("file", &file), ("error", &e)],
                ),
            }
        }
        if let Some(path) = &self.unix_path {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// Hold the flash file and the `-e` file for this process (`owner`): a
/// second server on either refuses to start, with memcached's exit code 1.
fn take_files(settings: &Settings) -> Result<Vec<Owned>, StartError> {
    let refuse = |message| StartError {
        message,
        code: exit::EXIT_FAILURE,
    };
    let mut owned = Vec::new();
    if let Some(flash) = &settings.engine.flash {
        let held = Owned::take(&flash.path)
            .map_err(|e| refuse(owner::refusal("ext_path", &flash.path, &e)))?;
        owned.push(held);
    }
    // Without -e, the warm file is `<ext_path>.memory`, the flash file's.
    if let Some(file) = &settings.memory_file {
        let lock = owner::warm_lock_path(file);
        let held =
            Owned::take(&lock).map_err(|e| refuse(owner::refusal("memory file (-e)", file, &e)))?;
        owned.push(held);
    }
    Ok(owned)
}

/// Load what the last clean shutdown saved with `-e` (nothing on a first
/// start). A file that is not ours stops start-up rather than being
/// overwritten at the next shutdown.
fn warm_load(cache: &Cache, path: &std::path::Path, settings: &Settings) -> Result<(), StartError> {
    let started = std::time::Instant::now();
    let s = cachalot_engine::warm::load(cache, path).map_err(|e| StartError {
        message: format!("warm restart: cannot load {}: {e}", path.display()),
        code: exit::EXIT_FAILURE,
    })?;
    let (format, file) = (settings.log_format, path.display());
    if s.damaged {
        log::emit(
            format,
            Level::Warn,
            "warm_damaged",
            format_args!(
                "warm restart: {file} is damaged; loaded the {} items of its sound parts \
                 ({} damaged pages skipped)",
                s.items, s.bad_pages
            ),
            &[
                ("file", &file),
                ("items", &s.items),
                ("bad_pages", &s.bad_pages),
            ],
        );
    }
    if settings.verbose > 0 && (s.items > 0 || s.skipped > 0) {
        let secs = started.elapsed().as_secs_f64();
        log::emit(
            format,
            Level::Info,
            "warm_loaded",
            format_args!(
                "warm restart: loaded {} items ({} bytes) from {file} in {secs:.3} s; \
                 {} expired or not taken",
                s.items, s.bytes, s.skipped
            ),
            &[
                ("items", &s.items),
                ("bytes", &s.bytes),
                ("skipped", &s.skipped),
                ("file", &file),
                ("secs", &secs),
            ],
        );
    }
    Ok(())
}

/// memcached's `MEMCACHED_PORT_FILENAME`: one "TCP INET: <port>" line per TCP
/// listener, written to "<file>.lck" and renamed so readers never see half.
fn write_port_file(path: &std::path::Path, addrs: &[SocketAddr]) {
    let text: String = addrs
        .iter()
        .map(|a| format!("TCP INET: {}\n", a.port()))
        .collect();
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".lck");
    let res = std::fs::write(&tmp, text).and_then(|_| std::fs::rename(&tmp, path));
    if let Err(e) = res {
        eprintln!("Failed to write port file {}: {e}", path.display());
    }
}

/// Whether either stop source fired (signal / `Server::shutdown`, or the
/// `shutdown` command which sets `Shared::shutdown`).
fn stopping(stop: &AtomicBool, shared: &Shared) -> bool {
    stop.load(Ordering::Relaxed) || shared.shutdown.load(Ordering::Relaxed)
}

/// memcached's `clock_handler`: the engine reads time from an atomic that
/// this thread advances (every 100 ms, so expiry is never late by a second).
fn clock_thread(clock: &Clock, shared: &Shared, stop: &AtomicBool) {
    while !stopping(stop, shared) {
        clock.tick();
        std::thread::park_timeout(Duration::from_millis(100));
    }
}

/// Background engine work a few times a second, in small slices so a
/// request never waits long for the engine lock.
fn maintainer_thread(cache: &Cache, shared: &Shared, stop: &AtomicBool) {
    cachalot_engine::holds::background_thread();
    cachalot_engine::priority::raised_holds();
    let mut logging = false;
    let mut hot_sent = Instant::now();
    while !stopping(stop, shared) {
        // The live curve's level: the whole cache's GETs and misses.
        if let Some(curve) = &shared.mrc {
            let sum = |f: fn(&ThreadStats) -> &std::sync::atomic::AtomicU64| -> u64 {
                shared
                    .threads
                    .iter()
                    .map(|t| f(t).load(Ordering::Relaxed))
                    .sum()
            };
            let (hits, misses) = (sum(|t| &t.get_hits), sum(|t| &t.get_misses));
            curve.count_totals(hits + misses, misses, cache.clock().now());
        }
        // `stats prefixes`: a few steps of the walk over every item.
        if shared.prefixes.enabled() {
            shared.prefixes.walk_turn(cache);
        }
        // `watch hotkeys`: the ten hottest keys, each second.
        if shared.watchers.wants(crate::watchers::HOTKEYS)
            && hot_sent.elapsed() >= Duration::from_secs(1)
        {
            hot_sent = Instant::now();
            let rows = crate::stats_cmd::hot_rows_of(cache, &shared.threads, 10);
            for (i, row) in rows.iter().flatten().enumerate() {
                shared.watchers.hotkey(i + 1, row);
            }
        }
        // `watch evictions`: the engine records them only while watched.
        let want = shared.watchers.wants(crate::watchers::EVICTIONS);
        if want || logging {
            let evicted = cache.evictions(want);
            for e in &evicted {
                shared.watchers.eviction(e);
            }
            logging = want;
        }
        let calls = cache.maintain_slices() * CALLS_PER_SLICE;
        for _ in 0..calls {
            let visited = cache.maintain(MAINTAIN_BUDGET);
            if visited < MAINTAIN_BUDGET || stopping(stop, shared) {
                break;
            }
            std::thread::yield_now();
        }
        cache.train_zone_in_background();
        std::thread::park_timeout(Duration::from_millis(200));
    }
}

/// The Z-zone's writer: packs demoted items into their blocks, off the
/// requests' path (`Cache::flush_zone`). It polls: every millisecond while
/// there is work, backing off to 64 ms when idle (a demotion waits in the
/// stage meanwhile, readable; a full stage is flushed by the demoting
/// thread itself). While demotions come it packs a stage half full
/// (`Cache::flush_zone_batched`); after [`PACK_ALL_MS`] without, the rest.
fn zone_writer_thread(cache: &Cache, shared: &Shared, stop: &AtomicBool) {
    cachalot_engine::holds::background_thread();
    cachalot_engine::priority::idle_thread();
    let mut idle_ms = 1;
    while !stopping(stop, shared) {
        let steps = match idle_ms < PACK_ALL_MS {
            true => cache.flush_zone_batched(256),
            false => cache.flush_zone(256),
        };
        if steps > 0 {
            idle_ms = 1;
            continue;
        }
        cachalot_engine::priority::rest();
        std::thread::park_timeout(Duration::from_millis(idle_ms));
        idle_ms = (idle_ms * 2).min(64);
    }
}

/// The Z-zone writer's wait (1 + 2 + 4 ms) for its stage to fill half way
/// before it packs what is there.
const PACK_ALL_MS: u64 = 8;

/// The flash tier's writer: packs staged items into containers and
/// writes whole slabs (`Cache::flash_write_step`), polling every
/// millisecond while there is work and backing off to 16 ms when idle (an
/// item waits in the stage meanwhile, readable; tombstones wait at most
/// that long for the journal). At a clean shutdown it writes out what is
/// staged, seals the open slabs and saves the index.
fn flash_writer_thread(cache: &Cache, shared: &Shared, stop: &AtomicBool) {
    cachalot_engine::holds::background_thread();
    let mut idle_ms = 1;
    while !stopping(stop, shared) {
        if cache.flash_write_step() {
            idle_ms = 1;
            continue;
        }
        std::thread::park_timeout(Duration::from_millis(idle_ms));
        idle_ms = (idle_ms * 2).min(16);
    }
    if !cache.flash_shutdown() {
        eprintln!("flash: the last slabs or the index could not be saved at shutdown");
    }
}

/// The dispatcher: accepts on every listener and deals connections out.
struct Acceptor {
    poll: Poll,
    listeners: Vec<Listener>,
    workers: Vec<WorkerHandle>,
    next: usize,
    settings: Arc<Settings>,
    shared: Arc<Shared>,
    stop: Arc<AtomicBool>,
    clients: Arc<AtomicUsize>,
}

impl Acceptor {
    fn run(mut self) {
        let mut listener_ids = Vec::new();
        for (i, l) in self.listeners.iter_mut().enumerate() {
            let res = match l {
                Listener::Tcp { sock, .. } => {
                    self.poll
                        .registry()
                        .register(sock, Token(i), Interest::READABLE)
                }
                Listener::Unix { sock, .. } => {
                    self.poll
                        .registry()
                        .register(sock, Token(i), Interest::READABLE)
                }
            };
            if let Err(e) = res {
                eprintln!("failed to register listener {}: {e}", l.name());
            }
            let fd = match l {
                Listener::Tcp { sock, .. } => std::os::fd::AsRawFd::as_raw_fd(sock),
                Listener::Unix { sock, .. } => std::os::fd::AsRawFd::as_raw_fd(sock),
            } as u64;
            // Listening sockets appear in `stats conns` and in
            // curr_connections, as in memcached.
            self.shared.register_conn(Arc::new(ConnEntry::new(
                fd,
                l.name().to_string(),
                String::new(),
                ConnState::Listening,
                0,
            )));
            listener_ids.push(fd);
            if self.settings.verbose > 1 {
                let proto = self.settings.protocol.name();
                log::emit(
                    self.settings.log_format,
                    Level::Info,
                    "listening",
                    format_args!("<{fd} server listening ({proto})"),
                    &[("fd", &fd), ("listener", &l.name()), ("protocol", &proto)],
                );
            }
        }

        let mut events = Events::with_capacity(64);
        // Listeners we stopped accepting from (fd limit, or `-c` without
        // maxconns_fast) and must retry: edges will not repeat.
        let mut backlog_pending = false;
        // Most connections open at once since the heap was last trimmed.
        let mut high = 0;
        loop {
            let timeout = if backlog_pending {
                Duration::from_millis(10)
            } else {
                ACCEPT_TICK
            };
            if let Err(e) = self.poll.poll(&mut events, Some(timeout)) {
                if e.kind() != std::io::ErrorKind::Interrupted {
                    eprintln!("acceptor poll failed: {e}");
                    break;
                }
            }
            if stopping(&self.stop, &self.shared) {
                break;
            }
            let mut todo: Vec<usize> = events.iter().map(|e| e.token().0).collect();
            if backlog_pending {
                todo = (0..self.listeners.len()).collect();
                backlog_pending = false;
            }
            for i in todo {
                if self.accept_from(i) {
                    backlog_pending = true;
                }
            }
            // Memory a connection used goes back when it ends: its buffers
            // by themselves (see `os::return_large_frees`), the small pieces
            // left in the arenas by a crowd that left, here.
            let open = self.clients.load(Ordering::Relaxed);
            high = high.max(open);
            if high >= open + TRIM_AFTER_CLOSED {
                os::trim_heap();
                high = open;
            }
        }

        // Stop accepting: close listeners, then tell the workers to finish.
        self.shared.shutdown.store(true, Ordering::SeqCst);
        for id in listener_ids {
            self.shared.unregister_conn(id);
        }
        self.listeners.clear();
        for w in &self.workers {
            let _ = w.waker.wake();
        }
    }

    /// Accept until the listener is drained. Returns true when it stopped
    /// early and must be retried.
    fn accept_from(&mut self, i: usize) -> bool {
        loop {
            let at_limit = self.clients.load(Ordering::Acquire) >= self.settings.max_conns;
            if at_limit && !self.settings.maxconns_fast {
                // Leave them in the kernel's backlog until a slot frees up.
                return true;
            }
            let accepted = match self.listeners.get(i) {
                Some(Listener::Tcp {
                    sock, name, tls, ..
                }) => sock.accept().map(|(s, addr)| {
                    let _ = s.set_nodelay(true);
                    let tls = self.shared.tls.clone().filter(|_| *tls);
                    (Stream::Tcp(s), listener::tcp_name(&addr), name.clone(), tls)
                }),
                Some(Listener::Unix { sock, name, .. }) => sock.accept().map(|(s, _)| {
                    // memcached prints a unix peer this way (no name).
                    (Stream::Unix(s), "?:<AF 0>".to_string(), name.clone(), None)
                }),
                None => return false,
            };
            match accepted {
                Ok((mut stream, addr, listen_addr, tls)) => {
                    if at_limit {
                        // memcached's maxconns_fast: tell the client, close.
                        use std::io::Write;
                        let _ = stream.write(TOO_MANY_CONNS);
                        self.shared
                            .rejected_connections
                            .fetch_add(1, Ordering::Relaxed);
                        if self.settings.verbose > 0 {
                            log::emit(
                                self.settings.log_format,
                                Level::Warn,
                                "conn_rejected",
                                "Too many open connections",
                                &[("peer", &addr), ("max_conns", &self.settings.max_conns)],
                            );
                        }
                        continue;
                    }
                    // The handshake itself runs on the worker.
                    let stream = match (tls, stream) {
                        (Some(tls), Stream::Tcp(sock)) => match tls.accept(sock) {
                            Ok(t) => Stream::Tls(Box::new(t)),
                            Err(e) => {
                                if self.settings.verbose > 0 {
                                    log::emit(
                                        self.settings.log_format,
                                        Level::Warn,
                                        "tls_setup_failed",
                                        format_args!("TLS setup failed: {e}"),
                                        &[("peer", &addr), ("error", &e)],
                                    );
                                }
                                continue;
                            }
                        },
                        (_, stream) => stream,
                    };
                    self.clients.fetch_add(1, Ordering::AcqRel);
                    let w = self.next % self.workers.len().max(1);
                    self.next = self.next.wrapping_add(1);
                    match self.workers.get(w) {
                        Some(worker) => worker.send(NewConn {
                            stream,
                            addr,
                            listen_addr,
                        }),
                        None => {
                            self.clients.fetch_sub(1, Ordering::AcqRel);
                        }
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return false,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    // EMFILE/ENFILE and the like: back off and retry soon.
                    if self.settings.verbose > 0 {
                        log::emit(
                            self.settings.log_format,
                            Level::Error,
                            "accept_failed",
                            format_args!("accept(): {e}"),
                            &[("error", &e)],
                        );
                    }
                    return true;
                }
            }
        }
    }
}
