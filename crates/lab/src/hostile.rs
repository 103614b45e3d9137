//! Hostile clients (issue 9): probes that treat a memcached-protocol server
//! the way a buggy or malicious client would, while another client keeps
//! asking it for a small key and the server's resident memory is sampled.
//!
//! One home for the probe logic: the suite's scaled-down tests
//! (`tests/hostile.rs`, [`Scale::small`]) and the full-size side-by-side runs
//! of `benches/hostile.sh` (`cachalot-lab hostile`, [`Scale::full`]) call the
//! same [`run_probe`]. Each probe wants a freshly started server, since the
//! peak is the kernel's high-water mark (VmHWM) of the whole process, and
//! reports that peak, the RSS before and after it (the memory a client used
//! must go back when it leaves), what the attacking clients saw, and how the
//! watching client was served.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context};
use cachalot_protocol::binary::{Header, Opcode, REQ_MAGIC};
use cachalot_protocol::client::request::text::{self, Retrieve, Store, StoreOp};
use cachalot_protocol::client::request::{binary, meta};
use cachalot_protocol::client::{Reply, ReplyParser};

use crate::rss::{Rss, Sampler};
use crate::servers::{LocalServer, ServerConfig, ServerKind};

/// The attacks.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Probe {
    /// One `get` naming a 1 MB value thousands of times, reply never read.
    MultigetBig,
    /// Pipelined gets of a 1 MB value in text, meta and binary (quiet),
    /// never read.
    NeverReads,
    /// Connections pipelining small sets and gets as fast as they can,
    /// reading the replies.
    PipelineFlood,
    /// Ten thousand connections that say `version` once, then nothing.
    IdleConns,
    /// Connections reset (RST) in the middle of a request and of a reply.
    Resets,
    /// Connections sending a set one byte at a time.
    Slowloris,
    /// Values of every size from 1 B to `-I` stored and read back.
    EverySize,
    /// Binary headers announcing bodies of 4 GB, of `-I` + 1, and of `-I`
    /// with only half of it sent.
    HugeBodies,
}

impl Probe {
    pub const ALL: [Probe; 8] = [
        Probe::MultigetBig,
        Probe::NeverReads,
        Probe::PipelineFlood,
        Probe::IdleConns,
        Probe::Resets,
        Probe::Slowloris,
        Probe::EverySize,
        Probe::HugeBodies,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Probe::MultigetBig => "multiget-big",
            Probe::NeverReads => "never-reads",
            Probe::PipelineFlood => "pipeline-flood",
            Probe::IdleConns => "idle-conns",
            Probe::Resets => "resets",
            Probe::Slowloris => "slowloris",
            Probe::EverySize => "every-size",
            Probe::HugeBodies => "huge-bodies",
        }
    }
}

/// How hard each probe pushes.
#[derive(Clone, Debug)]
pub struct Scale {
    /// Keys named by the multi-get (all the same 1 MB value).
    pub multiget_keys: usize,
    /// Pipelined gets per protocol in `never-reads`.
    pub pipelined_gets: usize,
    pub flood_conns: usize,
    pub flood_time: Duration,
    pub idle_conns: usize,
    /// Resets of each kind.
    pub resets: usize,
    pub slowloris_conns: usize,
    /// Value length of each slowloris set.
    pub slowloris_value: usize,
    pub slowloris_interval: Duration,
    /// `every-size`: every size up to this, then sizes growing by `size_step`.
    pub dense_sizes: usize,
    pub size_step: f64,
    /// Connections holding half of an announced 1 MB binary value.
    pub partial_bodies: usize,
    /// How long attacking clients hold their position.
    pub hold: Duration,
}

impl Scale {
    /// The benchmark's sizes (benches/hostile.sh).
    pub fn full() -> Scale {
        Scale {
            multiget_keys: 2000,
            pipelined_gets: 2000,
            flood_conns: 4,
            flood_time: Duration::from_secs(5),
            idle_conns: 10_000,
            resets: 200,
            slowloris_conns: 200,
            slowloris_value: 200,
            slowloris_interval: Duration::from_millis(20),
            dense_sizes: 4096,
            size_step: 1.01,
            partial_bodies: 8,
            hold: Duration::from_secs(3),
        }
    }

    /// The test suite's sizes: each probe in a second or two.
    pub fn small() -> Scale {
        Scale {
            multiget_keys: 200,
            pipelined_gets: 200,
            flood_conns: 2,
            flood_time: Duration::from_secs(1),
            idle_conns: 500,
            resets: 20,
            slowloris_conns: 20,
            slowloris_value: 30,
            slowloris_interval: Duration::from_millis(10),
            dense_sizes: 300,
            size_step: 1.05,
            partial_bodies: 3,
            hold: Duration::from_millis(700),
        }
    }
}

/// Size of the large value the probes ask for ("1 MB", fits memcached's
/// default `-I 1m` with its item header).
pub const BIG: usize = 1_000_000;
/// The largest value `every-size` stores: 1 MB - 512 B, which fits `-I 1m`
/// in both servers whatever their item headers.
pub const TOP_SIZE: usize = (1 << 20) - 512;

/// The flags a server needs for a probe (beyond `-m`, `-t`).
pub fn server_args(probe: Probe, scale: &Scale) -> Vec<String> {
    match probe {
        // memcached's default -c 1024 would refuse most of them.
        Probe::IdleConns => vec!["-c".into(), (scale.idle_conns + 240).to_string()],
        _ => Vec::new(),
    }
}

/// How the watching client fared: a `get` of a small key every 20 ms.
#[derive(Clone, Debug, Default)]
pub struct Watch {
    pub answered: u64,
    /// Requests not answered (correctly) within 5 s.
    pub failed: u64,
    pub max_latency: Duration,
}

/// What a probe did to a server.
#[derive(Clone, Debug)]
pub struct ProbeReport {
    pub probe: Probe,
    pub server: ServerKind,
    /// VmRSS before the attack (the large value and the watched key stored).
    pub before_kb: u64,
    /// The larger of VmHWM and the highest VmRSS sampled (every 5 ms).
    pub peak_kb: u64,
    /// VmRSS a second after the attacking clients left.
    pub after_kb: u64,
    /// What the attacking clients saw.
    pub outcome: String,
    pub watch: Watch,
}

/// Start `kind` at `-m memory_mb` with what `probe` needs, run it, stop it.
pub fn run_fresh(
    probe: Probe,
    kind: ServerKind,
    memory_mb: u64,
    threads: u32,
    scale: &Scale,
    cachalot_bin: Option<&std::path::Path>,
) -> anyhow::Result<ProbeReport> {
    let mut cfg = ServerConfig::new(kind, memory_mb, threads);
    cfg.extra_args = server_args(probe, scale);
    cfg.cachalot_bin = cachalot_bin.map(Into::into);
    let server = LocalServer::start(&cfg)?;
    run_probe(probe, &server, scale)
        .with_context(|| format!("{} against {}", probe.name(), kind.name()))
}

/// Run one probe against a running server (started with [`server_args`]).
pub fn run_probe(probe: Probe, server: &LocalServer, scale: &Scale) -> anyhow::Result<ProbeReport> {
    let addr = server.addr();
    let pid = server.pid();
    let mut setup = Client::connect(addr)?;
    setup.set(b"big", &pattern(BIG, 7))?;
    setup.set(b"watch", b"still here")?;
    drop(setup);
    let before_kb = rss(pid)?.rss_kb;
    let sampler = Sampler::start(pid, Duration::from_millis(5));
    let watcher = Watcher::start(addr);
    let outcome = match probe {
        Probe::MultigetBig => multiget_big(addr, scale),
        Probe::NeverReads => never_reads(addr, scale),
        Probe::PipelineFlood => pipeline_flood(addr, scale),
        Probe::IdleConns => idle_conns(addr, scale),
        Probe::Resets => resets(addr, scale),
        Probe::Slowloris => slowloris(addr, scale),
        Probe::EverySize => every_size(addr, scale),
        Probe::HugeBodies => huge_bodies(addr, scale),
    };
    std::thread::sleep(Duration::from_secs(1));
    let watch = watcher.finish();
    let sampled = sampler.finish();
    let now = rss(pid).context("the server is gone")?;
    Ok(ProbeReport {
        probe,
        server: server.kind(),
        before_kb,
        peak_kb: sampled.max(now.hwm_kb),
        after_kb: now.rss_kb,
        outcome: outcome?,
        watch,
    })
}

// ---------------------------------------------------------------------------
// The probes. Each returns a one-line account of what its clients saw.

fn multiget_big(addr: SocketAddr, scale: &Scale) -> anyhow::Result<String> {
    let n = scale.multiget_keys;
    let mut hostile = connect(addr)?;
    hostile.write_all(&get_big(n))?;
    std::thread::sleep(scale.hold);
    drop(hostile);
    // The same request read to the end comes back whole (at most 100 MB).
    let n_read = n.min(100);
    let mut c = Client::connect(addr)?;
    c.send(&get_big(n_read))?;
    let want = pattern(BIG, 7);
    for i in 0..n_read {
        let ok = c.next(|r| matches!(r, Reply::Value { data, .. } if *data == want))?;
        ensure!(ok, "value {i} of the multi-get read back is wrong");
    }
    c.expect_line(b"END")?;
    Ok(format!(
        "get naming the 1 MB value {n}x left unread for {:.1}s, then closed; \
         the same get read to the end: {n_read} values intact",
        scale.hold.as_secs_f64()
    ))
}

fn never_reads(addr: SocketAddr, scale: &Scale) -> anyhow::Result<String> {
    let n = scale.pipelined_gets;
    let mut bin = Vec::new();
    for _ in 0..n {
        binary::request(&mut bin, Opcode::GetQ as u8, 0, 0, &[], b"big", &[]);
    }
    binary::request(&mut bin, Opcode::Noop as u8, 0, 0, &[], &[], &[]);
    let pipelines = [
        request(|o| text::get(o, b"big")).repeat(n),
        request(|o| meta::get(o, b"big", &[meta::Flag::Bare(b'v')])).repeat(n),
        bin,
    ];
    // Writers block once the server stops reading; they are cut loose by
    // shutting the sockets down after the hold.
    let mut socks = Vec::new();
    let mut writers = Vec::new();
    for p in pipelines {
        let s = connect(addr)?;
        let mut w = s.try_clone()?;
        writers.push(std::thread::spawn(move || w.write_all(&p).is_ok()));
        socks.push(s);
    }
    std::thread::sleep(scale.hold);
    for s in &socks {
        let _ = s.shutdown(std::net::Shutdown::Both);
    }
    let fully_sent = writers
        .into_iter()
        .map(|w| w.join().unwrap_or(false))
        .filter(|&sent| sent)
        .count();
    Ok(format!(
        "3 connections pipelined {n} gets of the 1 MB value each (text get, meta mg, \
         binary getq), read nothing for {:.1}s, then closed; {fully_sent}/3 pipelines \
         were taken in whole before the server stopped reading",
        scale.hold.as_secs_f64()
    ))
}

fn pipeline_flood(addr: SocketAddr, scale: &Scale) -> anyhow::Result<String> {
    let deadline = Instant::now() + scale.flood_time;
    let mut threads = Vec::new();
    for c in 0..scale.flood_conns {
        threads.push(std::thread::spawn(move || -> anyhow::Result<u64> {
            let mut cl = Client::connect(addr)?;
            let value = pattern(100, c as u64);
            let mut batch = Vec::new();
            let mut sent = 0u64;
            let mut i = 0u64;
            while Instant::now() < deadline {
                batch.clear();
                for _ in 0..500 {
                    let key = format!("flood:{c}:{}", i % 10_000);
                    Store::new(StoreOp::Set, key.as_bytes(), &value)
                        .noreply(true)
                        .encode(&mut batch);
                    let key = format!("flood:{c}:{}", i * 7 % 10_000);
                    text::get(&mut batch, key.as_bytes());
                    i += 1;
                }
                cl.send(&batch)?;
                sent += 500;
                // Read this batch's replies while the next is written: one
                // batch in flight keeps both sides busy without deadlock.
                for _ in 0..500 {
                    cl.skip_retrieval()?;
                }
            }
            Ok(sent * 2)
        }));
    }
    let mut total = 0;
    for t in threads {
        total += t
            .join()
            .map_err(|_| anyhow::anyhow!("flood thread panicked"))??;
    }
    Ok(format!(
        "{} connections pipelined sets and gets of 100 B values in batches of 1000: \
         {total} requests answered in {:.1}s ({:.0}/s)",
        scale.flood_conns,
        scale.flood_time.as_secs_f64(),
        total as f64 / scale.flood_time.as_secs_f64()
    ))
}

fn idle_conns(addr: SocketAddr, scale: &Scale) -> anyhow::Result<String> {
    raise_nofile(scale.idle_conns as u64 + 256)?;
    let mut conns = Vec::with_capacity(scale.idle_conns);
    for i in 0..scale.idle_conns {
        let mut c = Client::connect(addr).with_context(|| format!("connection {i}"))?;
        c.send(&request(|o| text::line(o, &[b"version"])))?;
        conns.push(c);
    }
    for (i, c) in conns.iter_mut().enumerate() {
        let ok = c.next(|r| r.code() == b"VERSION")?;
        ensure!(ok, "connection {i} was not answered");
    }
    std::thread::sleep(scale.hold);
    drop(conns);
    Ok(format!(
        "{} connections each answered once, then idle for {:.1}s, then closed",
        scale.idle_conns,
        scale.hold.as_secs_f64()
    ))
}

fn resets(addr: SocketAddr, scale: &Scale) -> anyhow::Result<String> {
    let value = vec![b'r'; BIG];
    let mut buf = vec![0u8; 64 * 1024];
    for i in 0..scale.resets {
        let mut s = connect(addr)?;
        let key = format!("reset:{i}");
        let set = request(|o| Store::new(StoreOp::Set, key.as_bytes(), &value).encode(o));
        s.write_all(&set[..set.len() - 2 - BIG / 2])?;
        reset(s);
        let mut s = connect(addr)?;
        s.write_all(&get_big(8))?;
        s.read_exact(&mut buf)?;
        reset(s);
    }
    Ok(format!(
        "{0} connections reset after half of a 1 MB set, {0} after 64 KB of an 8 MB reply",
        scale.resets
    ))
}

fn slowloris(addr: SocketAddr, scale: &Scale) -> anyhow::Result<String> {
    let mut conns = Vec::new();
    let mut reqs = Vec::new();
    for i in 0..scale.slowloris_conns {
        conns.push(Client::connect(addr)?);
        let key = format!("slow:{i}");
        let value = pattern(scale.slowloris_value, i as u64);
        reqs.push(request(|o| {
            Store::new(StoreOp::Set, key.as_bytes(), &value).encode(o)
        }));
    }
    let longest = reqs.iter().map(Vec::len).max().unwrap_or(0);
    let start = Instant::now();
    for b in 0..longest {
        for (c, r) in conns.iter_mut().zip(&reqs) {
            if let Some(byte) = r.get(b) {
                c.send(std::slice::from_ref(byte))?;
            }
        }
        std::thread::sleep(scale.slowloris_interval);
    }
    let mut stored = 0;
    for c in &mut conns {
        stored += usize::from(c.next(|r| *r == Reply::Line(b"STORED"))?);
    }
    ensure!(
        stored == conns.len(),
        "{stored} of {} slow sets stored",
        conns.len()
    );
    Ok(format!(
        "{} connections sent a {}-byte set one byte every {} ms ({:.1}s): all stored",
        conns.len(),
        longest,
        scale.slowloris_interval.as_millis(),
        start.elapsed().as_secs_f64()
    ))
}

fn every_size(addr: SocketAddr, scale: &Scale) -> anyhow::Result<String> {
    let mut sizes: Vec<usize> = (1..=scale.dense_sizes).collect();
    let mut s = scale.dense_sizes as f64;
    while (s as usize) < TOP_SIZE {
        s = (s * scale.size_step).ceil();
        sizes.push((s as usize).min(TOP_SIZE));
    }
    let mut c = Client::connect(addr)?;
    let mut bytes = 0usize;
    for &size in &sizes {
        let key = format!("size:{size}");
        let value = pattern(size, size as u64);
        c.set(key.as_bytes(), &value)
            .with_context(|| format!("storing {size} bytes"))?;
        c.send(&request(|o| text::get(o, key.as_bytes())))?;
        let ok = c.next(|r| matches!(r, Reply::Value { data, .. } if *data == value))?;
        ensure!(ok, "value of {size} bytes read back wrong or missing");
        c.expect_line(b"END")?;
        bytes += size;
    }
    // One byte over -I is refused, its data swallowed.
    let over = vec![b'o'; (1 << 20) + 1];
    c.send(&request(|o| {
        Store::new(StoreOp::Set, b"size:over", &over).encode(o)
    }))?;
    let refused = c.next(|r| r.code() == b"SERVER_ERROR")?;
    ensure!(refused, "a value of -I + 1 bytes was not refused");
    Ok(format!(
        "{} sizes from 1 B to {TOP_SIZE} B ({} MB) stored and read back intact; -I + 1 refused",
        sizes.len(),
        bytes >> 20
    ))
}

fn huge_bodies(addr: SocketAddr, scale: &Scale) -> anyhow::Result<String> {
    let extras = binary::store_extras(0, 0);
    let set_header = |value_len: u32, out: &mut Vec<u8>| {
        Header {
            magic: REQ_MAGIC,
            opcode: Opcode::Set as u8,
            key_len: 1,
            extras_len: extras.len() as u8,
            data_type: 0,
            vbucket_or_status: 0,
            body_len: (extras.len() as u32 + 1).saturating_add(value_len),
            opaque: 0,
            cas: 0,
        }
        .encode(out);
        out.extend_from_slice(&extras);
        out.push(b'h');
    };
    let mut seen = Vec::new();
    // Bodies of 4 GB and of 2 GB: the header alone, what the server says,
    // then 16 MB of the body, and whether the connection is still open
    // (memcached reads a length of 2 GB or more as a negative int: it
    // swallows nothing and reads the body as requests).
    for (name, value_len) in [("4 GB", u32::MAX - 9), ("2 GB", (1 << 31) - 10)] {
        let mut req = Vec::new();
        set_header(value_len, &mut req);
        let mut c = Client::connect(addr)?;
        c.s.set_read_timeout(Some(Duration::from_secs(1)))?;
        c.send(&req)?;
        let reply = c.describe_next();
        let junk = vec![0u8; 1 << 20];
        let mut sent = 0;
        while sent < 16 && c.send(&junk).is_ok() {
            sent += 1;
        }
        let then = c.describe_next();
        seen.push(format!(
            "{name} body: {reply}, then {sent} MB of the body taken, then {then}"
        ));
    }
    // -I + 1: refused, swallowed, then the connection goes on.
    {
        let mut req = Vec::new();
        set_header((1 << 20) + 1, &mut req);
        req.resize(req.len() + (1 << 20) + 1, b'x');
        binary::request(&mut req, Opcode::Noop as u8, 9, 0, &[], &[], &[]);
        let mut c = Client::connect(addr)?;
        c.send(&req)?;
        let first = c.describe_next();
        let second = c.describe_next();
        seen.push(format!("-I + 1 body: {first}, then {second}"));
    }
    // 1 MB announced, half sent, held.
    let mut held = Vec::new();
    for _ in 0..scale.partial_bodies {
        let mut req = Vec::new();
        set_header(BIG as u32, &mut req);
        req.resize(req.len() + BIG / 2, b'p');
        let mut c = Client::connect(addr)?;
        c.send(&req)?;
        held.push(c);
    }
    std::thread::sleep(scale.hold);
    drop(held);
    seen.push(format!(
        "{} connections held half of an announced 1 MB value for {:.1}s",
        scale.partial_bodies,
        scale.hold.as_secs_f64()
    ));
    Ok(seen.join("; "))
}

// ---------------------------------------------------------------------------
// Clients.

fn connect(addr: SocketAddr) -> anyhow::Result<TcpStream> {
    let s = TcpStream::connect_timeout(&addr, Duration::from_secs(5))
        .with_context(|| format!("connecting to {addr}"))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    s.set_write_timeout(Some(Duration::from_secs(10)))?;
    s.set_nodelay(true)?;
    Ok(s)
}

/// Close with a TCP reset (SO_LINGER 0), as a crashed client's kernel does.
fn reset(s: TcpStream) {
    let _ = socket2::SockRef::from(&s).set_linger(Some(Duration::ZERO));
}

/// One request, built by the protocol crate's encoders.
fn request(encode: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
    let mut out = Vec::new();
    encode(&mut out);
    out
}

/// `get big big ...`: the 1 MB value named `n` times.
fn get_big(n: usize) -> Vec<u8> {
    request(|o| text::retrieve(o, Retrieve::Get, std::iter::repeat_n(&b"big"[..], n)))
}

/// `len` bytes that depend on `seed`, so a value read back can be checked.
fn pattern(len: usize, seed: u64) -> Vec<u8> {
    (0..len as u64)
        .map(|i| b'a' + ((i.wrapping_mul(31) ^ seed) % 26) as u8)
        .collect()
}

/// A connection with the protocol crate's reply parser.
struct Client {
    s: TcpStream,
    p: ReplyParser,
}

impl Client {
    fn connect(addr: SocketAddr) -> anyhow::Result<Client> {
        Ok(Client {
            s: connect(addr)?,
            p: ReplyParser::new(),
        })
    }

    fn send(&mut self, bytes: &[u8]) -> anyhow::Result<()> {
        Ok(self.s.write_all(bytes)?)
    }

    /// Apply `f` to the next reply frame.
    fn next<T>(&mut self, f: impl FnOnce(&Reply<'_>) -> T) -> anyhow::Result<T> {
        Ok(f(&self.p.pull_from(&mut self.s)?.reply))
    }

    fn expect_line(&mut self, want: &[u8]) -> anyhow::Result<()> {
        let got = self.next(|r| match r {
            Reply::Line(l) if *l == want => None,
            Reply::Line(l) => Some(String::from_utf8_lossy(l).into_owned()),
            other => Some(format!("{other:?}")),
        })?;
        match got {
            None => Ok(()),
            Some(got) => bail!("expected {:?}, got {got:?}", String::from_utf8_lossy(want)),
        }
    }

    fn set(&mut self, key: &[u8], value: &[u8]) -> anyhow::Result<()> {
        self.send(&request(|o| Store::new(StoreOp::Set, key, value).encode(o)))?;
        self.expect_line(b"STORED")
    }

    /// Read one retrieval's reply (values up to `END`).
    fn skip_retrieval(&mut self) -> anyhow::Result<()> {
        while self.next(|r| !matches!(r, Reply::Line(b"END")))? {}
        Ok(())
    }

    /// The next reply as a short description, or why there was none.
    fn describe_next(&mut self) -> String {
        match self.next(|r| match r {
            Reply::Binary(b) => format!("binary status {:#06x}", b.header.vbucket_or_status),
            other => String::from_utf8_lossy(other.code()).into_owned(),
        }) {
            Ok(s) => s,
            Err(e) => match e.downcast_ref::<std::io::Error>().map(std::io::Error::kind) {
                Some(std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
                    "no reply".to_string()
                }
                _ => format!("{e}"),
            },
        }
    }
}

/// The client that keeps being served during a probe.
struct Watcher {
    stop: Arc<AtomicBool>,
    handle: JoinHandle<Watch>,
}

impl Watcher {
    fn start(addr: SocketAddr) -> Watcher {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let handle = std::thread::spawn(move || {
            let mut w = Watch::default();
            let mut conn: Option<Client> = None;
            while !flag.load(Ordering::Relaxed) {
                let t = Instant::now();
                let ok = (|| -> anyhow::Result<bool> {
                    if conn.is_none() {
                        let c = Client::connect(addr)?;
                        c.s.set_read_timeout(Some(Duration::from_secs(5)))?;
                        conn = Some(c);
                    }
                    let c = conn.as_mut().context("no connection")?;
                    c.send(&request(|o| text::get(o, b"watch")))?;
                    let hit = c.next(|r| {
                        matches!(
                            r,
                            Reply::Value {
                                data: b"still here",
                                ..
                            }
                        )
                    })?;
                    c.expect_line(b"END")?;
                    Ok(hit)
                })()
                .unwrap_or(false);
                if ok {
                    w.answered += 1;
                    w.max_latency = w.max_latency.max(t.elapsed());
                } else {
                    w.failed += 1;
                    conn = None;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            w
        });
        Watcher { stop, handle }
    }

    fn finish(self) -> Watch {
        self.stop.store(true, Ordering::Relaxed);
        self.handle.join().unwrap_or_default()
    }
}

// ---------------------------------------------------------------------------
// Resident memory.

/// The server's resident memory now ([`crate::rss`]).
fn rss(pid: u32) -> anyhow::Result<Rss> {
    crate::rss::read(pid).with_context(|| format!("reading /proc/{pid}/status"))
}

/// Raise this process's open-file limit to `want` (within the hard limit).
fn raise_nofile(want: u64) -> anyhow::Result<()> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we pass.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        bail!("getrlimit: {}", std::io::Error::last_os_error());
    }
    if lim.rlim_cur >= want {
        return Ok(());
    }
    ensure!(
        lim.rlim_max >= want,
        "{want} open files needed, hard limit is {} (raise it: ulimit -Hn)",
        lim.rlim_max
    );
    lim.rlim_cur = want;
    // SAFETY: setrlimit reads the struct we pass.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) } != 0 {
        bail!("setrlimit: {}", std::io::Error::last_os_error());
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// `cachalot-lab hostile`

#[derive(clap::Args, Debug)]
pub struct HostileArgs {
    /// Probes to run (default: all), each against a fresh server.
    #[arg(long, value_enum)]
    pub probe: Vec<Probe>,
    /// Servers, side by side: each probe runs against each in turn.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "cachalot,memcached"
    )]
    pub servers: Vec<ServerKind>,
    /// `-m` in megabytes.
    #[arg(short = 'm', long = "memory", default_value_t = 64)]
    pub memory_mb: u64,
    /// `-t` worker threads.
    #[arg(short = 't', long, default_value_t = 4)]
    pub threads: u32,
    /// The test suite's small sizes instead of the full ones.
    #[arg(long)]
    pub small: bool,
    /// Runs of each probe per server, alternating which server goes first;
    /// the table shows medians.
    #[arg(long, default_value_t = 1)]
    pub repeat: usize,
    /// The cachalot binary (default: CACHALOT_BIN, or target/release/cachalot).
    #[arg(long)]
    pub cachalot_bin: Option<std::path::PathBuf>,
}

pub fn run(args: HostileArgs) -> anyhow::Result<()> {
    let scale = if args.small {
        Scale::small()
    } else {
        Scale::full()
    };
    let probes = if args.probe.is_empty() {
        Probe::ALL.to_vec()
    } else {
        args.probe.clone()
    };
    let limit_kb = (args.memory_mb + 16) * 1024;
    let mb = |kb: u64| format!("{:.1}", kb as f64 / 1024.0);
    let median = |mut v: Vec<u64>| {
        v.sort_unstable();
        v[v.len() / 2]
    };
    let mut broken = Vec::new();
    println!(
        "| probe | server | RSS before MB | peak RSS MB (median, range) | RSS after MB | \
         watcher: answered / failed, worst latency | outcome (last run) |"
    );
    println!("|---|---|---|---|---|---|---|");
    for &probe in &probes {
        let mut runs: Vec<Vec<ProbeReport>> = vec![Vec::new(); args.servers.len()];
        for rep in 0..args.repeat.max(1) {
            // Alternate which server goes first.
            let mut order: Vec<usize> = (0..args.servers.len()).collect();
            if rep % 2 == 1 {
                order.reverse();
            }
            for i in order {
                runs[i].push(run_fresh(
                    probe,
                    args.servers[i],
                    args.memory_mb,
                    args.threads,
                    &scale,
                    args.cachalot_bin.as_deref(),
                )?);
            }
        }
        for (kind, rs) in args.servers.iter().zip(runs) {
            let peaks: Vec<u64> = rs.iter().map(|r| r.peak_kb).collect();
            let (lo, hi) = (
                peaks.iter().min().copied().unwrap_or(0),
                peaks.iter().max().copied().unwrap_or(0),
            );
            let answered: u64 = rs.iter().map(|r| r.watch.answered).sum();
            let failed: u64 = rs.iter().map(|r| r.watch.failed).sum();
            let worst = rs
                .iter()
                .map(|r| r.watch.max_latency)
                .max()
                .unwrap_or_default();
            println!(
                "| {} | {} | {} | {} ({}-{}) | {} | {answered} / {failed}, {:.1} ms | {} |",
                probe.name(),
                kind.name(),
                mb(median(rs.iter().map(|r| r.before_kb).collect())),
                mb(median(peaks)),
                mb(lo),
                mb(hi),
                mb(median(rs.iter().map(|r| r.after_kb).collect())),
                worst.as_secs_f64() * 1e3,
                rs.last().map(|r| r.outcome.as_str()).unwrap_or("")
            );
            if *kind == ServerKind::Cachalot && (hi > limit_kb || failed > 0) {
                broken.push(probe.name());
            }
        }
    }
    if !broken.is_empty() {
        bail!(
            "cachalot went over -m + 16 MB or left the watcher unanswered in: {}",
            broken.join(", ")
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_differ_by_seed_and_scales_grow() {
        assert_eq!(pattern(5, 1).len(), 5);
        assert_ne!(pattern(64, 1), pattern(64, 2));
        let (s, f) = (Scale::small(), Scale::full());
        assert!(s.multiget_keys < f.multiget_keys && s.idle_conns < f.idle_conns);
    }
}
