//! `cachalot-lab hotkeys`: how well a server's `stats hotkeys` names the
//! hottest keys (issue 36, criterion 1).
//!
//! Driver threads send GETs of Zipf-ranked keys at a paced rate, each
//! counting exactly what it sent in each second; the main thread asks
//! `stats hotkeys N` every quarter second. Afterwards every answer is held
//! against the exact counts of the full seconds before it (up to
//! `--window` of them, within the answer's phase): how many of the true
//! top N it named, and how far its rates are from the exact ones. With
//! `--shift-every S`, the keys' ranks move every S seconds to a disjoint
//! set (the hot set changes), and the catch-up is the time from the shift
//! to the first answer naming all but one of the new top N.
//!
//! Every GET misses (no key is stored): the counts the server keeps do
//! not depend on hits, and misses cost the server least, so the rate
//! reached is the driver's.

use std::collections::{BTreeMap, HashMap};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use serde::Serialize;

use crate::servers::{self, LocalServer, ServerConfig, ServerKind};
use crate::workload::dist::{Rng, Zipf};

#[derive(clap::Args, Debug)]
pub struct HotkeysArgs {
    /// A running server; without it, a local cachalot is started.
    #[arg(long)]
    pub server: Option<SocketAddr>,
    /// The cachalot binary to start (default: the workspace's release build).
    #[arg(long)]
    pub cachalot_bin: Option<PathBuf>,
    /// `-m` of the started server, MB.
    #[arg(long, default_value_t = 64)]
    pub memory: u64,
    /// `-t` of the started server.
    #[arg(long, default_value_t = 2)]
    pub threads: u32,
    /// Distinct keys.
    #[arg(long, default_value_t = 1_000_000)]
    pub keys: u64,
    /// Zipf exponent of the key popularity.
    #[arg(long, default_value_t = 0.99)]
    pub alpha: f64,
    /// GETs per second, all connections together.
    #[arg(long, default_value_t = 60_000.0)]
    pub rate: f64,
    /// Length of the run, seconds.
    #[arg(long, default_value_t = 20)]
    pub seconds: u64,
    /// Move the hot set every this many seconds (0: never).
    #[arg(long, default_value_t = 0)]
    pub shift_every: u64,
    /// Connections, a driver thread each.
    #[arg(long, default_value_t = 2)]
    pub conns: usize,
    /// GETs sent together on a connection before its replies are read.
    #[arg(long, default_value_t = 32)]
    pub batch: usize,
    /// Keys asked for (`stats hotkeys N`) and judged.
    #[arg(long, default_value_t = 10)]
    pub top: usize,
    /// Full seconds of exact counts an answer is held against.
    #[arg(long, default_value_t = 10)]
    pub window: u64,
    /// Seed of the key draws.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Write the answers and the verdicts here.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

/// The key of Zipf rank `rank` (from 1) in phase `phase`: each phase moves
/// every rank to a key about half the key space away.
fn key_of(rank: u64, phase: u64, keys: u64) -> u64 {
    (rank - 1 + phase * (keys / 2 + 1)) % keys
}

fn key_text(id: u64) -> String {
    format!("key:{id}")
}

/// One `stats hotkeys` answer.
#[derive(Clone, Debug, Serialize)]
struct Answer {
    /// Seconds since the start.
    at: f64,
    /// (key, requests per second), hottest first.
    keys: Vec<(String, f64)>,
}

/// An answer held against the exact counts.
#[derive(Clone, Debug, Serialize)]
struct Verdict {
    at: f64,
    phase: u64,
    /// Full seconds of counts it was judged on.
    window: u64,
    /// How many of the true top N it named.
    named: usize,
    /// The true top N: (key, exact requests per second).
    truth: Vec<(String, f64)>,
    /// Largest |reported - exact| / exact over the named true top N.
    max_rate_error: f64,
    median_rate_error: f64,
}

#[derive(Debug, Serialize)]
struct Report {
    args: String,
    server: String,
    sent: u64,
    seconds: f64,
    verdicts: Vec<Verdict>,
    answers: Vec<Answer>,
    /// Seconds from each shift to the first answer naming N-1 of the new top N.
    catch_up: Vec<Option<f64>>,
}

/// Counts of one second, by key id.
type Second = HashMap<u64, u32>;

struct Driver {
    addr: SocketAddr,
    keys: u64,
    alpha: f64,
    rate: f64,
    batch: usize,
    shift_every: u64,
    seconds: u64,
    seed: u64,
}

impl Driver {
    /// Send paced batches of GETs until the run ends; each full second's
    /// counts go to `seconds[s]`.
    fn run(
        &self,
        stream: u64,
        start: Instant,
        counts: &Mutex<BTreeMap<u64, Second>>,
    ) -> anyhow::Result<u64> {
        let mut sock = TcpStream::connect(self.addr).context("driver connect")?;
        sock.set_nodelay(true)?;
        sock.set_read_timeout(Some(Duration::from_secs(10)))?;
        let zipf = Zipf::new(self.keys, self.alpha);
        let mut rng = Rng::new(self.seed, stream);
        let mut mine: BTreeMap<u64, Second> = BTreeMap::new();
        let mut req = Vec::with_capacity(self.batch * 24);
        let mut buf = vec![0u8; self.batch * 5];
        let per_batch = Duration::from_secs_f64(self.batch as f64 / self.rate);
        let end = Duration::from_secs(self.seconds);
        let mut sent = 0u64;
        let mut due = Duration::ZERO;
        while due < end {
            let now = start.elapsed();
            if now < due {
                std::thread::sleep(due - now);
            }
            let at = start.elapsed();
            let sec = at.as_secs();
            let phase = sec.checked_div(self.shift_every).unwrap_or(0);
            req.clear();
            let second = mine.entry(sec).or_default();
            for _ in 0..self.batch {
                let id = key_of(zipf.sample(&mut rng), phase, self.keys);
                *second.entry(id).or_default() += 1;
                req.extend_from_slice(format!("get {}\r\n", key_text(id)).as_bytes());
            }
            sock.write_all(&req)?;
            // Every GET misses: its reply is END, 5 bytes.
            let want = self.batch * 5;
            let mut have = 0;
            while have < want {
                let n = sock.read(&mut buf[have..want]).context("driver read")?;
                anyhow::ensure!(n > 0, "server closed the connection");
                have += n;
            }
            anyhow::ensure!(
                buf[..want].chunks(5).all(|r| r == b"END\r\n"),
                "a GET did not miss: {:?}",
                String::from_utf8_lossy(&buf[..want.min(80)])
            );
            sent += self.batch as u64;
            due += per_batch;
            // Seconds this thread is done with go to the shared counts.
            let done: Vec<u64> = mine.range(..sec).map(|(&s, _)| s).collect();
            if !done.is_empty() {
                let mut all = counts.lock().expect("counts");
                for s in done {
                    let m = mine.remove(&s).unwrap_or_default();
                    let into = all.entry(s).or_default();
                    for (k, c) in m {
                        *into.entry(k).or_default() += c;
                    }
                }
            }
        }
        let mut all = counts.lock().expect("counts");
        for (s, m) in mine {
            let into = all.entry(s).or_default();
            for (k, c) in m {
                *into.entry(k).or_default() += c;
            }
        }
        Ok(sent)
    }
}

fn ask_hotkeys(addr: SocketAddr, n: usize) -> anyhow::Result<Vec<(String, f64)>> {
    let stats = servers::stats(addr, &format!("stats hotkeys {n}"))?;
    Ok((1..=n)
        .map_while(|r| {
            let key = stats.get(&format!("hotkeys:{r}:key"))?.clone();
            let rate = stats
                .get(&format!("hotkeys:{r}:requests_per_sec"))?
                .parse()
                .ok()?;
            Some((key, rate))
        })
        .collect())
}

fn median(v: &mut [f64]) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Hold an answer against the full seconds before it in its phase.
fn judge(a: &Answer, counts: &BTreeMap<u64, Second>, args: &HotkeysArgs) -> Option<Verdict> {
    let now = a.at.floor() as u64;
    let phase = now.checked_div(args.shift_every).unwrap_or(0);
    let phase_start = phase * args.shift_every;
    let from = now.saturating_sub(args.window).max(phase_start);
    let window = now - from;
    if window == 0 {
        return None;
    }
    let mut exact: HashMap<u64, u64> = HashMap::new();
    for (_, m) in counts.range(from..now) {
        for (&k, &c) in m {
            *exact.entry(k).or_default() += c as u64;
        }
    }
    let mut ranked: Vec<(u64, u64)> = exact.iter().map(|(&k, &c)| (k, c)).collect();
    ranked.sort_by_key(|&(k, c)| (std::cmp::Reverse(c), k));
    let truth: Vec<(String, f64)> = ranked
        .iter()
        .take(args.top)
        .map(|&(k, c)| (key_text(k), c as f64 / window as f64))
        .collect();
    let mut errors = Vec::new();
    let mut named = 0;
    for (key, rate) in &a.keys {
        if !truth.iter().any(|(k, _)| k == key) {
            continue;
        }
        named += 1;
        let id: u64 = key.strip_prefix("key:").and_then(|k| k.parse().ok())?;
        let want = exact[&id] as f64 / window as f64;
        errors.push((rate - want).abs() / want);
    }
    let max_rate_error = errors.iter().copied().fold(0.0, f64::max);
    Some(Verdict {
        at: a.at,
        phase,
        window,
        named,
        truth,
        max_rate_error,
        median_rate_error: median(&mut errors),
    })
}

pub fn run(args: HotkeysArgs) -> anyhow::Result<()> {
    let local = match args.server {
        Some(_) => None,
        None => {
            let mut cfg = ServerConfig::new(ServerKind::Cachalot, args.memory, args.threads);
            cfg.cachalot_bin = args.cachalot_bin.clone();
            Some(LocalServer::start(&cfg)?)
        }
    };
    let addr = args
        .server
        .or(local.as_ref().map(LocalServer::addr))
        .context("no server")?;
    let counts = Arc::new(Mutex::new(BTreeMap::new()));
    let start = Instant::now();
    let drivers: Vec<_> = (0..args.conns)
        .map(|i| {
            let d = Driver {
                addr,
                keys: args.keys,
                alpha: args.alpha,
                rate: args.rate / args.conns as f64,
                batch: args.batch,
                shift_every: args.shift_every,
                seconds: args.seconds,
                seed: args.seed,
            };
            let counts = counts.clone();
            std::thread::spawn(move || d.run(i as u64, start, &counts))
        })
        .collect();
    let mut answers = Vec::new();
    let end = Duration::from_secs(args.seconds);
    let mut next = Duration::from_millis(250);
    while next < end {
        if let Some(wait) = next.checked_sub(start.elapsed()) {
            std::thread::sleep(wait);
        }
        let at = start.elapsed().as_secs_f64();
        answers.push(Answer {
            at,
            keys: ask_hotkeys(addr, args.top)?,
        });
        next += Duration::from_millis(250);
    }
    let mut sent = 0;
    for d in drivers {
        sent += d
            .join()
            .map_err(|_| anyhow::anyhow!("a driver panicked"))??;
    }
    let seconds = start.elapsed().as_secs_f64();
    let counts = counts.lock().expect("counts");
    let verdicts: Vec<Verdict> = answers
        .iter()
        .filter_map(|a| judge(a, &counts, &args))
        .collect();

    // Catch-up after each shift: the first answer naming top-1 of the new
    // phase's N hottest ranks.
    let mut catch_up = Vec::new();
    if args.shift_every > 0 {
        let mut shift = args.shift_every;
        while shift < args.seconds {
            let phase = shift / args.shift_every;
            let want: Vec<String> = (1..=args.top as u64)
                .map(|r| key_text(key_of(r, phase, args.keys)))
                .collect();
            let found = answers
                .iter()
                .filter(|a| a.at >= shift as f64 && a.at < (shift + args.shift_every) as f64)
                .find(|a| a.keys.iter().filter(|(k, _)| want.contains(k)).count() + 1 >= args.top)
                .map(|a| a.at - shift as f64);
            catch_up.push(found);
            shift += args.shift_every;
        }
    }

    // The steady answers: a full window of counts behind them.
    let steady: Vec<&Verdict> = verdicts
        .iter()
        .filter(|v| v.window >= args.window.min(5))
        .collect();
    let named_min = steady.iter().map(|v| v.named).min().unwrap_or(0);
    let mut errs: Vec<f64> = steady.iter().map(|v| v.max_rate_error).collect();
    let worst = errs.iter().copied().fold(0.0, f64::max);
    println!(
        "sent {sent} GETs in {seconds:.1} s ({:.0}/s) over {} keys, Zipf {}",
        sent as f64 / seconds,
        args.keys,
        args.alpha
    );
    println!(
        "{} answers with >= {} s of counts behind them: named at least {} of the true top {} \
         (median {}); largest rate error per answer: median {:.3}, max {:.3}",
        steady.len(),
        args.window.min(5),
        named_min,
        args.top,
        median(&mut steady.iter().map(|v| v.named as f64).collect::<Vec<_>>()),
        median(&mut errs),
        worst
    );
    for (i, c) in catch_up.iter().enumerate() {
        let at = (i as u64 + 1) * args.shift_every;
        match c {
            Some(s) => println!(
                "shift at {at} s: named {}/{} after {s:.2} s",
                args.top - 1,
                args.top
            ),
            None => println!("shift at {at} s: never caught up"),
        }
    }
    if let Some(path) = &args.json {
        let report = Report {
            args: format!("{args:?}"),
            server: match &local {
                Some(l) => l.command_line().join(" "),
                None => addr.to_string(),
            },
            sent,
            seconds,
            verdicts,
            answers,
            catch_up,
        };
        std::fs::write(path, serde_json::to_string_pretty(&report)?)?;
    }
    Ok(())
}
