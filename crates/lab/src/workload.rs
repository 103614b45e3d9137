//! Workload models and the request source every lab command reads from.
//!
//! A [`Source`] is either a model (`--model NAME --param k=v ... --requests N
//! --seed S`) or a trace file (`--trace FILE`, CSV or binary, see
//! [`crate::trace`]). Models live in the submodules, one per paper; each is
//! documented with its source and parameters in docs/lab.md:
//! - [`ycsb`]: YCSB core workloads A, B, C, D, F (Cooper et al., SoCC'10) with
//!   YCSB's own generators (scrambled zipfian, latest, hotspot, uniform).
//! - [`etc`]: Facebook ETC (Atikoglu et al., SIGMETRICS'12, section 6 model).
//! - [`app`], [`usr`]: Facebook APP and USR, the other two pools zExpander
//!   (Wu et al., EuroSys'16) compares on, from the figures quoted about them.
//! - [`twitter`]: Twitter cluster-like (Yang et al., OSDI'20, cluster29 of the
//!   published per-cluster statistics as defaults).
//! - [`gdwheel`]: GD-Wheel cost workloads (Li, Rice MS thesis 2014, Tables 6.1
//!   and 6.2).
//! - [`phased`]: calcification (Carra & Michiardi, section 5.1) and the
//!   zExpander pattern switch (Wu et al., EuroSys'16, section 4.6).
//!
//! Every model is a pure function of (parameters, request count, seed): the
//! same command line gives the same requests on every machine.

use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::path::PathBuf;

use anyhow::Context;
use serde::Serialize;

use crate::trace::{Op, Request};

pub mod app;
pub mod dist;
pub mod etc;
pub mod gdwheel;
pub mod phased;
pub mod twitter;
pub mod usr;
pub mod ycsb;

/// Where requests come from: a model or a trace file. Flattened into the
/// arguments of `gen`, `replay`, `sim`, `mrc` and `compare`.
#[derive(clap::Args, Debug, Clone)]
pub struct Source {
    /// Workload model (see docs/lab.md): ycsb-a, ycsb-b, ycsb-c, ycsb-d, ycsb-f,
    /// etc, app, usr, twitter, gdwheel-<1..12>, calcification, zexpander-switch.
    #[arg(long, conflicts_with = "trace")]
    pub model: Option<String>,
    /// Model parameter as key=value (repeatable), e.g. --param keys=100000.
    #[arg(long = "param", value_parser = parse_kv)]
    pub params: Vec<(String, String)>,
    /// Read requests from a trace file (.csv or .bin) instead of a model.
    #[arg(long)]
    pub trace: Option<PathBuf>,
    /// Number of requests to generate from a model.
    #[arg(long, default_value_t = 1_000_000)]
    pub requests: u64,
    /// Random seed: the same seed gives the same requests.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

fn parse_kv(s: &str) -> Result<(String, String), String> {
    s.split_once('=')
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .ok_or_else(|| format!("expected key=value, got {s:?}"))
}

/// A stream of requests.
pub type Requests = Box<dyn Iterator<Item = Request> + Send>;

impl Source {
    /// Open the source: a model generator or a trace reader. Model parameters
    /// are checked here (an unknown or malformed `--param` is an error).
    pub fn open(&self) -> anyhow::Result<Requests> {
        match (&self.model, &self.trace) {
            (Some(m), _) => {
                let mut p = Params::new(&self.params);
                let r = build_model(m, &mut p, self.requests, self.seed)?;
                p.finish(m)?;
                Ok(Box::new(r.take(self.requests as usize)))
            }
            (None, Some(t)) => crate::trace::open(t),
            (None, None) => anyhow::bail!("give a workload: --model NAME or --trace FILE"),
        }
    }

    /// A short name for tables and JSON ("ycsb-b", "trace:foo.csv").
    pub fn name(&self) -> String {
        match (&self.model, &self.trace) {
            (Some(m), _) => m.clone(),
            (None, Some(t)) => format!("trace:{}", t.display()),
            (None, None) => "none".to_string(),
        }
    }
}

/// The model names `--model` accepts (aliases included), for help and errors.
pub const MODELS: &[&str] = &[
    "ycsb-a",
    "ycsb-b",
    "ycsb-c",
    "ycsb-d",
    "ycsb-f",
    "etc",
    "app",
    "usr",
    "twitter",
    "gdwheel-1 .. gdwheel-12 (or gdwheel-baseline, -rubis, -tpcw, -same, -random, -small1, -small2, -big1, -big2, -multi-baseline, -multi-rubis, -multi-tpcw)",
    "calcification",
    "zexpander-switch",
];

fn build_model(name: &str, p: &mut Params, requests: u64, seed: u64) -> anyhow::Result<Requests> {
    let lower = name.to_ascii_lowercase();
    if let Some(w) = lower.strip_prefix("ycsb-") {
        return Ok(Box::new(ycsb::Ycsb::new(w, p, requests, seed)?));
    }
    if let Some(w) = lower.strip_prefix("gdwheel-") {
        return Ok(Box::new(gdwheel::GdWheel::new(w, p, requests, seed)?));
    }
    match lower.as_str() {
        "etc" => Ok(Box::new(etc::Etc::new(p, seed)?)),
        "app" | "fb-app" => Ok(Box::new(app::App::new(p, seed)?)),
        "usr" | "fb-usr" => Ok(Box::new(usr::Usr::new(p, seed)?)),
        "twitter" => Ok(Box::new(twitter::Twitter::new(p, seed)?)),
        "calcification" => Ok(Box::new(phased::Calcification::new(p, requests, seed)?)),
        "zexpander-switch" | "zexpander" => {
            Ok(Box::new(phased::ZexpanderSwitch::new(p, requests, seed)?))
        }
        _ => anyhow::bail!("unknown model {name:?}; known: {}", MODELS.join(", ")),
    }
}

/// Memcached 1.6's default item size limit is 1 MiB (`-I 1m`) for header, key
/// and value together; values are clamped below it with room for a 250-byte
/// key and the item header, so every generated item is storable by default.
pub const MAX_VALUE: u64 = (1 << 20) - 512;

/// `--param` values with typed getters; remembers which were read so that a
/// misspelt parameter is an error instead of silently ignored.
pub struct Params {
    given: Vec<(String, String)>,
    known: Vec<String>,
}

impl Params {
    pub fn new(given: &[(String, String)]) -> Params {
        Params {
            given: given.to_vec(),
            known: Vec::new(),
        }
    }

    fn raw(&mut self, key: &str) -> Option<String> {
        self.known.push(key.to_string());
        self.given
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.clone())
    }

    pub fn str(&mut self, key: &str, default: &str) -> String {
        self.raw(key).unwrap_or_else(|| default.to_string())
    }

    pub fn u64(&mut self, key: &str, default: u64) -> anyhow::Result<u64> {
        match self.raw(key) {
            None => Ok(default),
            Some(v) => parse_count(&v).with_context(|| format!("--param {key}={v}")),
        }
    }

    pub fn f64(&mut self, key: &str, default: f64) -> anyhow::Result<f64> {
        match self.raw(key) {
            None => Ok(default),
            Some(v) => {
                let x: f64 = v
                    .parse()
                    .with_context(|| format!("--param {key}={v}: not a number"))?;
                anyhow::ensure!(x.is_finite(), "--param {key}={v}: not finite");
                Ok(x)
            }
        }
    }

    /// A proportion in [0, 1].
    pub fn prob(&mut self, key: &str, default: f64) -> anyhow::Result<f64> {
        let x = self.f64(key, default)?;
        anyhow::ensure!(
            (0.0..=1.0).contains(&x),
            "--param {key}={x}: must be in [0, 1]"
        );
        Ok(x)
    }

    /// A list `a:w,b:w,...` of (value, weight) pairs, e.g. a TTL or size mix.
    pub fn mix(&mut self, key: &str, default: &str) -> anyhow::Result<Vec<(u64, f64)>> {
        let v = self.str(key, default);
        let mut out = Vec::new();
        for part in v.split(',').filter(|s| !s.is_empty()) {
            let (a, w) = part.split_once(':').unwrap_or((part, "1"));
            let a = parse_count(a).with_context(|| format!("--param {key}={v}"))?;
            let w: f64 = w
                .parse()
                .with_context(|| format!("--param {key}={v}: bad weight {w:?}"))?;
            anyhow::ensure!(w.is_finite() && w >= 0.0, "--param {key}: bad weight {w}");
            out.push((a, w));
        }
        anyhow::ensure!(
            out.iter().any(|e| e.1 > 0.0),
            "--param {key}={v}: needs at least one entry with a positive weight"
        );
        Ok(out)
    }

    /// Error on any given parameter the model did not read.
    pub fn finish(&self, model: &str) -> anyhow::Result<()> {
        let unknown: Vec<&str> = self
            .given
            .iter()
            .map(|(k, _)| k.as_str())
            .filter(|k| !self.known.iter().any(|n| n == k))
            .collect();
        if !unknown.is_empty() {
            let mut known: Vec<&str> = self.known.iter().map(|s| s.as_str()).collect();
            known.sort();
            known.dedup();
            anyhow::bail!(
                "model {model} has no parameter {}; it takes: {}",
                unknown.join(", "),
                known.join(", ")
            );
        }
        Ok(())
    }
}

/// An integer with an optional k/m/g suffix (decimal: 10k = 10000) or a time
/// suffix s/m/h/d for TTLs is not accepted here; see [`parse_duration`].
pub fn parse_count(s: &str) -> anyhow::Result<u64> {
    let s = s.trim();
    let (num, mult) = match s.char_indices().last() {
        Some((i, 'k' | 'K')) => (&s[..i], 1_000),
        Some((i, 'm' | 'M')) => (&s[..i], 1_000_000),
        Some((i, 'g' | 'G')) => (&s[..i], 1_000_000_000),
        _ => (s, 1),
    };
    let x: f64 = num
        .parse()
        .map_err(|_| anyhow::anyhow!("{s:?} is not a count"))?;
    anyhow::ensure!(x.is_finite() && x >= 0.0, "{s:?} is not a count");
    let v = x * mult as f64;
    anyhow::ensure!(v < 1.8e19 && v.fract() == 0.0, "{s:?} is not a whole count");
    Ok(v as u64)
}

/// Request timestamps at a constant rate (requests per second), for models
/// whose paper gives no arrival process.
#[derive(Clone, Debug)]
pub struct Pacer {
    us_per_request: f64,
}

impl Pacer {
    pub fn from_params(p: &mut Params, default_rate: f64) -> anyhow::Result<Pacer> {
        let rate = p.f64("rate", default_rate)?;
        anyhow::ensure!(rate > 0.0, "--param rate must be positive");
        Ok(Pacer {
            us_per_request: 1e6 / rate,
        })
    }
    pub fn time_us(&self, i: u64) -> u64 {
        (i as f64 * self.us_per_request) as u64
    }

    /// The arrival time of request `*i`, which is then counted (`*i` moves
    /// on to the next request).
    pub fn tick(&self, i: &mut u64) -> u64 {
        let t = self.time_us(*i);
        *i += 1;
        t
    }
}

/// A request of a model without recomputation costs (all but GD-Wheel's):
/// cost 1.
pub fn request(
    time_us: u64,
    key: u64,
    key_size: u16,
    value_size: u32,
    op: Op,
    ttl: u32,
) -> Request {
    Request {
        time_us,
        key,
        key_size,
        value_size,
        cost: 1,
        op,
        ttl,
    }
}

/// The access pattern of Facebook's pools and Twitter's cluster: keys drawn
/// from a Zipf law over `keys` ids (id = rank - 1), each request a GET, SET
/// or DELETE by fixed shares.
pub struct ZipfMix {
    zipf: dist::Zipf,
    set: f64,
    delete: f64,
}

impl ZipfMix {
    /// From the parameters `keys`, `alpha`, `set_name` (the SET share: `set`,
    /// Twitter's `write`) and `delete`; with the key count.
    pub fn from_params(
        p: &mut Params,
        alpha: f64,
        set_name: &str,
        set: f64,
    ) -> anyhow::Result<(ZipfMix, u64)> {
        let keys = p.u64("keys", 1_000_000)?.max(1);
        let alpha = p.f64("alpha", alpha)?;
        anyhow::ensure!(alpha >= 0.0, "alpha must be >= 0");
        let set = p.prob(set_name, set)?;
        let delete = p.prob("delete", 0.0)?;
        anyhow::ensure!(set + delete <= 1.0, "{set_name} + delete must be <= 1");
        let zipf = dist::Zipf::new(keys, alpha);
        Ok((ZipfMix { zipf, set, delete }, keys))
    }

    /// The next request's key and operation.
    pub fn next(&self, rng: &mut dist::Rng) -> (u64, Op) {
        let key = self.zipf.sample(rng) - 1;
        (key, Op::pick(rng.f64(), self.set, self.delete))
    }
}

/// Minimum key length that keeps `keys` distinct ids distinct after
/// [`crate::trace::key_bytes`] (which renders ids in hexadecimal).
pub fn min_key_len(keys: u64) -> u16 {
    let max_id = keys.saturating_sub(1);
    (64 - max_id.leading_zeros()).div_ceil(4).max(1) as u16
}

/// A key length at quantile `u` of GEV(location, scale, shape): rounded,
/// within memcached's 1..=250 bytes, and at least `min` ([`min_key_len`]).
pub fn gev_key_len(u: f64, (l, s, k): (f64, f64, f64), min: u16) -> u16 {
    let g = dist::gev(u, l, s, k).round();
    (g.clamp(1.0, 250.0) as u16).max(min)
}

/// Tests: a key keeps its sizes (every request for the first request's key
/// has the same key and value lengths).
#[cfg(test)]
pub(crate) fn assert_fixed_sizes(reqs: &[Request]) {
    let k0: Vec<&Request> = reqs.iter().filter(|r| r.key == reqs[0].key).collect();
    assert!(k0.len() > 1);
    assert!(k0
        .iter()
        .all(|r| r.key_size == k0[0].key_size && r.value_size == k0[0].value_size));
}

/// Tests: over 1 M keys, Zipf(`alpha`)'s most popular `top_keys` share of
/// the keys takes `share` of the requests (within 0.005), and `model` (over
/// its default 1 M keys) draws from that law: its ids below the top count
/// (id = rank - 1) get that share of 2 M requests (within 0.003).
#[cfg(test)]
pub(crate) fn assert_top_share(
    model: impl Iterator<Item = Request>,
    top_keys: f64,
    alpha: f64,
    share: f64,
) {
    let n = 1_000_000u64;
    let top = (top_keys * n as f64) as u64;
    let exact = dist::zeta(top, alpha) / dist::zeta(n, alpha);
    assert!((exact - share).abs() < 0.005, "{exact}");
    let head = model.take(2_000_000).filter(|r| r.key < top).count() as f64 / 2e6;
    assert!((head - exact).abs() < 0.003, "{head} vs {exact}");
}

/// `--param` pairs as the command line gives them (tests).
#[cfg(test)]
pub(crate) fn pairs(kv: &[(&str, &str)]) -> Vec<(String, String)> {
    kv.iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// The model `new` makes of the parameters `kv`, checked as
/// [`Source::open`] checks them (tests: a misspelt parameter fails).
#[cfg(test)]
pub(crate) fn test_model<M>(
    name: &str,
    kv: &[(&str, &str)],
    new: impl FnOnce(&mut Params) -> anyhow::Result<M>,
) -> M {
    let mut p = Params::new(&pairs(kv));
    let m = new(&mut p).unwrap();
    p.finish(name).unwrap();
    m
}

// ---------------------------------------------------------------- gen

#[derive(clap::Args, Debug)]
pub struct GenArgs {
    #[command(flatten)]
    pub source: Source,
    /// Write the trace here: .csv (time,key,size,cost,op,ttl,key_size) or
    /// .bin (compact binary, see docs/lab.md).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Write the summary as JSON to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Instead of a trace, print the LZ4 compression ratios of the value
    /// generators, individually and in 256 B..4 KB containers, next to
    /// zExpander's Table 2.
    #[arg(long)]
    pub compression_report: bool,
    /// Instead of a trace, print the ratio and speed of the Z-zone's codecs
    /// (LZ4, zstd, zstd with a trained dictionary) on each value model in
    /// blocks of `--block` bytes.
    #[arg(long)]
    pub codec_report: bool,
    /// Block size for `--codec-report`.
    #[arg(long, default_value_t = 2048)]
    pub block: usize,
    /// No progress bar.
    #[arg(long)]
    pub quiet: bool,
}

/// What `gen` reports about a request stream.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct Summary {
    pub workload: String,
    pub seed: u64,
    pub params: Vec<(String, String)>,
    pub requests: u64,
    pub distinct_keys: u64,
    pub gets: u64,
    pub sets: u64,
    pub deletes: u64,
    pub mean_key_size: f64,
    pub mean_value_size: f64,
    /// Sum of the value sizes of the distinct keys (last size seen): the
    /// footprint of the whole key set, without per-item overhead.
    pub working_set_bytes: u64,
    pub total_cost: u64,
    pub duration_us: u64,
    /// Share of requests that go to the most requested 1% of keys.
    pub top1pct_key_share: f64,
    /// Share of requests that go to the least requested 50% of keys.
    pub bottom50pct_key_share: f64,
}

/// Accumulates a [`Summary`] one request at a time.
#[derive(Default)]
pub struct Summarizer {
    s: Summary,
    key_bytes: u64,
    value_bytes: u64,
    per_key: HashMap<u64, (u32, u32)>,
}

impl Summarizer {
    pub fn add(&mut self, r: &Request) {
        self.s.requests += 1;
        match r.op {
            Op::Get => self.s.gets += 1,
            Op::Set => self.s.sets += 1,
            Op::Delete => self.s.deletes += 1,
        }
        self.key_bytes += r.key_size as u64;
        self.value_bytes += r.value_size as u64;
        self.s.total_cost += r.cost as u64;
        self.s.duration_us = self.s.duration_us.max(r.time_us);
        let e = self.per_key.entry(r.key).or_insert((0, 0));
        e.0 = e.0.saturating_add(1);
        e.1 = r.value_size;
    }

    pub fn finish(mut self) -> Summary {
        let n = self.s.requests.max(1) as f64;
        self.s.mean_key_size = self.key_bytes as f64 / n;
        self.s.mean_value_size = self.value_bytes as f64 / n;
        self.s.distinct_keys = self.per_key.len() as u64;
        self.s.working_set_bytes = self.per_key.values().map(|e| e.1 as u64).sum();
        let mut counts: Vec<u32> = self.per_key.values().map(|e| e.0).collect();
        counts.sort_unstable_by(|a, b| b.cmp(a));
        let k = counts.len();
        if k > 0 {
            let top = (k as f64 * 0.01).ceil() as usize;
            let bottom = k / 2;
            let total: u64 = counts.iter().map(|&c| c as u64).sum();
            let t: u64 = counts[..top].iter().map(|&c| c as u64).sum();
            let b: u64 = counts[k - bottom..].iter().map(|&c| c as u64).sum();
            self.s.top1pct_key_share = t as f64 / total as f64;
            self.s.bottom50pct_key_share = b as f64 / total as f64;
        }
        self.s
    }
}

/// A progress bar over `len` requests (hidden when quiet or not a terminal).
pub fn progress(len: u64, quiet: bool) -> indicatif::ProgressBar {
    if quiet {
        return indicatif::ProgressBar::hidden();
    }
    let pb = indicatif::ProgressBar::new(len);
    pb.set_style(
        indicatif::ProgressStyle::with_template(
            "{spinner} [{elapsed_precise}] {wide_bar} {pos}/{len} ({per_sec}, eta {eta})",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    pb
}

pub fn run_gen(args: GenArgs) -> anyhow::Result<()> {
    if args.codec_report {
        let rows = crate::values::codec_report(20_000, args.block, 16 << 10, 0.5)?;
        print!("{}", crate::values::format_codec_report(&rows, args.block));
        if let Some(path) = &args.json {
            std::fs::write(path, serde_json::to_vec_pretty(&rows)?)
                .with_context(|| format!("writing {}", path.display()))?;
        }
        return Ok(());
    }
    if args.compression_report {
        let rows = crate::values::compression_report(2_000);
        print!("{}", crate::values::format_report(&rows));
        if let Some(path) = &args.json {
            std::fs::write(path, serde_json::to_vec_pretty(&rows)?)
                .with_context(|| format!("writing {}", path.display()))?;
        }
        return Ok(());
    }
    let src = &args.source;
    let reqs = src.open()?;
    let mut writer = match &args.out {
        Some(path) => Some(crate::trace::Writer::create(path)?),
        None => None,
    };
    let len = if src.trace.is_some() { 0 } else { src.requests };
    let pb = progress(len, args.quiet);
    let mut sum = Summarizer::default();
    for (i, r) in reqs.enumerate() {
        sum.add(&r);
        if let Some(w) = writer.as_mut() {
            w.write(&r)?;
        }
        if i % 65_536 == 0 {
            pb.set_position(i as u64);
        }
    }
    pb.finish_and_clear();
    if let Some(w) = writer {
        w.finish()?;
    }
    let mut s = sum.finish();
    s.workload = src.name();
    s.seed = src.seed;
    s.params = src.params.clone();
    print_summary(&s, &mut std::io::stdout())?;
    if let Some(path) = &args.out {
        println!("wrote {}", path.display());
    }
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_vec_pretty(&s)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

pub fn print_summary(s: &Summary, out: &mut dyn Write) -> std::io::Result<()> {
    let n = s.requests.max(1) as f64;
    let pct = |x: u64| 100.0 * x as f64 / n;
    let params: Vec<String> = s.params.iter().map(|(k, v)| format!("{k}={v}")).collect();
    writeln!(out, "workload          {}", s.workload)?;
    if !params.is_empty() {
        writeln!(out, "params            {}", params.join(" "))?;
    }
    if !s.workload.starts_with("trace:") {
        writeln!(out, "seed              {}", s.seed)?;
    }
    writeln!(out, "requests          {}", s.requests)?;
    writeln!(out, "distinct keys     {}", s.distinct_keys)?;
    writeln!(
        out,
        "get / set / del   {} / {} / {}  ({:.2}% / {:.2}% / {:.2}%)",
        s.gets,
        s.sets,
        s.deletes,
        pct(s.gets),
        pct(s.sets),
        pct(s.deletes)
    )?;
    writeln!(out, "mean key size     {:.2} B", s.mean_key_size)?;
    writeln!(out, "mean value size   {:.2} B", s.mean_value_size)?;
    writeln!(
        out,
        "working set       {:.2} MB of values",
        s.working_set_bytes as f64 / 1e6
    )?;
    writeln!(out, "total cost        {}", s.total_cost)?;
    writeln!(out, "duration          {:.3} s", s.duration_us as f64 / 1e6)?;
    writeln!(
        out,
        "top 1% keys       {:.1}% of requests; bottom 50% keys {:.1}%",
        100.0 * s.top1pct_key_share,
        100.0 * s.bottom50pct_key_share
    )?;
    Ok(())
}

/// Distinct keys of a stream (test helper and quick checks).
pub fn distinct_keys(reqs: impl Iterator<Item = Request>) -> usize {
    reqs.map(|r| r.key).collect::<HashSet<_>>().len()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn src(model: &str, params: &[(&str, &str)], requests: u64, seed: u64) -> Source {
        Source {
            model: Some(model.to_string()),
            params: pairs(params),
            trace: None,
            requests,
            seed,
        }
    }

    #[test]
    fn every_model_opens_reproducibly_with_the_requested_count() {
        // Every name `--model` lists, with two GD-Wheel workloads for the
        // line that describes all twelve.
        let named = MODELS.iter().filter(|m| !m.starts_with("gdwheel-"));
        let models = named.copied().chain(["gdwheel-1", "gdwheel-multi-tpcw"]);
        for m in models {
            let s = src(m, &[("keys", "5000")], 3_000, 9);
            let a: Vec<Request> = s.open().unwrap().collect();
            let b: Vec<Request> = s.open().unwrap().collect();
            assert_eq!(a.len(), 3_000, "{m}");
            assert_eq!(a, b, "{m} not reproducible");
            let c: Vec<Request> = src(m, &[("keys", "5000")], 3_000, 10)
                .open()
                .unwrap()
                .collect();
            assert_ne!(a, c, "{m}: seed has no effect");
            assert!(
                a.windows(2).all(|w| w[0].time_us <= w[1].time_us),
                "{m}: time goes back"
            );
            assert!(
                a.iter()
                    .all(|r| (1..=250).contains(&r.key_size) && r.value_size as u64 <= MAX_VALUE),
                "{m}: size out of range"
            );
        }
    }

    #[test]
    fn unknown_model_and_misspelt_param_are_errors() {
        assert!(src("nope", &[], 10, 1).open().is_err());
        let e = src("ycsb-a", &[("kyes", "10")], 10, 1)
            .open()
            .err()
            .unwrap();
        assert!(format!("{e}").contains("kyes"), "{e}");
        assert!(src("ycsb-a", &[("keys", "ten")], 10, 1).open().is_err());
        assert!(Source {
            model: None,
            params: vec![],
            trace: None,
            requests: 1,
            seed: 1
        }
        .open()
        .is_err());
    }

    #[test]
    fn counts_and_mixes_parse() {
        assert_eq!(parse_count("10k").unwrap(), 10_000);
        assert_eq!(parse_count("1.5m").unwrap(), 1_500_000);
        assert_eq!(parse_count("42").unwrap(), 42);
        assert!(parse_count("-1").is_err());
        assert!(parse_count("0.5").is_err());
        let given = vec![("ttl".to_string(), "3600:0.67,7200:0.33".to_string())];
        let mut p = Params::new(&given);
        assert_eq!(p.mix("ttl", "0").unwrap(), vec![(3600, 0.67), (7200, 0.33)]);
        p.finish("x").unwrap();
        let given = vec![("ttl".to_string(), "1:0".to_string())];
        assert!(Params::new(&given).mix("ttl", "0").is_err());
    }

    #[test]
    fn min_key_len_covers_the_largest_id() {
        assert_eq!(min_key_len(1), 1);
        assert_eq!(min_key_len(16), 1);
        assert_eq!(min_key_len(17), 2);
        assert_eq!(min_key_len(1 << 32), 8);
        assert_eq!(min_key_len((1 << 32) + 1), 9);
    }

    #[test]
    fn summary_counts_mix_and_skew() {
        let mut s = Summarizer::default();
        let mk = |key, op| Request {
            time_us: key,
            key,
            key_size: 10,
            value_size: 100,
            cost: 2,
            op,
            ttl: 0,
        };
        for _ in 0..97 {
            s.add(&mk(0, Op::Get));
        }
        s.add(&mk(1, Op::Set));
        s.add(&mk(2, Op::Delete));
        s.add(&mk(3, Op::Get));
        let s = s.finish();
        assert_eq!((s.requests, s.gets, s.sets, s.deletes), (100, 98, 1, 1));
        assert_eq!(s.distinct_keys, 4);
        assert_eq!(s.total_cost, 200);
        assert!((s.top1pct_key_share - 0.97).abs() < 1e-12);
        assert!((s.bottom50pct_key_share - 0.02).abs() < 1e-12);
        assert_eq!(s.working_set_bytes, 400);
    }
}
