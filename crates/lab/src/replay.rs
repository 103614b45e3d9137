//! `replay`: drive a trace or a model against any memcached-protocol server
//! as a look-aside cache, and measure hit ratios, costs, throughput and
//! latency, overall and per interval.
//!
//! Look-aside (the lab's common semantics, as the applications of Nishtala et
//! al., NSDI'13, use memcached): a GET that hits counts; a GET that misses is
//! recorded and followed by a SET of the value (flags 0, exptime = the
//! request's ttl, and the request's cost, sent only to cachalot, which
//! understands `cost=`/`w`); trace SETs and DELETEs are sent as they are.
//!
//! How it drives (one event loop per client thread with mio, like memtier and
//! mc-crusher; the machine has 2 cores, so no thread per connection):
//! - Requests are sharded to connections by a hash of the key, and within a
//!   connection a request is not sent while an earlier request for the same
//!   key (or its fill SET) is in flight, so every key sees the order one
//!   application would give it, whatever the pipeline depth.
//! - Closed loop (default): each connection keeps up to `--pipeline`
//!   requests in flight. Open loop (`--rate`): request i is due at
//!   start + i/rate, and its latency runs from that intended time, not from
//!   when it could be sent, so a stalled server is not hidden (Tene's
//!   "coordinated omission"; wrk2 does the same). A small timer thread wakes
//!   the event loop at each due time, since epoll's timeouts are whole
//!   milliseconds and that lag would count as latency; what remains is the
//!   OS's timer slack, about 50-60 us on Linux, in the latency of a request
//!   sent after an idle wait (closed-loop latencies have no such term).
//! - Each client thread reads the whole request stream itself (the source is
//!   deterministic) and keeps the requests of its own connections: no channel
//!   between a reader and the senders.

mod lookaside;

use std::collections::VecDeque;
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier, Condvar, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use mio::net::TcpStream;
use mio::{Events, Interest, Poll, Token};

pub use lookaside::Protocol;

use crate::metrics::{self, At, IntervalSpec, LatOp, Recorder, RunMeta, RunResult};
use crate::servers::{self, ServerKind};
use crate::trace::{key_bytes, Op, Request};
use crate::values::{value_bytes, ValueKind};
use crate::workload::{Requests, Source};

/// memcached's longest key (KEY_MAX_LENGTH); longer model keys are cut.
const KEY_MAX: usize = 250;

/// How to drive the server; shared by `replay` and `compare`.
#[derive(clap::Args, Debug, Clone)]
pub struct DriveArgs {
    /// Protocol of the requests.
    #[arg(long, value_enum, default_value_t = Protocol::Text)]
    pub protocol: Protocol,
    /// Client connections (keys are sharded over them by hash).
    #[arg(long, default_value_t = 4)]
    pub connections: usize,
    /// Requests in flight per connection.
    #[arg(long, default_value_t = 1)]
    pub pipeline: usize,
    /// Target rate in requests/s (open loop; latency from the intended send
    /// time). Without it: closed loop, as fast as the server answers.
    #[arg(long)]
    pub rate: Option<f64>,
    /// What values look like.
    #[arg(long, value_enum, default_value_t = ValueKind::Random)]
    pub values: ValueKind,
    /// Interval for the per-interval figures: requests (100000) or seconds (1s).
    #[arg(long, default_value = "100000")]
    pub interval: IntervalSpec,
    /// Client threads, each an event loop over its share of the connections.
    #[arg(long, default_value_t = 1)]
    pub client_threads: usize,
    /// Backend delay before the fill SET of a miss, in microseconds per unit
    /// of the request's cost (0: none). The cost is then not sent, so that
    /// cachalot can learn it from the gap (`-o learn_costs=1`), as sim's
    /// `--backend-delay cost` does on the engine's clock.
    #[arg(long, default_value_t = 0.0)]
    pub backend_us_per_cost: f64,
    /// Print the per-interval table too.
    #[arg(long)]
    pub show_intervals: bool,
}

#[derive(clap::Args, Debug)]
pub struct ReplayArgs {
    #[command(flatten)]
    pub source: Source,
    /// Server address, HOST:PORT.
    #[arg(long)]
    pub server: String,
    /// Which server it is (decides whether costs are sent); detected from
    /// `stats settings` when not given.
    #[arg(long, value_enum)]
    pub server_kind: Option<ServerKind>,
    #[command(flatten)]
    pub drive: DriveArgs,
    /// Write the result document here.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

pub fn run(args: ReplayArgs) -> anyhow::Result<()> {
    let addr = args
        .server
        .to_socket_addrs()
        .with_context(|| format!("resolving {}", args.server))?
        .next()
        .with_context(|| format!("{} resolves to no address", args.server))?;
    // Fail before the run, not after: a model name typo, a missing trace.
    drop(args.source.open()?);
    let kind = match args.server_kind {
        Some(k) => k,
        None => servers::detect_kind(addr).unwrap_or(ServerKind::Memcached),
    };
    let label = kind.name();
    let result = replay_source(addr, kind, label, &args.source, &args.drive, false)?;
    metrics::print_table(std::slice::from_ref(&result));
    println!();
    print!("{}", metrics::format_latency(&result));
    if args.drive.show_intervals {
        print!("{}", metrics::format_intervals(&result));
    }
    if let Some(path) = &args.json {
        metrics::write_json(path, &result)?;
    }
    Ok(())
}

/// Replay `source` against the server at `addr` and build the result
/// document (metadata, server stats afterwards, totals, intervals).
/// `proxied`: `addr` is a proxy (twemproxy), whose parser refuses the
/// `cost=` token, so no costs are sent.
pub fn replay_source(
    addr: SocketAddr,
    kind: ServerKind,
    label: &str,
    source: &Source,
    drive: &DriveArgs,
    proxied: bool,
) -> anyhow::Result<RunResult> {
    let mut cfg = ReplayConfig::from_drive(addr, kind, drive);
    cfg.send_costs &= !proxied;
    let expected = source.trace.is_none().then_some(source.requests);
    let out = replay(&cfg, expected, || source.open())?;
    let mut meta = RunMeta::new("replay", label, source);
    fill_meta(&mut meta, &cfg, addr, kind);
    Ok(out.recorder.finish(meta, out.elapsed))
}

/// Server-side metadata: version, `stats` after the run, memory, settings.
pub fn fill_meta(meta: &mut RunMeta, cfg: &ReplayConfig, addr: SocketAddr, kind: ServerKind) {
    meta.server = addr.to_string();
    meta.server_kind = kind.name().to_string();
    meta.server_version = servers::version(addr).ok();
    if let Ok(st) = servers::stats(addr, "stats") {
        meta.memory_mb = st
            .get("limit_maxbytes")
            .and_then(|v| v.parse::<u64>().ok())
            .map(|b| b >> 20);
        meta.server_stats = st;
    }
    let s = &mut meta.settings;
    s.insert("protocol".into(), cfg.protocol.name().into());
    s.insert("connections".into(), cfg.connections.into());
    s.insert("pipeline".into(), cfg.pipeline.into());
    s.insert(
        "rate".into(),
        cfg.rate.map(serde_json::Value::from).unwrap_or_default(),
    );
    s.insert(
        "values".into(),
        serde_json::to_value(cfg.values).unwrap_or_default(),
    );
    s.insert("interval".into(), cfg.interval.to_string().into());
    s.insert("client_threads".into(), cfg.client_threads.into());
    s.insert("send_costs".into(), cfg.send_costs.into());
    s.insert("backend_us_per_cost".into(), cfg.backend_us_per_cost.into());
}

/// Everything the driver needs.
#[derive(Clone, Debug)]
pub struct ReplayConfig {
    pub addr: SocketAddr,
    pub protocol: Protocol,
    /// Send costs (`cost=`, `w`): cachalot only.
    pub send_costs: bool,
    pub connections: usize,
    pub pipeline: usize,
    pub rate: Option<f64>,
    pub values: ValueKind,
    pub interval: IntervalSpec,
    pub client_threads: usize,
    /// Microseconds a fill waits per unit of cost (0: none).
    pub backend_us_per_cost: f64,
    /// Show a progress bar on stderr.
    pub progress: bool,
}

impl ReplayConfig {
    pub fn new(addr: SocketAddr, kind: ServerKind) -> ReplayConfig {
        ReplayConfig {
            addr,
            protocol: Protocol::Text,
            send_costs: kind == ServerKind::Cachalot,
            connections: 1,
            pipeline: 1,
            rate: None,
            values: ValueKind::Random,
            interval: IntervalSpec::default(),
            client_threads: 1,
            backend_us_per_cost: 0.0,
            progress: false,
        }
    }

    pub fn from_drive(addr: SocketAddr, kind: ServerKind, d: &DriveArgs) -> ReplayConfig {
        ReplayConfig {
            protocol: d.protocol,
            connections: d.connections.max(1),
            pipeline: d.pipeline.max(1),
            rate: d.rate.filter(|r| *r > 0.0),
            values: d.values,
            interval: d.interval,
            client_threads: d.client_threads.max(1),
            backend_us_per_cost: d.backend_us_per_cost.max(0.0),
            send_costs: kind == ServerKind::Cachalot && d.backend_us_per_cost <= 0.0,
            progress: true,
            ..ReplayConfig::new(addr, kind)
        }
    }
}

/// What a replay measured.
pub struct ReplayOutcome {
    pub recorder: Recorder,
    /// From the start to the last reply.
    pub elapsed: Duration,
}

/// Replay the requests `open` yields (called once per client thread, each
/// call must give the same stream). `expected` sizes the progress bar.
pub fn replay<F>(
    cfg: &ReplayConfig,
    expected: Option<u64>,
    open: F,
) -> anyhow::Result<ReplayOutcome>
where
    F: Fn() -> anyhow::Result<Requests> + Sync,
{
    let threads = cfg.client_threads.clamp(1, cfg.connections.max(1));
    let done = AtomicU64::new(0);
    let stop = AtomicBool::new(false);
    // Every thread connects first, then all start the clock together.
    let barrier = Arc::new(Barrier::new(threads + 1));
    let start_cell = std::sync::OnceLock::<Instant>::new();
    let bar = progress_bar(cfg.progress, expected);

    let results: Vec<anyhow::Result<(Recorder, Instant)>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let barrier = Arc::clone(&barrier);
                let (done, stop, start_cell, open) = (&done, &stop, &start_cell, &open);
                scope.spawn(move || {
                    let prepared = Worker::connect(cfg, t, threads).and_then(|w| Ok((w, open()?)));
                    barrier.wait();
                    // The main thread sets the start before it passes the barrier's
                    // second wait; until then we wait too.
                    barrier.wait();
                    let (mut worker, stream) = prepared?;
                    let start = *start_cell.get_or_init(Instant::now);
                    let r = worker.run(stream, start, done, stop);
                    if r.is_err() {
                        stop.store(true, Ordering::Relaxed);
                    }
                    r.map(|last| (worker.recorder, last))
                })
            })
            .collect();
        barrier.wait();
        let _ = start_cell.get_or_init(Instant::now);
        barrier.wait();
        while !handles.iter().all(|h| h.is_finished()) {
            bar.set_position(done.load(Ordering::Relaxed));
            std::thread::sleep(Duration::from_millis(100));
        }
        bar.set_position(done.load(Ordering::Relaxed));
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(anyhow::anyhow!("a client thread panicked")))
            })
            .collect()
    });
    bar.finish_and_clear();

    let start = start_cell.get().copied().unwrap_or_else(Instant::now);
    let mut total = Recorder::new(cfg.interval);
    let mut last = start;
    for r in results {
        let (rec, end) = r?;
        total.merge(&rec);
        last = last.max(end);
    }
    Ok(ReplayOutcome {
        recorder: total,
        elapsed: last.duration_since(start),
    })
}

fn progress_bar(show: bool, expected: Option<u64>) -> indicatif::ProgressBar {
    if !show {
        return indicatif::ProgressBar::hidden();
    }
    let bar = match expected {
        Some(n) => indicatif::ProgressBar::new(n),
        None => indicatif::ProgressBar::new_spinner(),
    };
    let style = match expected {
        Some(_) => "{elapsed_precise} [{bar:40}] {pos}/{len} requests ({per_sec}, eta {eta})",
        None => "{elapsed_precise} {spinner} {pos} requests ({per_sec})",
    };
    if let Ok(s) = indicatif::ProgressStyle::with_template(style) {
        bar.set_style(s.progress_chars("=> "));
    }
    bar
}

/// splitmix64's finalizer: spreads sequential ids over the connections.
fn mix(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// What a request in flight is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Get,
    Set,
    Fill,
    Delete,
}

#[derive(Clone, Copy)]
struct Pending {
    seq: u64,
    req: Request,
    kind: Kind,
    /// Where its latency starts: when sent (closed loop), when due (open
    /// loop), or when the miss came back (fills).
    since: Instant,
}

struct Conn {
    sock: TcpStream,
    /// Bytes to send, from `wpos`.
    wbuf: Vec<u8>,
    wpos: usize,
    /// Received bytes `rlo..rhi` of `rbuf`.
    rbuf: Vec<u8>,
    rlo: usize,
    rhi: usize,
    inflight: VecDeque<Pending>,
    /// Requests of this connection not sent yet.
    queue: VecDeque<(u64, Request)>,
    /// Fills waiting for their backend delay: when due, seq, request.
    deferred: Vec<(Instant, u64, Request)>,
}

struct Worker<'a> {
    cfg: &'a ReplayConfig,
    /// Global index of the connections: `conns[i]` is connection
    /// `thread + i * threads`.
    conns: Vec<Conn>,
    thread: usize,
    threads: usize,
    poll: Poll,
    recorder: Recorder,
    /// Times the safety poll found replies (see [`STALL`]).
    stalls: u64,
    key: Vec<u8>,
    value: Vec<u8>,
}

/// The poll token of the open-loop alarm's waker.
const WAKE: Token = Token(usize::MAX);
/// The longest a worker's poll waits: if nothing woke it by then while
/// requests are in flight, it reads every connection (a reply whose
/// readiness was never reported would otherwise hang the run: seen on a
/// loaded 2-core machine, with bytes in every socket's receive queue).
const STALL: Duration = Duration::from_millis(20);

/// Open loop's timer: a thread that sleeps until the armed instant (a
/// condvar wait, nanosecond timeouts) and then wakes the worker's poll, so a
/// due request goes out within the OS's timer slack (about 50 us) rather
/// than epoll's millisecond.
struct Alarm {
    at: Mutex<(Option<Instant>, bool)>,
    cv: Condvar,
}

impl Alarm {
    fn new() -> Alarm {
        Alarm {
            at: Mutex::new((None, false)),
            cv: Condvar::new(),
        }
    }

    /// Wake the poll at `t` (replacing any earlier setting).
    fn set(&self, t: Instant) {
        let mut g = self.at.lock().unwrap_or_else(|e| e.into_inner());
        g.0 = Some(t);
        self.cv.notify_one();
    }

    fn stop(&self) {
        let mut g = self.at.lock().unwrap_or_else(|e| e.into_inner());
        g.1 = true;
        self.cv.notify_one();
    }

    /// The timer thread's body.
    fn serve(&self, waker: &mio::Waker) {
        let mut g = self.at.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if g.1 {
                return;
            }
            match g.0 {
                None => g = self.cv.wait(g).unwrap_or_else(|e| e.into_inner()),
                Some(t) => {
                    let now = Instant::now();
                    if t <= now {
                        g.0 = None;
                        let _ = waker.wake();
                    } else {
                        g = self
                            .cv
                            .wait_timeout(g, t - now)
                            .map(|(g, _)| g)
                            .unwrap_or_else(|e| e.into_inner().0);
                    }
                }
            }
        }
    }
}

/// Requests a connection may hold unsent before the reader pauses: a few
/// pipelines' worth in closed loop, more in open loop so one slow connection
/// does not hold the others' due requests back.
fn queue_cap(cfg: &ReplayConfig) -> usize {
    if cfg.rate.is_some() {
        16_384
    } else {
        (cfg.pipeline * 4).max(64)
    }
}

impl<'a> Worker<'a> {
    fn connect(cfg: &'a ReplayConfig, thread: usize, threads: usize) -> anyhow::Result<Self> {
        let poll = Poll::new()?;
        let mut conns = Vec::new();
        for (i, _) in (thread..cfg.connections).step_by(threads).enumerate() {
            let std = std::net::TcpStream::connect_timeout(&cfg.addr, Duration::from_secs(5))
                .with_context(|| format!("connecting to {}", cfg.addr))?;
            std.set_nodelay(true)?;
            std.set_nonblocking(true)?;
            let mut sock = TcpStream::from_std(std);
            poll.registry().register(
                &mut sock,
                Token(i),
                Interest::READABLE | Interest::WRITABLE,
            )?;
            conns.push(Conn {
                sock,
                wbuf: Vec::with_capacity(64 << 10),
                wpos: 0,
                rbuf: vec![0; 256 << 10],
                rlo: 0,
                rhi: 0,
                inflight: VecDeque::with_capacity(cfg.pipeline + 1),
                queue: VecDeque::with_capacity(queue_cap(cfg)),
                deferred: Vec::new(),
            });
        }
        Ok(Worker {
            cfg,
            conns,
            thread,
            threads,
            poll,
            recorder: Recorder::new(cfg.interval),
            stalls: 0,
            key: Vec::with_capacity(KEY_MAX),
            value: Vec::new(),
        })
    }

    /// Which of this thread's connections serves `key`, if any.
    fn route(&self, key: u64) -> Option<usize> {
        let c = (mix(key) % self.cfg.connections as u64) as usize;
        (c % self.threads == self.thread).then_some(c / self.threads)
    }

    /// Run until the stream is exhausted and every reply is in; returns when
    /// the last reply came.
    fn run(
        &mut self,
        stream: Requests,
        start: Instant,
        done: &AtomicU64,
        stop: &AtomicBool,
    ) -> anyhow::Result<Instant> {
        let r = if self.cfg.rate.is_none() && self.cfg.backend_us_per_cost <= 0.0 {
            self.run_loop(stream, start, done, stop, None)
        } else {
            self.run_alarmed(stream, start, done, stop)
        };
        if self.stalls > 0 {
            eprintln!(
                "warning: {} times replies were found only by the {} ms safety poll; \
                 their latencies include that wait",
                self.stalls,
                STALL.as_millis()
            );
        }
        r
    }

    /// [`Worker::run_loop`] with a timer thread that wakes its poll when
    /// the next request is due.
    fn run_alarmed(
        &mut self,
        stream: Requests,
        start: Instant,
        done: &AtomicU64,
        stop: &AtomicBool,
    ) -> anyhow::Result<Instant> {
        let waker = mio::Waker::new(self.poll.registry(), WAKE)?;
        let alarm = Alarm::new();
        std::thread::scope(|scope| {
            let timer = scope.spawn(|| alarm.serve(&waker));
            let r = self.run_loop(stream, start, done, stop, Some(&alarm));
            alarm.stop();
            let _ = timer.join();
            r
        })
    }

    fn run_loop(
        &mut self,
        mut stream: Requests,
        start: Instant,
        done: &AtomicU64,
        stop: &AtomicBool,
        alarm: Option<&Alarm>,
    ) -> anyhow::Result<Instant> {
        let cap = queue_cap(self.cfg);
        let mut events = Events::with_capacity(256);
        let mut seq: u64 = 0;
        let mut held: Option<(u64, Request, usize)> = None;
        let mut exhausted = false;
        let mut last = start;
        let mut completed_local = 0u64;
        let rate = self.cfg.rate;
        let due = |seq: u64| -> Option<Instant> {
            rate.map(|r| start + Duration::from_secs_f64(seq as f64 / r))
        };
        loop {
            if stop.load(Ordering::Relaxed) {
                bail!("stopped: another client thread failed");
            }
            let now = Instant::now();
            // 1. Take due requests of our connections from the stream.
            let mut wait: Option<Duration> = None;
            loop {
                let (s, req, c) = match held.take() {
                    Some(h) => h,
                    None => {
                        if exhausted {
                            break;
                        }
                        match stream.next() {
                            None => {
                                exhausted = true;
                                break;
                            }
                            Some(req) => {
                                let s = seq;
                                seq += 1;
                                match self.route(req.key) {
                                    Some(c) => (s, req, c),
                                    None => continue,
                                }
                            }
                        }
                    }
                };
                if let Some(t) = due(s) {
                    if t > now {
                        wait = Some(t - now);
                        held = Some((s, req, c));
                        break;
                    }
                }
                if self.conns[c].queue.len() >= cap {
                    held = Some((s, req, c));
                    break;
                }
                self.conns[c].queue.push_back((s, req));
            }
            // 2. Send the fills whose backend delay is over and what the
            // windows allow, flush.
            for c in 0..self.conns.len() {
                if let Some(next) = self.release_fills(c, now) {
                    let w = next.saturating_duration_since(now);
                    wait = Some(wait.map_or(w, |x| x.min(w)));
                }
                self.fill_window(c, start, now);
                self.flush(c)?;
            }
            // 3. Finished?
            let idle = self
                .conns
                .iter()
                .all(|c| c.queue.is_empty() && c.inflight.is_empty() && c.deferred.is_empty());
            if exhausted && held.is_none() && idle {
                done.fetch_add(completed_local, Ordering::Relaxed);
                return Ok(last);
            }
            // 4. Wait for replies (or the next due request).
            if idle && wait.is_none() && held.is_none() {
                continue;
            }
            // epoll's timeout counts whole milliseconds, far coarser than the
            // gaps between due requests at tens of thousands per second, and
            // that lag would show up as latency: the alarm thread wakes the
            // poll at the due time instead (replies still wake it at once).
            match (wait, alarm) {
                (Some(w), Some(a)) => {
                    a.set(now + w);
                    poll_retrying(&mut self.poll, &mut events, STALL)?;
                }
                _ => poll_retrying(
                    &mut self.poll,
                    &mut events,
                    wait.map_or(STALL, |w| w.min(STALL)),
                )?,
            }
            let now = Instant::now();
            if events.is_empty() && wait.is_none_or(|w| w >= STALL) {
                // Nothing woke the poll for STALL with requests in flight:
                // look at every connection, and say so.
                for c in 0..self.conns.len() {
                    let n = self.read_replies(c, start, now)?;
                    if n > 0 {
                        self.stalls += 1;
                        completed_local += n;
                        last = now;
                    }
                    self.flush(c)?;
                }
            }
            for ev in events.iter() {
                let c = ev.token().0;
                if c >= self.conns.len() {
                    continue;
                }
                if ev.is_readable() || ev.is_read_closed() || ev.is_error() {
                    let n = self.read_replies(c, start, now)?;
                    if n > 0 {
                        completed_local += n;
                        last = now;
                    }
                }
                if ev.is_writable() {
                    self.flush(c)?;
                }
            }
            if completed_local >= 1024 {
                done.fetch_add(completed_local, Ordering::Relaxed);
                completed_local = 0;
            }
        }
    }

    /// Send the deferred fills of connection `c` that are due; returns when
    /// the next one is.
    fn release_fills(&mut self, c: usize, now: Instant) -> Option<Instant> {
        let mut next: Option<Instant> = None;
        let mut i = 0;
        while i < self.conns[c].deferred.len() {
            let (due, seq, req) = self.conns[c].deferred[i];
            if due <= now {
                self.conns[c].deferred.swap_remove(i);
                self.send(c, seq, req, Kind::Fill, due);
            } else {
                next = Some(next.map_or(due, |n| n.min(due)));
                i += 1;
            }
        }
        next
    }

    /// Move queued requests into flight while the pipeline has room and the
    /// next one's key is not already in flight (or waiting for its fill).
    fn fill_window(&mut self, c: usize, start: Instant, now: Instant) {
        let cfg = self.cfg;
        loop {
            let conn = &self.conns[c];
            let Some(&(seq, req)) = conn.queue.front() else {
                return;
            };
            let busy = conn
                .inflight
                .iter()
                .filter(|p| p.kind != Kind::Fill)
                .count();
            if busy >= cfg.pipeline
                || conn.inflight.iter().any(|p| p.req.key == req.key)
                || conn.deferred.iter().any(|d| d.2.key == req.key)
            {
                return;
            }
            let since = match cfg.rate {
                Some(r) => start + Duration::from_secs_f64(seq as f64 / r),
                None => now,
            };
            let kind = match req.op {
                Op::Get => Kind::Get,
                Op::Set => Kind::Set,
                Op::Delete => Kind::Delete,
            };
            self.conns[c].queue.pop_front();
            self.send(c, seq, req, kind, since);
        }
    }

    /// Encode one request into the connection's output and put it in flight.
    fn send(&mut self, c: usize, seq: u64, req: Request, kind: Kind, since: Instant) {
        let cfg = self.cfg;
        key_bytes(req.key, (req.key_size as usize).min(KEY_MAX), &mut self.key);
        let conn = &mut self.conns[c];
        if conn.wpos == conn.wbuf.len() {
            conn.wbuf.clear();
            conn.wpos = 0;
        }
        match kind {
            Kind::Get => lookaside::encode_get(cfg.protocol, &self.key, &mut conn.wbuf),
            Kind::Delete => lookaside::encode_delete(cfg.protocol, &self.key, &mut conn.wbuf),
            Kind::Set | Kind::Fill => {
                value_bytes(
                    cfg.values,
                    req.key,
                    req.value_size as usize,
                    &mut self.value,
                );
                let cost = cfg.send_costs.then_some(req.cost);
                lookaside::encode_set(
                    cfg.protocol,
                    &self.key,
                    &self.value,
                    req.ttl,
                    cost,
                    &mut conn.wbuf,
                );
            }
        }
        conn.inflight.push_back(Pending {
            seq,
            req,
            kind,
            since,
        });
    }

    /// Write as much pending output as the socket takes.
    fn flush(&mut self, c: usize) -> anyhow::Result<()> {
        let conn = &mut self.conns[c];
        while conn.wpos < conn.wbuf.len() {
            match conn.sock.write(&conn.wbuf[conn.wpos..]) {
                Ok(0) => bail!("{}: connection closed while sending", self.cfg.addr),
                Ok(n) => conn.wpos += n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(e).context("sending to the server"),
            }
        }
        conn.wbuf.clear();
        conn.wpos = 0;
        Ok(())
    }

    /// Read what arrived, settle complete replies in order, send fills for
    /// misses. Returns how many workload requests completed.
    fn read_replies(&mut self, c: usize, start: Instant, now: Instant) -> anyhow::Result<u64> {
        let cfg = self.cfg;
        let mut completed = 0;
        loop {
            let conn = &mut self.conns[c];
            if conn.rhi == conn.rbuf.len() {
                // Make room: drop what is parsed, grow for a big value.
                conn.rbuf.copy_within(conn.rlo..conn.rhi, 0);
                conn.rhi -= conn.rlo;
                conn.rlo = 0;
                if conn.rhi == conn.rbuf.len() {
                    let n = conn.rbuf.len() * 2;
                    conn.rbuf.resize(n, 0);
                }
            }
            let hi = conn.rhi;
            match conn.sock.read(&mut conn.rbuf[hi..]) {
                Ok(0) => {
                    if conn.inflight.is_empty() {
                        return Ok(completed);
                    }
                    bail!("{}: the server closed the connection", cfg.addr);
                }
                Ok(n) => conn.rhi += n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => return Err(e).context("reading from the server"),
            }
            completed += self.settle(c, start, now)?;
        }
        completed += self.settle(c, start, now)?;
        Ok(completed)
    }

    fn settle(&mut self, c: usize, start: Instant, now: Instant) -> anyhow::Result<u64> {
        let cfg = self.cfg;
        let mut completed = 0;
        loop {
            let conn = &mut self.conns[c];
            let Some(&p) = conn.inflight.front() else {
                if conn.rlo < conn.rhi {
                    bail!(
                        "{}: unexpected bytes from the server: {:?}",
                        cfg.addr,
                        String::from_utf8_lossy(&conn.rbuf[conn.rlo..conn.rhi.min(conn.rlo + 120)])
                    );
                }
                break;
            };
            let expect = match p.kind {
                Kind::Get => lookaside::Expect::Get,
                Kind::Set | Kind::Fill => lookaside::Expect::Store,
                Kind::Delete => lookaside::Expect::Delete,
            };
            let parsed = lookaside::parse(cfg.protocol, expect, &conn.rbuf[conn.rlo..conn.rhi])
                .map_err(|e| anyhow::anyhow!("{}: {e}", cfg.addr))?;
            let Some((outcome, used)) = parsed else {
                break;
            };
            conn.rlo += used;
            if conn.rlo == conn.rhi {
                conn.rlo = 0;
                conn.rhi = 0;
            }
            conn.inflight.pop_front();
            let at = At {
                seq: p.seq,
                elapsed_us: now.saturating_duration_since(start).as_micros() as u64,
            };
            let ns = now.saturating_duration_since(p.since).as_nanos() as u64;
            let rec = &mut self.recorder;
            if outcome == lookaside::Outcome::Error {
                rec.error(at);
            }
            match p.kind {
                Kind::Get => {
                    let hit = outcome == lookaside::Outcome::Hit;
                    rec.get(at, hit, p.req.value_size, p.req.cost);
                    rec.latency(at, LatOp::Get, ns);
                    completed += 1;
                    if outcome == lookaside::Outcome::Miss {
                        if cfg.backend_us_per_cost > 0.0 {
                            // The backend takes its time; the key stays busy.
                            let us = p.req.cost as f64 * cfg.backend_us_per_cost;
                            let due = now + Duration::from_secs_f64(us / 1e6);
                            self.conns[c].deferred.push((due, p.seq, p.req));
                        } else {
                            self.send(c, p.seq, p.req, Kind::Fill, now);
                        }
                    }
                }
                Kind::Set => {
                    rec.set(at);
                    rec.latency(at, LatOp::Set, ns);
                    completed += 1;
                }
                Kind::Delete => {
                    rec.delete(at);
                    rec.latency(at, LatOp::Delete, ns);
                    completed += 1;
                }
                Kind::Fill => {
                    rec.fill(at);
                    rec.latency(at, LatOp::Fill, ns);
                }
            }
        }
        Ok(completed)
    }
}

/// A poll that a signal interrupts (a `SIGSTOP`/`SIGCONT` pair from an
/// operator pausing the run) is simply polled again, with no events.
fn poll_retrying(poll: &mut Poll, events: &mut Events, timeout: Duration) -> std::io::Result<()> {
    match poll.poll(events, Some(timeout)) {
        Err(e) if e.kind() == ErrorKind::Interrupted => {
            events.clear();
            Ok(())
        }
        r => r,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::servers::{LocalServer, ServerConfig};

    /// A tiny deterministic workload: `n` requests over `keys` keys, skewed
    /// (a quarter of the keys get most requests), GET-heavy with some SETs
    /// and DELETEs.
    fn tiny(n: u64, keys: u64, seed: u64) -> Requests {
        let mut x = seed | 1;
        Box::new((0..n).map(move |i| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let hot = x & 3 != 0;
            let key = if hot {
                (x >> 8) % (keys / 4)
            } else {
                (x >> 8) % keys
            };
            let op = match (x >> 40) % 20 {
                0 => Op::Set,
                1 => Op::Delete,
                _ => Op::Get,
            };
            Request {
                time_us: i,
                key,
                key_size: 16,
                value_size: 100 + (key % 50) as u32,
                cost: 1 + (key % 7) as u32,
                op,
                ttl: 0,
            }
        }))
    }

    /// The same look-aside semantics in a few lines over a HashSet with no
    /// eviction: with a cache far larger than the data, the server must hit
    /// exactly where this model hits.
    fn model_counts(reqs: Requests) -> metrics::Counts {
        let mut present = std::collections::HashSet::new();
        let mut c = metrics::Counts::default();
        for r in reqs {
            match r.op {
                Op::Get => {
                    let hit = present.contains(&r.key);
                    c.record_get(hit, r.value_size, r.cost);
                    present.insert(r.key);
                }
                Op::Set => {
                    c.requests += 1;
                    c.sets += 1;
                    present.insert(r.key);
                }
                Op::Delete => {
                    c.requests += 1;
                    c.deletes += 1;
                    present.remove(&r.key);
                }
            }
        }
        c
    }

    fn check_exact(kind: ServerKind, protocol: Protocol, connections: usize, pipeline: usize) {
        let server = LocalServer::start(&ServerConfig::new(kind, 64, 2)).expect("start server");
        let mut cfg = ReplayConfig::new(server.addr(), kind);
        cfg.protocol = protocol;
        cfg.connections = connections;
        cfg.pipeline = pipeline;
        cfg.client_threads = 2;
        cfg.interval = IntervalSpec::Requests(5_000);
        let out = replay(&cfg, None, || Ok(tiny(20_000, 2_000, 7))).expect("replay");
        let want = model_counts(tiny(20_000, 2_000, 7));
        assert_eq!(
            out.recorder.totals(),
            &want,
            "{kind:?} {protocol:?} c{connections} p{pipeline}"
        );
        let r = out.recorder.finish(RunMeta::default(), out.elapsed);
        assert_eq!(r.totals.errors, 0);
        assert_eq!(r.totals.fills, want.gets - want.hits);
        assert_eq!(r.intervals.len(), 4);
        assert_eq!(r.totals.latency["get"].count, want.gets);
        assert_eq!(r.totals.latency["fill"].count, want.gets - want.hits);
        let st = server.stats().unwrap();
        // What the server saw: every GET (and nothing else), fills + sets.
        assert_eq!(st["cmd_get"], want.gets.to_string());
        assert_eq!(st["get_hits"], want.hits.to_string());
        assert_eq!(
            st["cmd_set"],
            (want.sets + want.gets - want.hits).to_string()
        );
    }

    #[test]
    fn memcached_text_pipelined_matches_the_model_exactly() {
        check_exact(ServerKind::Memcached, Protocol::Text, 4, 8);
    }

    #[test]
    fn memcached_meta_one_in_flight_matches_the_model_exactly() {
        check_exact(ServerKind::Memcached, Protocol::Meta, 3, 1);
    }

    #[test]
    fn open_loop_keeps_the_rate_and_counts_from_intended_times() {
        let server =
            LocalServer::start(&ServerConfig::new(ServerKind::Memcached, 64, 1)).expect("start");
        let mut cfg = ReplayConfig::new(server.addr(), ServerKind::Memcached);
        cfg.connections = 2;
        cfg.pipeline = 4;
        cfg.rate = Some(20_000.0);
        let out = replay(&cfg, None, || Ok(tiny(10_000, 1_000, 3))).expect("replay");
        // 10 000 requests at 20 000/s take about half a second, not less.
        let secs = out.elapsed.as_secs_f64();
        assert!((0.45..2.0).contains(&secs), "took {secs} s");
        assert_eq!(out.recorder.totals(), &model_counts(tiny(10_000, 1_000, 3)));
    }

    #[test]
    fn backend_delay_holds_fills_back_and_lets_cachalot_learn_costs() {
        let mut sc = ServerConfig::new(ServerKind::Cachalot, 64, 2);
        sc.extra_args = vec!["-o".into(), "learn_costs=1,eviction=gdwheel".into()];
        let server = LocalServer::start(&sc).expect("start cachalot");
        let mut cfg = ReplayConfig::new(server.addr(), ServerKind::Cachalot);
        cfg.connections = 2;
        cfg.pipeline = 4;
        // Costs 1..7: fills wait 0.5..3.5 ms.
        cfg.backend_us_per_cost = 500.0;
        cfg.send_costs = false;
        let out = replay(&cfg, None, || Ok(tiny(4_000, 400, 5))).expect("replay");
        let want = model_counts(tiny(4_000, 400, 5));
        // Same look-aside order per key: the key is busy until its fill.
        assert_eq!(out.recorder.totals(), &want);
        let r = out.recorder.finish(RunMeta::default(), out.elapsed);
        let fills = want.gets - want.hits;
        assert_eq!(r.totals.fills, fills);
        // No cost was sent: the server learned one from (nearly) every fill.
        let st = server.stats().unwrap();
        let learned: u64 = st["learned_costs"].parse().unwrap();
        assert!(learned * 10 >= fills * 9, "{learned} of {fills} fills");
        // 2 connections, each waiting at least 0.5 ms for most of its
        // fills: far slower than without the backend.
        assert!(out.elapsed.as_secs_f64() > fills as f64 * 0.0005 / 2.0 / 4.0);
    }

    #[test]
    fn server_errors_are_counted_not_fatal() {
        // Values above memcached's 1 MB item limit: every fill fails with
        // SERVER_ERROR object too large for cache, so every GET misses.
        let server =
            LocalServer::start(&ServerConfig::new(ServerKind::Memcached, 64, 1)).expect("start");
        let cfg = ReplayConfig::new(server.addr(), ServerKind::Memcached);
        let reqs = || -> anyhow::Result<Requests> {
            Ok(Box::new((0..20u64).map(|i| Request {
                time_us: i,
                key: i % 2,
                key_size: 10,
                value_size: 2 << 20,
                cost: 1,
                op: Op::Get,
                ttl: 0,
            })))
        };
        let out = replay(&cfg, None, reqs).expect("replay");
        let r = out.recorder.finish(RunMeta::default(), out.elapsed);
        assert_eq!(r.totals.counts.gets, 20);
        assert_eq!(r.totals.counts.hits, 0);
        assert_eq!(r.totals.fills, 20);
        assert_eq!(r.totals.errors, 20);
    }
}
