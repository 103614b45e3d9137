//! The throughput benchmark's closed-loop load: N connections, each sending a
//! batch of `depth` requests (a mix of `get` and `set` on uniformly random
//! keys), waiting for all the replies, and sending the next batch. Depth 1 is
//! "pipelining off" (one request in flight per connection); depth > 1 is
//! "pipelining on".
//!
//! The connections are driven by mio event loops, a few per thread, instead
//! of one blocking thread per connection: on this 2-core machine the load
//! generator shares the CPU with the server, and 50 threads doing blocking
//! round trips would spend much of it on context switches, measuring the
//! scheduler more than the server.
//!
//! Latency is per request: from the moment its batch was handed to the
//! kernel to the moment its whole reply was parsed, recorded in an HdrHistogram
//! (Gil Tene's High Dynamic Range histogram, via the `hdrhistogram` crate).

use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use mio::{Events, Interest, Poll, Token};

use cachalot_protocol::client::request::text::{self, Store, StoreOp};
use cachalot_protocol::client::{parse_reply, parse_single_get, Reply};

use crate::keys::{KeyMaker, Rng};

#[derive(Clone, Debug)]
pub struct LoadConfig {
    pub addr: String,
    pub conns: usize,
    pub threads: usize,
    pub duration: Duration,
    pub get_ratio: f64,
    pub keys: u64,
    pub key_len: usize,
    pub value_size: usize,
    pub depth: usize,
    /// Keys per `get` (a multi-get when above 1; its hits are counted per
    /// key, the request once).
    pub multiget: usize,
    pub seed: u64,
    /// Requests a second at most over all connections (0: closed loop, as
    /// fast as replies come). A connection whose replies are in waits for
    /// its turn, so the load is a steady rate while the server keeps up.
    pub rate: f64,
}

pub struct LoadResult {
    pub gets: u64,
    pub sets: u64,
    pub hits: u64,
    pub errors: u64,
    pub secs: f64,
    /// Per-request latency in nanoseconds.
    pub hist: Histogram<u64>,
}

impl LoadResult {
    fn new() -> Self {
        LoadResult {
            gets: 0,
            sets: 0,
            hits: 0,
            errors: 0,
            secs: 0.0,
            // 1 ns .. 60 s at 3 significant digits.
            hist: Histogram::new_with_bounds(1, 60_000_000_000, 3)
                .expect("constant histogram bounds are valid"),
        }
    }

    fn merge(&mut self, other: &LoadResult) {
        self.gets += other.gets;
        self.sets += other.sets;
        self.hits += other.hits;
        self.errors += other.errors;
        self.secs = self.secs.max(other.secs);
        // Same bounds on both sides, so adding cannot fail.
        let _ = self.hist.add(&other.hist);
    }

    pub fn ops(&self) -> u64 {
        self.gets + self.sets
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Get,
    /// A `get` of several keys: VALUEs, then END.
    Multi,
    Set,
}

struct Conn {
    stream: mio::net::TcpStream,
    out: Vec<u8>,
    out_pos: usize,
    inb: Vec<u8>,
    in_len: usize,
    pending: VecDeque<Kind>,
    sent_at: Instant,
    done: bool,
}

/// One thread's random requests: uniform keys, `get` with probability
/// `get_ratio`, else a `set` of bytes cut from a random pool.
struct Mix<'a> {
    cfg: &'a LoadConfig,
    keys: KeyMaker,
    rng: Rng,
    pool: Vec<u8>,
    /// The key being encoded, reused so that a batch allocates nothing.
    key: Vec<u8>,
}

impl<'a> Mix<'a> {
    fn new(cfg: &'a LoadConfig, seed: u64) -> io::Result<Mix<'a>> {
        let keys = KeyMaker::new(cfg.key_len).map_err(io::Error::other)?;
        let mut rng = Rng::new(seed);
        let mut pool = vec![0u8; cfg.value_size + 4096];
        rng.fill_bytes(&mut pool);
        let key = Vec::with_capacity(keys.len());
        Ok(Mix {
            cfg,
            keys,
            rng,
            pool,
            key,
        })
    }

    /// Appends one batch of `depth` requests to `out`.
    fn batch(&mut self, out: &mut Vec<u8>, pending: &mut VecDeque<Kind>) {
        let (cfg, rng, key) = (self.cfg, &mut self.rng, &mut self.key);
        for _ in 0..cfg.depth {
            key.clear();
            self.keys.write(rng.below(cfg.keys), key);
            if rng.unit() < cfg.get_ratio && cfg.multiget > 1 {
                out.extend_from_slice(b"get");
                for i in 0..cfg.multiget {
                    if i > 0 {
                        key.clear();
                        self.keys.write(rng.below(cfg.keys), key);
                    }
                    out.push(b' ');
                    out.extend_from_slice(key);
                }
                out.extend_from_slice(b"\r\n");
                pending.push_back(Kind::Multi);
            } else if rng.unit() < cfg.get_ratio {
                text::get(out, key);
                pending.push_back(Kind::Get);
            } else {
                let off = rng.below((self.pool.len() - cfg.value_size) as u64 + 1) as usize;
                let value = &self.pool[off..off + cfg.value_size];
                Store::new(StoreOp::Set, key, value).encode(out);
                pending.push_back(Kind::Set);
            }
        }
    }
}

/// Writes what it can of `c.out`; false when the socket is full.
fn flush(c: &mut Conn) -> io::Result<()> {
    while c.out_pos < c.out.len() {
        match c.stream.write(&c.out[c.out_pos..]) {
            Ok(0) => return Err(io::Error::new(io::ErrorKind::WriteZero, "write returned 0")),
            Ok(n) => c.out_pos += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    c.out.clear();
    c.out_pos = 0;
    Ok(())
}

/// Reads everything available and consumes complete replies. Returns false
/// when the server closed the connection.
fn read_replies(c: &mut Conn, res: &mut LoadResult) -> io::Result<bool> {
    loop {
        if c.in_len == c.inb.len() {
            let n = c.inb.len() * 2;
            c.inb.resize(n, 0);
        }
        let room = c.inb.len() - c.in_len;
        match c.stream.read(&mut c.inb[c.in_len..]) {
            Ok(0) => return Ok(false),
            Ok(n) => {
                c.in_len += n;
                // A short read emptied the socket's receive queue; more data
                // will raise a new edge, so skip the read that would only
                // say WouldBlock (one syscall per reply saved).
                if n < room {
                    break;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    let mut pos = 0;
    while let Some(&kind) = c.pending.front() {
        let buf = &c.inb[pos..c.in_len];
        if kind == Kind::Multi {
            // Whole replies only: nothing is taken until its END is in.
            let Some((hits, used)) = parse_multi_get(buf)? else {
                break;
            };
            res.gets += 1;
            res.hits += hits;
            pos += used;
            c.pending.pop_front();
            let ns = c.sent_at.elapsed().as_nanos().min(u128::from(u64::MAX)) as u64;
            res.hist.saturating_record(ns.max(1));
            continue;
        }
        let parsed = match kind {
            Kind::Get | Kind::Multi => parse_single_get(buf),
            Kind::Set => parse_reply(buf),
        };
        let Some((reply, used)) = parsed.map_err(io::Error::other)? else {
            break;
        };
        let ok = match kind {
            Kind::Get | Kind::Multi => {
                res.gets += 1;
                res.hits += u64::from(matches!(reply, Reply::Value { .. }));
                matches!(reply, Reply::Value { .. } | Reply::Line(b"END"))
            }
            Kind::Set => {
                res.sets += 1;
                reply == Reply::Line(b"STORED")
            }
        };
        res.errors += u64::from(!ok);
        pos += used;
        c.pending.pop_front();
        let ns = c.sent_at.elapsed().as_nanos().min(u128::from(u64::MAX)) as u64;
        res.hist.saturating_record(ns.max(1));
    }
    c.inb.copy_within(pos..c.in_len, 0);
    c.in_len -= pos;
    Ok(true)
}

/// A multi-get's whole reply at the front of `buf`: its hits and length,
/// None while incomplete; an error for anything but VALUEs and END.
fn parse_multi_get(buf: &[u8]) -> io::Result<Option<(u64, usize)>> {
    let (mut hits, mut at) = (0, 0);
    loop {
        match parse_reply(&buf[at..]).map_err(io::Error::other)? {
            None => return Ok(None),
            Some((Reply::Value { .. }, n)) => (hits, at) = (hits + 1, at + n),
            Some((Reply::Line(b"END"), n)) => return Ok(Some((hits, at + n))),
            Some((other, _)) => {
                return Err(io::Error::other(format!("a multi-get answered {other:?}")))
            }
        }
    }
}

fn run_thread(cfg: &LoadConfig, conns: usize, seed: u64) -> io::Result<LoadResult> {
    let mut mix = Mix::new(cfg, seed)?;
    let mut poll = Poll::new()?;
    let mut list = Vec::with_capacity(conns);
    for i in 0..conns {
        let std_stream = crate::capacity::connect(&cfg.addr)?;
        std_stream.set_nonblocking(true)?;
        let mut stream = mio::net::TcpStream::from_std(std_stream);
        poll.registry().register(
            &mut stream,
            Token(i),
            Interest::READABLE | Interest::WRITABLE,
        )?;
        list.push(Conn {
            stream,
            out: Vec::with_capacity(4096),
            out_pos: 0,
            inb: vec![0u8; 16384],
            in_len: 0,
            pending: VecDeque::with_capacity(cfg.depth),
            sent_at: Instant::now(),
            done: false,
        });
    }
    let mut res = LoadResult::new();
    let start = Instant::now();
    let deadline = start + cfg.duration;
    // A server that stops answering must not hang the benchmark forever.
    let give_up = deadline + Duration::from_secs(10);
    // With a rate: this thread's share of it, one batch per `interval`,
    // sent on a connection whose replies are in (`idle`).
    let interval = (cfg.rate > 0.0).then(|| {
        let share = cfg.rate * conns as f64 / cfg.conns as f64;
        Duration::from_secs_f64(cfg.depth as f64 / share)
    });
    let mut idle: VecDeque<usize> = VecDeque::new();
    let mut next_due = start;
    for (i, c) in list.iter_mut().enumerate() {
        if interval.is_some() {
            idle.push_back(i);
            continue;
        }
        mix.batch(&mut c.out, &mut c.pending);
        c.sent_at = Instant::now();
        flush(c)?;
    }
    let mut active = list.len();
    let mut events = Events::with_capacity(1024);
    while active > 0 {
        let now = Instant::now();
        if now > give_up {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("{active} connections still waiting for replies 10 s after the end"),
            ));
        }
        if let Some(every) = interval {
            while now < deadline && now >= next_due {
                let Some(i) = idle.pop_front() else {
                    break;
                };
                let c = &mut list[i];
                mix.batch(&mut c.out, &mut c.pending);
                c.sent_at = now;
                flush(c)?;
                next_due += every;
            }
            if now >= deadline {
                for i in idle.drain(..) {
                    list[i].done = true;
                    active -= 1;
                }
                if active == 0 {
                    break;
                }
            }
        }
        let wait = match interval {
            Some(_) if !idle.is_empty() => next_due.saturating_duration_since(now),
            _ => Duration::from_millis(100),
        };
        // A signal (an operator's SIGSTOP/SIGCONT) interrupts the wait: poll again.
        match poll.poll(&mut events, Some(wait.min(Duration::from_millis(100)))) {
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => events.clear(),
            r => r?,
        }
        for ev in events.iter() {
            let i = ev.token().0;
            let Some(c) = list.get_mut(i) else {
                continue;
            };
            if c.done {
                continue;
            }
            if ev.is_writable() {
                flush(c)?;
            }
            if ev.is_readable() || ev.is_read_closed() {
                if !read_replies(c, &mut res)? {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "server closed a connection during the load",
                    ));
                }
                if c.pending.is_empty() {
                    if Instant::now() >= deadline {
                        c.done = true;
                        active -= 1;
                    } else if interval.is_some() {
                        idle.push_back(i);
                    } else {
                        mix.batch(&mut c.out, &mut c.pending);
                        c.sent_at = Instant::now();
                        flush(c)?;
                    }
                }
            }
        }
    }
    res.secs = start.elapsed().as_secs_f64();
    Ok(res)
}

/// Runs the load on `cfg.threads` threads sharing `cfg.conns` connections.
pub fn run(cfg: &LoadConfig) -> io::Result<LoadResult> {
    if cfg.keys == 0 || cfg.depth == 0 || cfg.conns == 0 {
        return Err(io::Error::other("keys, depth and conns must be positive"));
    }
    let threads = cfg.threads.clamp(1, cfg.conns);
    let results: Vec<io::Result<LoadResult>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                // Spread connections as evenly as possible.
                let n = cfg.conns / threads + usize::from(t < cfg.conns % threads);
                let seed = cfg.seed ^ (t as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
                s.spawn(move || run_thread(cfg, n, seed))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(io::Error::other("load thread panicked")))
            })
            .collect()
    });
    let mut total = LoadResult::new();
    for r in results {
        total.merge(&r?);
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(get_ratio: f64, depth: usize) -> LoadConfig {
        LoadConfig {
            addr: String::new(),
            conns: 1,
            threads: 1,
            duration: Duration::from_secs(1),
            get_ratio,
            keys: 1000,
            key_len: 14,
            value_size: 8,
            depth,
            multiget: 1,
            seed: 1,
            rate: 0.0,
        }
    }

    #[test]
    fn batches_follow_the_mix_and_depth() {
        let c = cfg(0.9, 10_000);
        let mut mix = Mix::new(&c, 9).unwrap();
        mix.pool.fill(b'x');
        let mut out = Vec::new();
        let mut pending = VecDeque::new();
        mix.batch(&mut out, &mut pending);
        assert_eq!(pending.len(), 10_000);
        let gets = pending.iter().filter(|&&k| k == Kind::Get).count();
        assert!((8_700..9_300).contains(&gets), "{gets} gets of 10000");
        // Every request is well formed: count the lines of each kind.
        let text = String::from_utf8(out).unwrap();
        let get_lines = text.lines().filter(|l| l.starts_with("get key:")).count();
        let set_lines = text
            .lines()
            .filter(|l| l.starts_with("set key:") && l.ends_with(" 0 0 8"))
            .count();
        assert_eq!(get_lines, gets);
        assert_eq!(set_lines, 10_000 - gets);
    }

    #[test]
    fn multi_gets_name_their_keys_and_read_whole_replies() {
        let mut c = cfg(1.0, 3);
        c.multiget = 10;
        let mut mix = Mix::new(&c, 9).unwrap();
        let (mut out, mut pending) = (Vec::new(), VecDeque::new());
        mix.batch(&mut out, &mut pending);
        assert!(pending.iter().all(|&k| k == Kind::Multi));
        let text = String::from_utf8(out).unwrap();
        assert_eq!(text.lines().count(), 3);
        assert!(text.lines().all(|l| l.split(' ').count() == 11), "{text}");
        let reply = b"VALUE a 0 1\r\nx\r\nVALUE b 0 2\r\nyz\r\nEND\r\nEND\r\n";
        assert_eq!(parse_multi_get(reply).unwrap(), Some((2, reply.len() - 5)));
        assert_eq!(parse_multi_get(&reply[..20]).unwrap(), None);
        assert!(parse_multi_get(b"STORED\r\n").is_err());
    }

    #[test]
    fn all_sets_when_ratio_is_zero() {
        let c = cfg(0.0, 50);
        let mut mix = Mix::new(&c, 9).unwrap();
        mix.pool.fill(b'x');
        let mut out = Vec::new();
        let mut pending = VecDeque::new();
        mix.batch(&mut out, &mut pending);
        assert!(pending.iter().all(|&k| k == Kind::Set));
    }

    /// A tiny fake server answering every get with a miss and every set
    /// with STORED, on one connection; its thread returns the requests it
    /// answered.
    fn scripted_server() -> (String, std::thread::JoinHandle<u64>) {
        use std::io::BufRead;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let server = std::thread::spawn(move || {
            let (s, _) = listener.accept().unwrap();
            let mut w = s.try_clone().unwrap();
            let mut r = std::io::BufReader::new(s);
            let mut line = String::new();
            let mut n = 0u64;
            while r.read_line(&mut line).unwrap_or(0) > 0 {
                if line.starts_with("get ") {
                    w.write_all(b"END\r\n").unwrap();
                    n += 1;
                } else if line.starts_with("set ") {
                    let mut data = vec![0u8; 8 + 2];
                    r.read_exact(&mut data).unwrap();
                    w.write_all(b"STORED\r\n").unwrap();
                    n += 1;
                }
                line.clear();
            }
            n
        });
        (addr, server)
    }

    /// A rate caps the load: about rate x duration requests, not as many
    /// as the server would answer.
    #[test]
    fn a_rate_caps_the_load() {
        let (addr, server) = scripted_server();
        let mut c = cfg(1.0, 1);
        c.addr = addr;
        c.duration = Duration::from_millis(500);
        c.rate = 400.0;
        let res = run(&c).unwrap();
        assert!((150..=205).contains(&res.ops()), "{} requests", res.ops());
        assert_eq!(server.join().unwrap(), res.ops());
    }

    #[test]
    fn load_against_a_scripted_server() {
        // Checks the closed loop counts and terminates.
        let (addr, server) = scripted_server();
        let mut c = cfg(0.5, 4);
        c.addr = addr;
        c.duration = Duration::from_millis(200);
        let res = run(&c).unwrap();
        assert!(res.ops() > 0);
        assert_eq!(res.errors, 0);
        assert_eq!(res.hits, 0);
        assert_eq!(res.ops() % 4, 0, "whole batches only");
        assert_eq!(res.hist.len(), res.ops());
        let served = server.join().unwrap();
        assert_eq!(
            served,
            res.ops(),
            "every request sent was answered and counted"
        );
    }
}
