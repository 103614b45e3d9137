//! `loadgen`: the load generator behind benches/capacity.sh and
//! benches/throughput.sh, which compare cachalot with memcached 1.6 on the
//! same machine (see docs/benchmarks-history.md for the method and the results).
//!
//! Subcommands print `name=value` lines so the shell scripts can tabulate
//! them without a parser:
//!   free-port                       a free 127.0.0.1 TCP port
//!   wait     --addr A [--timeout-ms 5000] [--poll-ms 50] [--get KEY]
//!            until A answers `version` (or, with --get, a hit for KEY)
//!   stats    --addr A               the `stats` reply
//!   fill     --addr A --items N --value-size V [--key-len 14] [--proto text|meta]
//!            [--values random|json|proto|text]
//!   capacity --addr A --pid P --items N --value-size V [--key-len 14]
//!            [--proto text|meta] [--bands 10] [--settle-ms 1000]
//!            [--values random|json|proto|text] [--fill-rate ITEMS_PER_S]
//!   load     --addr A [--conns 50] [--threads 1] [--duration 10]
//!            [--get-ratio 0.9] [--keys 100000] [--key-len 14]
//!            [--value-size 32] [--depth 1] [--warm 1] [--rate REQ_PER_S]
//!            [--multiget 1: keys per get]
//!   jitter   [--iters 200000] [--work-us 5]
//!            how long a fixed few microseconds of work take on this
//!            core, again and again: the machine's own floor under the
//!            lock holds that `stats locks` reports
//!
//! It only talks to the address it is given (the scripts pass 127.0.0.1) and
//! every run is bounded in count or time.

mod capacity;
mod jitter;
mod keys;
mod load;

use std::collections::HashMap;
use std::io::Write;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use cachalot_protocol::client::request::text;
use cachalot_protocol::client::ReplyParser;

use capacity::SetProto;
use keys::{KeyMaker, ValueKind, Values};

/// Salt of the value generator; fixed so that runs are reproducible.
const SALT: u64 = 0x6361_6368_616c_6f74;

/// `--name value` options.
struct Opts(HashMap<String, String>);

impl Opts {
    fn parse(args: &[String], allowed: &[&str]) -> Result<Self, String> {
        let mut map = HashMap::new();
        let mut it = args.iter();
        while let Some(a) = it.next() {
            let name = a
                .strip_prefix("--")
                .ok_or_else(|| format!("expected --option, got {a:?}"))?;
            if !allowed.contains(&name) {
                return Err(format!("unknown option --{name} (allowed: {allowed:?})"));
            }
            let v = it.next().ok_or_else(|| format!("--{name} needs a value"))?;
            map.insert(name.to_string(), v.clone());
        }
        Ok(Opts(map))
    }

    fn str(&self, name: &str) -> Result<String, String> {
        self.0
            .get(name)
            .cloned()
            .ok_or_else(|| format!("--{name} is required"))
    }

    fn num<T: std::str::FromStr>(&self, name: &str, default: Option<T>) -> Result<T, String> {
        match (self.0.get(name), default) {
            (Some(v), _) => v
                .parse()
                .map_err(|_| format!("--{name}: cannot parse {v:?}")),
            (None, Some(d)) => Ok(d),
            (None, None) => Err(format!("--{name} is required")),
        }
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some((cmd, rest)) = args.split_first() else {
        eprintln!("usage: loadgen free-port|wait|stats|fill|capacity|load|jitter [--options]");
        return ExitCode::from(2);
    };
    let r = match cmd.as_str() {
        "free-port" => free_port(),
        "wait" => {
            Opts::parse(rest, &["addr", "timeout-ms", "poll-ms", "get"]).and_then(|o| wait(&o))
        }
        "stats" => Opts::parse(rest, &["addr"]).and_then(|o| stats(&o)),
        "fill" => Opts::parse(
            rest,
            &[
                "addr",
                "items",
                "value-size",
                "key-len",
                "proto",
                "start",
                "values",
            ],
        )
        .and_then(|o| fill(&o)),
        "capacity" => Opts::parse(
            rest,
            &[
                "addr",
                "pid",
                "items",
                "value-size",
                "key-len",
                "proto",
                "bands",
                "settle-ms",
                "fill-rate",
                "values",
            ],
        )
        .and_then(|o| capacity(&o)),
        "load" => Opts::parse(
            rest,
            &[
                "addr",
                "conns",
                "threads",
                "duration",
                "get-ratio",
                "keys",
                "key-len",
                "value-size",
                "depth",
                "multiget",
                "warm",
                "seed",
                "rate",
            ],
        )
        .and_then(|o| load(&o)),
        "jitter" => Opts::parse(rest, &["iters", "work-us"]).and_then(|o| {
            jitter::run(o.num("iters", Some(200_000))?, o.num("work-us", Some(5.0))?);
            Ok(())
        }),
        other => Err(format!("unknown subcommand {other:?}")),
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("loadgen {cmd}: {e}");
            ExitCode::FAILURE
        }
    }
}

fn free_port() -> Result<(), String> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    let port = l.local_addr().map_err(|e| e.to_string())?.port();
    println!("{port}");
    Ok(())
}

/// Polls until the server accepts a connection and answers `version`.
fn wait(o: &Opts) -> Result<(), String> {
    let addr = o.str("addr")?;
    let limit = Duration::from_millis(o.num("timeout-ms", Some(5000))?);
    let poll = Duration::from_millis(o.num("poll-ms", Some(50))?);
    // With --get KEY: until `get KEY` hits (a warm restart's first hit).
    let key = o.str("get").ok();
    let start = Instant::now();
    let mut last_err = String::new();
    while start.elapsed() < limit {
        let tried = match &key {
            Some(k) => try_get(&addr, k),
            None => try_version(&addr),
        };
        match tried {
            Ok(v) => {
                println!("{v}");
                return Ok(());
            }
            Err(e) => last_err = e.to_string(),
        }
        std::thread::sleep(poll);
    }
    Err(format!("{addr} not answering after {limit:?}: {last_err}"))
}

/// `get key` until its reply ends: Ok on a hit.
fn try_get(addr: &str, key: &str) -> std::io::Result<String> {
    let mut s = capacity::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(1)))?;
    s.write_all(format!("get {key}\r\n").as_bytes())?;
    let mut reply = Vec::new();
    let mut buf = [0u8; 4096];
    while !reply.ends_with(b"END\r\n") {
        let n = std::io::Read::read(&mut s, &mut buf)?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        reply.extend_from_slice(&buf[..n]);
    }
    match reply.starts_with(b"VALUE ") {
        true => Ok(format!("hit {key}")),
        false => Err(std::io::Error::other(format!("{key}: miss"))),
    }
}

fn try_version(addr: &str) -> std::io::Result<String> {
    let mut s = capacity::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(1)))?;
    let mut req = Vec::new();
    text::line(&mut req, &[b"version"]);
    s.write_all(&req)?;
    let mut p = ReplyParser::new();
    let raw = p.pull_from(&mut s)?.raw;
    Ok(String::from_utf8_lossy(raw).trim_end().to_string())
}

fn stats(o: &Opts) -> Result<(), String> {
    for (k, v) in capacity::stats(&o.str("addr")?).map_err(|e| e.to_string())? {
        println!("{k}={v}");
    }
    Ok(())
}

fn proto(o: &Opts) -> Result<SetProto, String> {
    SetProto::parse(&o.0.get("proto").cloned().unwrap_or_else(|| "text".into()))
}

fn key_maker(o: &Opts, items: u64) -> Result<KeyMaker, String> {
    let keys = KeyMaker::new(o.num("key-len", Some(14))?)?;
    if items > keys.capacity() {
        return Err(format!(
            "{items} items do not fit in {}-byte keys",
            keys.len()
        ));
    }
    Ok(keys)
}

fn fill(o: &Opts) -> Result<(), String> {
    let addr = o.str("addr")?;
    let start: u64 = o.num("start", Some(0))?;
    let items: u64 = o.num("items", None)?;
    let values = values(o)?;
    let keys = key_maker(o, start.saturating_add(items))?;
    let r = capacity::fill(&addr, &keys, start..start + items, &values, proto(o)?, None)
        .map_err(|e| e.to_string())?;
    print_fill(&r);
    Ok(())
}

/// `--value-size` bytes of `--values` contents (random by default).
fn values(o: &Opts) -> Result<Values, String> {
    let name = o.0.get("values").map_or("random", String::as_str);
    let kind = ValueKind::ALL
        .into_iter()
        .find(|k| k.name() == name)
        .ok_or_else(|| format!("--values {name}: random, json, proto or text"))?;
    Ok(Values {
        kind,
        size: o.num("value-size", None)?,
        salt: SALT,
    })
}

fn print_fill(r: &capacity::FillResult) {
    println!("fill_items={}", r.items);
    println!("fill_secs={:.3}", r.secs);
    println!("fill_rate={:.0}", r.items as f64 / r.secs.max(1e-9));
    println!("fill_unexpected_replies={}", r.unexpected);
    for (i, u) in r.first_unexpected.iter().enumerate() {
        println!("fill_unexpected_{i}={u}");
    }
}

/// Fill, settle, read stats and memory, then re-read everything by bands of
/// write order (the last band is the most recent 10% with 10 bands).
fn capacity(o: &Opts) -> Result<(), String> {
    let addr = o.str("addr")?;
    let pid: u32 = o.num("pid", None)?;
    let items: u64 = o.num("items", None)?;
    let values = values(o)?;
    let vsize = values.size;
    let bands: usize = o.num("bands", Some(10))?;
    let settle = Duration::from_millis(o.num("settle-ms", Some(1000))?);
    let keys = key_maker(o, items)?;
    let before = cachalot_lab::rss::read(pid).map_err(|e| format!("pid {pid}: {e}"))?;
    let sampler = cachalot_lab::rss::Sampler::start(pid, Duration::from_millis(10));
    let rate: u64 = o.num("fill-rate", Some(0))?;
    let r = capacity::fill(&addr, &keys, 0..items, &values, proto(o)?, Some(rate))
        .map_err(|e| e.to_string())?;
    // Let background work (memcached's LRU maintainer, any lazy frees) run
    // while we keep sampling, so "after the fill" is really after it.
    std::thread::sleep(settle);
    let st = capacity::stats(&addr).map_err(|e| e.to_string())?;
    let rr =
        capacity::reread(&addr, &keys, 0..items, &values, 100, bands).map_err(|e| e.to_string())?;
    let rss_max = sampler.finish();
    let after = cachalot_lab::rss::read(pid).map_err(|e| format!("pid {pid}: {e}"))?;

    println!("key_len={}", keys.len());
    println!("value_size={vsize}");
    println!("values={}", values.kind.name());
    print_fill(&r);
    for name in [
        "curr_items",
        "total_items",
        "evictions",
        "bytes",
        "limit_maxbytes",
        "version",
        // With a flash tier (memcached's extstore, cachalot's): the items
        // and bytes on it, under memcached's names.
        "extstore_objects_used",
        "extstore_bytes_used",
    ] {
        let v = st
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
            .unwrap_or("n/a");
        println!("{name}={v}");
    }
    println!("rss_start_kb={}", before.rss_kb);
    println!("rss_max_sampled_kb={rss_max}");
    println!("vm_hwm_kb={}", after.hwm_kb);
    println!("rss_end_kb={}", after.rss_kb);
    let hits: u64 = rr.bands.iter().map(|b| b.0).sum();
    println!("reread_hits={hits}");
    println!("reread_secs={:.3}", rr.secs);
    println!("reread_corrupt={}", rr.corrupt);
    let pct: Vec<String> = rr
        .bands
        .iter()
        .map(|&(h, n)| format!("{:.1}", 100.0 * h as f64 / n.max(1) as f64))
        .collect();
    println!("band_hit_pct={}", pct.join(","));
    if let Some(&(h, n)) = rr.bands.last() {
        println!("recent_hits={h}");
        println!("recent_keys={n}");
        println!("recent_hit_pct={:.1}", 100.0 * h as f64 / n.max(1) as f64);
    }
    Ok(())
}

fn load(o: &Opts) -> Result<(), String> {
    let cfg = load::LoadConfig {
        addr: o.str("addr")?,
        conns: o.num("conns", Some(50))?,
        threads: o.num("threads", Some(1))?,
        duration: Duration::from_secs_f64(o.num("duration", Some(10.0))?),
        get_ratio: o.num("get-ratio", Some(0.9))?,
        keys: o.num("keys", Some(100_000))?,
        key_len: o.num("key-len", Some(14))?,
        value_size: o.num("value-size", Some(32))?,
        depth: o.num("depth", Some(1))?,
        multiget: o.num("multiget", Some(1))?,
        seed: o.num("seed", Some(1))?,
        rate: o.num("rate", Some(0.0))?,
    };
    let _ = key_maker(o, cfg.keys)?;
    if o.num("warm", Some(1u8))? != 0 {
        // Every key exists before the clock starts, so gets measure hits.
        let keys = KeyMaker::new(cfg.key_len)?;
        let w = capacity::fill(
            &cfg.addr,
            &keys,
            0..cfg.keys,
            &Values {
                kind: ValueKind::Random,
                size: cfg.value_size,
                salt: SALT,
            },
            SetProto::Text,
            None,
        )
        .map_err(|e| format!("warm-up: {e}"))?;
        eprintln!("warmed {} keys in {:.2}s", w.items, w.secs);
    }
    let r = load::run(&cfg).map_err(|e| e.to_string())?;
    let us = |q: f64| r.hist.value_at_quantile(q) as f64 / 1000.0;
    println!(
        "ops={} secs={:.3} ops_per_sec={:.0} gets={} sets={} get_hit_pct={:.2} errors={} p50_us={:.1} p99_us={:.1} p999_us={:.1} max_us={:.1}",
        r.ops(),
        r.secs,
        r.ops() as f64 / r.secs.max(1e-9),
        r.gets,
        r.sets,
        100.0 * r.hits as f64 / r.gets.max(1) as f64,
        r.errors,
        us(0.5),
        us(0.99),
        us(0.999),
        r.hist.max() as f64 / 1000.0,
    );
    Ok(())
}
