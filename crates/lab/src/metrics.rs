//! Hit ratio, byte hit ratio, cost hit ratio and recomputation cost, overall
//! and per interval; latency percentiles; and the JSON result document every
//! lab command writes (`replay`, `sim`, `compare`).
//!
//! Where the metrics come from: hit and byte hit ratio are the usual cache
//! figures (Atikoglu et al., SIGMETRICS'12, report both for ETC); the cost hit
//! ratio (sum of costs of hits over sum of costs of requests) is Carra &
//! Michiardi's; the total recomputation cost is GD-Wheel's (Li & Cox). Latency
//! comes from HDR histograms (Gil Tene's HdrHistogram, as wrk2 and memtier do),
//! recorded in nanoseconds so that loopback latencies of a few microseconds
//! keep their decimals.
//!
//! How to use it from a driver: keep one [`Recorder`] per thread, call
//! [`Recorder::get`]/[`Recorder::set`]/... for each request with its position
//! ([`At`]: global request number and microseconds since the start), and
//! [`Recorder::latency`] when latencies are measured; merge the recorders and
//! call [`Recorder::finish`] with a [`RunMeta`] to get the [`RunResult`]
//! document, which [`print_table`] prints and [`write_json`] stores.

use std::collections::BTreeMap;
use std::path::Path;
use std::str::FromStr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// Counts over some stretch of requests.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Counts {
    pub requests: u64,
    pub gets: u64,
    pub hits: u64,
    pub sets: u64,
    pub deletes: u64,
    /// Bytes of values requested by GETs, and of those that hit.
    pub bytes_requested: u64,
    pub bytes_hit: u64,
    /// Sum of costs of GETs, and of those that hit.
    pub cost_requested: u64,
    pub cost_hit: u64,
}

impl Counts {
    pub fn record_get(&mut self, hit: bool, size: u32, cost: u32) {
        self.requests += 1;
        self.gets += 1;
        self.bytes_requested += size as u64;
        self.cost_requested += cost as u64;
        if hit {
            self.hits += 1;
            self.bytes_hit += size as u64;
            self.cost_hit += cost as u64;
        }
    }

    pub fn hit_ratio(&self) -> f64 {
        ratio(self.hits, self.gets)
    }
    pub fn byte_hit_ratio(&self) -> f64 {
        ratio(self.bytes_hit, self.bytes_requested)
    }
    /// Sum of costs of hits over sum of costs of requests (Carra & Michiardi).
    pub fn cost_hit_ratio(&self) -> f64 {
        ratio(self.cost_hit, self.cost_requested)
    }
    /// Total cost paid recomputing misses (GD-Wheel's metric).
    pub fn recomputation_cost(&self) -> u64 {
        self.cost_requested - self.cost_hit
    }
    pub fn add(&mut self, o: &Counts) {
        self.requests += o.requests;
        self.gets += o.gets;
        self.hits += o.hits;
        self.sets += o.sets;
        self.deletes += o.deletes;
        self.bytes_requested += o.bytes_requested;
        self.bytes_hit += o.bytes_hit;
        self.cost_requested += o.cost_requested;
        self.cost_hit += o.cost_hit;
    }
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        a as f64 / b as f64
    }
}

// ---------------------------------------------------------------------------
// Intervals

/// How a run is cut into intervals: every N requests (`100000`, `100000r`)
/// or every S seconds (`1s`, `0.5s`). Request intervals line up between
/// `replay` and `sim` (same requests in the same interval); second intervals
/// show behaviour over wall time (or trace time in `sim`).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IntervalSpec {
    Requests(u64),
    Seconds(f64),
}

impl Default for IntervalSpec {
    fn default() -> Self {
        IntervalSpec::Requests(100_000)
    }
}

impl FromStr for IntervalSpec {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let s = s.trim();
        if let Some(secs) = s.strip_suffix('s') {
            match secs.parse::<f64>() {
                Ok(v) if v.is_finite() && v > 0.0 => Ok(IntervalSpec::Seconds(v)),
                _ => Err(format!("bad interval {s:?}: expected e.g. 1s or 0.5s")),
            }
        } else {
            let n = s.strip_suffix('r').unwrap_or(s);
            match n.parse::<u64>() {
                Ok(v) if v > 0 => Ok(IntervalSpec::Requests(v)),
                _ => Err(format!(
                    "bad interval {s:?}: expected a number of requests (100000) or seconds (1s)"
                )),
            }
        }
    }
}

impl std::fmt::Display for IntervalSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            IntervalSpec::Requests(n) => write!(f, "{n}"),
            IntervalSpec::Seconds(s) => write!(f, "{s}s"),
        }
    }
}

impl IntervalSpec {
    /// Which interval a request at this position belongs to.
    pub fn index(&self, at: At) -> usize {
        match *self {
            IntervalSpec::Requests(n) => (at.seq / n.max(1)) as usize,
            IntervalSpec::Seconds(s) => (at.elapsed_us as f64 / (s * 1e6)) as usize,
        }
    }
}

/// Where a request sits in a run: its number in the request stream (0-based)
/// and the time since the start in microseconds (wall time in `replay`, the
/// trace's time in `sim`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct At {
    pub seq: u64,
    pub elapsed_us: u64,
}

// ---------------------------------------------------------------------------
// Latency

/// What a latency sample measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LatOp {
    /// A GET (hit or miss).
    Get,
    /// A SET the trace asked for.
    Set,
    /// The SET a look-aside client sends after a GET missed.
    Fill,
    Delete,
}

impl LatOp {
    const ALL: [LatOp; 4] = [LatOp::Get, LatOp::Set, LatOp::Fill, LatOp::Delete];
    pub fn name(self) -> &'static str {
        match self {
            LatOp::Get => "get",
            LatOp::Set => "set",
            LatOp::Fill => "fill",
            LatOp::Delete => "delete",
        }
    }
    fn slot(self) -> usize {
        self as usize
    }
}

/// Nanosecond histograms up to 100 s. Run totals: 3 significant digits from
/// 1 ns (about 220 KB each, a handful per thread). Intervals: 2 significant
/// digits from 100 ns (a few KB each, so thousands of intervals stay cheap).
pub(crate) fn histogram(sigfig: u8) -> Histogram<u64> {
    let low = if sigfig >= 3 { 1 } else { 100 };
    // The bounds are constants that hdrhistogram accepts (low >= 1,
    // high >= 2 * low, sigfig <= 5), so this cannot fail.
    Histogram::new_with_bounds(low, 100_000_000_000, sigfig).unwrap_or_else(|_| {
        Histogram::new(sigfig.min(5)).unwrap_or_else(|_| unreachable!("sigfig <= 5"))
    })
}

/// Latency figures of one operation, in microseconds.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LatencySummary {
    pub count: u64,
    pub mean_us: f64,
    pub p50_us: f64,
    pub p90_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
    pub max_us: f64,
    /// The latency distribution as `[quantile, microseconds]` points, dense in
    /// the tail (for CDF plots).
    pub cdf: Vec<[f64; 2]>,
}

impl LatencySummary {
    fn from_histogram(h: &Histogram<u64>, with_cdf: bool) -> LatencySummary {
        let us = |ns: u64| ns as f64 / 1000.0;
        let cdf = if with_cdf && !h.is_empty() {
            cdf_quantiles()
                .into_iter()
                .map(|q| [q, us(h.value_at_quantile(q))])
                .collect()
        } else {
            Vec::new()
        };
        LatencySummary {
            count: h.len(),
            mean_us: h.mean() / 1000.0,
            p50_us: us(h.value_at_quantile(0.50)),
            p90_us: us(h.value_at_quantile(0.90)),
            p99_us: us(h.value_at_quantile(0.99)),
            p999_us: us(h.value_at_quantile(0.999)),
            max_us: us(h.max()),
            cdf,
        }
    }
}

/// Quantiles for CDF points: every 5% up to 90%, then 1 - 10^(-k/4) (four
/// points per decade) down to 1 - 10^-5, then the maximum.
fn cdf_quantiles() -> Vec<f64> {
    let mut q: Vec<f64> = (0..=18).map(|i| i as f64 * 0.05).collect();
    for k in 5..=20 {
        q.push(1.0 - 10f64.powf(-(k as f64) / 4.0));
    }
    q.push(1.0);
    q
}

// ---------------------------------------------------------------------------
// Recording

#[derive(Clone)]
struct IntervalAcc {
    counts: Counts,
    fills: u64,
    errors: u64,
    first_us: u64,
    last_us: u64,
    latency: Option<Histogram<u64>>,
}

impl Default for IntervalAcc {
    fn default() -> Self {
        IntervalAcc {
            counts: Counts::default(),
            fills: 0,
            errors: 0,
            first_us: u64::MAX,
            last_us: 0,
            latency: None,
        }
    }
}

impl IntervalAcc {
    fn touch(&mut self, at: At) {
        self.first_us = self.first_us.min(at.elapsed_us);
        self.last_us = self.last_us.max(at.elapsed_us);
    }
}

/// Accumulates counts and latencies of a run, overall and per interval. One
/// per thread; [`Recorder::merge`] them at the end.
#[derive(Clone)]
pub struct Recorder {
    spec: IntervalSpec,
    totals: Counts,
    fills: u64,
    errors: u64,
    latency: [Option<Histogram<u64>>; 4],
    all: Option<Histogram<u64>>,
    intervals: Vec<IntervalAcc>,
}

impl Recorder {
    pub fn new(spec: IntervalSpec) -> Recorder {
        Recorder {
            spec,
            totals: Counts::default(),
            fills: 0,
            errors: 0,
            latency: [None, None, None, None],
            all: None,
            intervals: Vec::new(),
        }
    }

    pub fn spec(&self) -> IntervalSpec {
        self.spec
    }

    /// The run's counts so far.
    pub fn totals(&self) -> &Counts {
        &self.totals
    }

    fn interval(&mut self, at: At) -> &mut IntervalAcc {
        let i = self.spec.index(at);
        if self.intervals.len() <= i {
            self.intervals.resize_with(i + 1, IntervalAcc::default);
        }
        let acc = &mut self.intervals[i];
        acc.touch(at);
        acc
    }

    /// A GET: hit or miss, with the request's value size and cost.
    pub fn get(&mut self, at: At, hit: bool, size: u32, cost: u32) {
        self.totals.record_get(hit, size, cost);
        self.interval(at).counts.record_get(hit, size, cost);
    }

    /// A SET the trace asked for (`Op::Set`).
    pub fn set(&mut self, at: At) {
        self.totals.requests += 1;
        self.totals.sets += 1;
        let c = &mut self.interval(at).counts;
        c.requests += 1;
        c.sets += 1;
    }

    /// A DELETE the trace asked for.
    pub fn delete(&mut self, at: At) {
        self.totals.requests += 1;
        self.totals.deletes += 1;
        let c = &mut self.interval(at).counts;
        c.requests += 1;
        c.deletes += 1;
    }

    /// The SET a look-aside client sends after a miss (not a request of its
    /// own: it is the miss's consequence).
    pub fn fill(&mut self, at: At) {
        self.fills += 1;
        self.interval(at).fills += 1;
    }

    /// A request the server answered with an error (e.g. `SERVER_ERROR
    /// object too large for cache` or out of memory).
    pub fn error(&mut self, at: At) {
        self.errors += 1;
        self.interval(at).errors += 1;
    }

    /// One latency sample, in nanoseconds.
    pub fn latency(&mut self, at: At, op: LatOp, ns: u64) {
        let ns = ns.max(100);
        // Values above the histogram's range are clamped rather than lost.
        let h = self.latency[op.slot()].get_or_insert_with(|| histogram(3));
        h.saturating_record(ns);
        self.all
            .get_or_insert_with(|| histogram(3))
            .saturating_record(ns);
        self.interval(at)
            .latency
            .get_or_insert_with(|| histogram(2))
            .saturating_record(ns);
    }

    /// Add another recorder's figures (same interval spec) to this one.
    pub fn merge(&mut self, o: &Recorder) {
        self.totals.add(&o.totals);
        self.fills += o.fills;
        self.errors += o.errors;
        for (mine, theirs) in self.latency.iter_mut().zip(o.latency.iter()) {
            merge_hist(mine, theirs);
        }
        merge_hist(&mut self.all, &o.all);
        if self.intervals.len() < o.intervals.len() {
            self.intervals
                .resize_with(o.intervals.len(), IntervalAcc::default);
        }
        for (a, b) in self.intervals.iter_mut().zip(o.intervals.iter()) {
            a.counts.add(&b.counts);
            a.fills += b.fills;
            a.errors += b.errors;
            a.first_us = a.first_us.min(b.first_us);
            a.last_us = a.last_us.max(b.last_us);
            merge_hist(&mut a.latency, &b.latency);
        }
    }

    /// The result document: `elapsed` is the run's duration (wall time for
    /// `replay`, the simulation's own time for `sim`), used for throughput.
    pub fn finish(&self, meta: RunMeta, elapsed: Duration) -> RunResult {
        let mut latency = BTreeMap::new();
        if let Some(h) = &self.all {
            latency.insert("all".to_string(), LatencySummary::from_histogram(h, true));
        }
        for op in LatOp::ALL {
            if let Some(h) = &self.latency[op.slot()] {
                latency.insert(
                    op.name().to_string(),
                    LatencySummary::from_histogram(h, true),
                );
            }
        }
        let secs = elapsed.as_secs_f64();
        let totals = Totals {
            hit_ratio: self.totals.hit_ratio(),
            byte_hit_ratio: self.totals.byte_hit_ratio(),
            cost_hit_ratio: self.totals.cost_hit_ratio(),
            recomputation_cost: self.totals.recomputation_cost(),
            counts: self.totals.clone(),
            fills: self.fills,
            errors: self.errors,
            elapsed_s: secs,
            throughput_rps: if secs > 0.0 {
                self.totals.requests as f64 / secs
            } else {
                0.0
            },
            latency,
        };
        let unit = match self.spec {
            IntervalSpec::Requests(_) => "requests",
            IntervalSpec::Seconds(_) => "seconds",
        };
        let intervals = self
            .intervals
            .iter()
            .enumerate()
            .filter(|(_, a)| a.counts.requests > 0 || a.fills > 0)
            .map(|(i, a)| {
                let (start, end) = match self.spec {
                    IntervalSpec::Requests(n) => {
                        ((i as u64 * n) as f64, ((i as u64 + 1) * n) as f64)
                    }
                    IntervalSpec::Seconds(s) => (i as f64 * s, (i + 1) as f64 * s),
                };
                // Throughput over the interval's length: its nominal length
                // for time intervals, the span of its requests otherwise.
                let span_s = match self.spec {
                    IntervalSpec::Seconds(s) => s,
                    IntervalSpec::Requests(_) => a.last_us.saturating_sub(a.first_us) as f64 / 1e6,
                };
                IntervalResult {
                    index: i as u64,
                    unit: unit.to_string(),
                    start,
                    end,
                    start_s: if a.first_us == u64::MAX {
                        0.0
                    } else {
                        a.first_us as f64 / 1e6
                    },
                    hit_ratio: a.counts.hit_ratio(),
                    byte_hit_ratio: a.counts.byte_hit_ratio(),
                    cost_hit_ratio: a.counts.cost_hit_ratio(),
                    recomputation_cost: a.counts.recomputation_cost(),
                    counts: a.counts.clone(),
                    fills: a.fills,
                    errors: a.errors,
                    throughput_rps: if span_s > 0.0 {
                        a.counts.requests as f64 / span_s
                    } else {
                        0.0
                    },
                    latency: a
                        .latency
                        .as_ref()
                        .map(|h| LatencySummary::from_histogram(h, false)),
                    zzone: None,
                }
            })
            .collect();
        RunResult {
            meta,
            totals,
            intervals,
        }
    }
}

fn merge_hist(mine: &mut Option<Histogram<u64>>, theirs: &Option<Histogram<u64>>) {
    if let Some(t) = theirs {
        match mine {
            // Same bounds on both sides, so adding cannot fail; if it ever
            // did, keeping ours is the least surprising outcome.
            Some(m) => {
                let _ = m.add(t);
            }
            None => *mine = Some(t.clone()),
        }
    }
}

// ---------------------------------------------------------------------------
// The result document

/// Who ran what, where and when.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RunMeta {
    /// Which command produced it: "replay", "sim", "compare".
    pub tool: String,
    /// The row name in tables: "memcached", "cachalot", "sim", ...
    pub label: String,
    pub command_line: Vec<String>,
    /// "127.0.0.1:11211", or "in-process" for `sim`.
    pub server: String,
    /// "memcached", "cachalot", "engine" (sim) or "unknown".
    pub server_kind: String,
    pub server_version: Option<String>,
    /// The workload: a model name or "trace:<path>".
    pub model: String,
    pub params: BTreeMap<String, String>,
    /// Requests asked of a model (a trace gives what it holds).
    pub requests: u64,
    pub seed: u64,
    /// The cache's memory limit (`-m`) in MB, when known.
    pub memory_mb: Option<u64>,
    /// UTC, RFC 3339 ("2026-01-31T12:00:00Z").
    pub date: String,
    pub git_commit: Option<String>,
    /// Command-specific settings: connections, pipeline, protocol, rate,
    /// value kind, interval, server threads, ...
    pub settings: BTreeMap<String, serde_json::Value>,
    /// The server's `stats` at the end of the run (replay only).
    pub server_stats: BTreeMap<String, String>,
}

impl RunMeta {
    /// Metadata for a run of `tool` on `source`, with this process's command
    /// line, the current date and the git commit of the working directory.
    pub fn new(tool: &str, label: &str, source: &crate::workload::Source) -> RunMeta {
        RunMeta {
            tool: tool.to_string(),
            label: label.to_string(),
            command_line: std::env::args().collect(),
            model: source.name(),
            params: source.params.iter().cloned().collect(),
            requests: source.requests,
            seed: source.seed,
            date: utc_now_rfc3339(),
            git_commit: git_commit(),
            ..RunMeta::default()
        }
    }
}

/// Figures of a whole run.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Totals {
    pub counts: Counts,
    pub hit_ratio: f64,
    pub byte_hit_ratio: f64,
    pub cost_hit_ratio: f64,
    pub recomputation_cost: u64,
    /// SETs sent after misses (look-aside fills).
    pub fills: u64,
    /// Requests the server answered with an error.
    pub errors: u64,
    pub elapsed_s: f64,
    /// Requests (GET, SET, DELETE of the workload; fills not counted) per second.
    pub throughput_rps: f64,
    /// Per operation ("all", "get", "set", "fill", "delete"); empty for `sim`.
    pub latency: BTreeMap<String, LatencySummary>,
}

/// Figures of one interval.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct IntervalResult {
    pub index: u64,
    /// "requests" or "seconds": what `start`/`end` count.
    pub unit: String,
    pub start: f64,
    pub end: f64,
    /// When the interval's first request completed, seconds since the start.
    pub start_s: f64,
    pub counts: Counts,
    pub hit_ratio: f64,
    pub byte_hit_ratio: f64,
    pub cost_hit_ratio: f64,
    pub recomputation_cost: u64,
    pub fills: u64,
    pub errors: u64,
    pub throughput_rps: f64,
    /// Latency of all operations in the interval (no CDF), when measured.
    pub latency: Option<LatencySummary>,
    /// The N-zone / Z-zone split at the interval's end (`sim --zzone true`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zzone: Option<ZoneInterval>,
}

/// The engine's two zones at the end of an interval and the Z-zone's work
/// during it (`sim --zzone true`): what zExpander's Fig. 15 draws (memory
/// of each zone over time) and what its split adapts on (the share of GET
/// hits the N-zone serves). Memory and items are the engine's `stats` at
/// the interval's end; hits, promotions and demotions count the interval.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ZoneInterval {
    /// The Z-zone's share of memory the split aims at, in percent (the
    /// `share_percent` of `stats zzone`).
    pub target_percent: u32,
    /// `-m` in bytes.
    pub memory_limit: u64,
    /// Bytes of pages held by the N-zone's slab classes.
    pub nzone_memory: u64,
    /// Bytes the Z-zone holds: its pages and metadata.
    pub zzone_memory: u64,
    pub nzone_items: u64,
    pub zzone_items: u64,
    /// Bytes of the items each zone holds, uncompressed (header, key and
    /// value): the "size of KV items cached" of zExpander's Figs. 6 and 15.
    pub nzone_item_bytes: u64,
    pub zzone_item_bytes: u64,
    /// GET hits the Z-zone served during the interval; the rest of the
    /// interval's hits (`counts.hits`) the N-zone served.
    pub zzone_hits: u64,
    pub promotions: u64,
    pub demotions: u64,
}

impl ZoneInterval {
    /// Share of `-m` held by the Z-zone at the interval's end.
    pub fn zzone_share(&self) -> f64 {
        ratio(self.zzone_memory, self.memory_limit)
    }
    /// Share of `-m` held by the N-zone's pages at the interval's end.
    pub fn nzone_share(&self) -> f64 {
        ratio(self.nzone_memory, self.memory_limit)
    }
    /// Share of the interval's GET hits the N-zone served (`hits`: all of
    /// them); 0 without hits.
    pub fn nzone_hit_share(&self, hits: u64) -> f64 {
        ratio(hits.saturating_sub(self.zzone_hits), hits)
    }
}

/// The document `replay` and `sim` write with `--json` (and `compare` writes
/// a list of, with its summary).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RunResult {
    pub meta: RunMeta,
    pub totals: Totals,
    pub intervals: Vec<IntervalResult>,
}

/// Write any result document as pretty JSON.
pub fn write_json<T: Serialize>(path: &Path, doc: &T) -> anyhow::Result<()> {
    use anyhow::Context;
    let text = serde_json::to_string_pretty(doc)?;
    std::fs::write(path, text + "\n").with_context(|| format!("writing {}", path.display()))
}

/// Print one row per run: hit ratios, recomputation cost, throughput and
/// latency percentiles (a dash where a run has no latency, as `sim`).
pub fn print_table(runs: &[RunResult]) {
    print!("{}", format_table(runs));
}

/// The text [`print_table`] prints.
pub fn format_table(runs: &[RunResult]) -> String {
    let header = [
        "run",
        "workload",
        "requests",
        "hit",
        "byte hit",
        "cost hit",
        "recompute",
        "req/s",
        "p50 us",
        "p99 us",
        "p99.9 us",
    ];
    let mut rows: Vec<Vec<String>> = vec![header.iter().map(|s| s.to_string()).collect()];
    for r in runs {
        let t = &r.totals;
        let lat = t.latency.get("all");
        let l = |f: fn(&LatencySummary) -> f64| {
            lat.map(|s| fmt_us(f(s))).unwrap_or_else(|| "-".to_string())
        };
        rows.push(vec![
            r.meta.label.clone(),
            r.meta.model.clone(),
            t.counts.requests.to_string(),
            format!("{:.4}", t.hit_ratio),
            format!("{:.4}", t.byte_hit_ratio),
            format!("{:.4}", t.cost_hit_ratio),
            t.recomputation_cost.to_string(),
            if t.latency.is_empty() {
                "-".to_string()
            } else {
                format!("{:.0}", t.throughput_rps)
            },
            l(|s| s.p50_us),
            l(|s| s.p99_us),
            l(|s| s.p999_us),
        ]);
    }
    render(&rows)
}

/// Print a run's intervals: one row each.
pub fn format_intervals(run: &RunResult) -> String {
    let mut rows: Vec<Vec<String>> = vec![[
        "interval",
        "from",
        "requests",
        "hit",
        "byte hit",
        "cost hit",
        "recompute",
        "req/s",
        "p99 us",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()];
    let zone = run.intervals.iter().any(|i| i.zzone.is_some());
    if zone {
        for h in ["N mem", "Z mem", "Z target", "N hits"] {
            rows[0].push(h.to_string());
        }
    }
    for i in &run.intervals {
        let mut row = vec![
            i.index.to_string(),
            if i.unit == "seconds" {
                format!("{}s", i.start)
            } else {
                format!("{}", i.start as u64)
            },
            i.counts.requests.to_string(),
            format!("{:.4}", i.hit_ratio),
            format!("{:.4}", i.byte_hit_ratio),
            format!("{:.4}", i.cost_hit_ratio),
            i.recomputation_cost.to_string(),
            format!("{:.0}", i.throughput_rps),
            i.latency
                .as_ref()
                .map(|l| fmt_us(l.p99_us))
                .unwrap_or_else(|| "-".to_string()),
        ];
        if zone {
            match &i.zzone {
                Some(z) => row.extend([
                    format!("{:.1}%", 100.0 * z.nzone_share()),
                    format!("{:.1}%", 100.0 * z.zzone_share()),
                    format!("{}%", z.target_percent),
                    format!("{:.1}%", 100.0 * z.nzone_hit_share(i.counts.hits)),
                ]),
                None => row.extend(["-", "-", "-", "-"].map(String::from)),
            }
        }
        rows.push(row);
    }
    render(&rows)
}

/// A run's latency per operation ("all", "get", "set", "fill", "delete"):
/// count, mean and percentiles in microseconds. Empty when not measured.
pub fn format_latency(run: &RunResult) -> String {
    if run.totals.latency.is_empty() {
        return String::new();
    }
    let mut rows: Vec<Vec<String>> = vec![[
        "latency", "count", "mean us", "p50 us", "p90 us", "p99 us", "p99.9 us", "max us",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()];
    let order = ["all", "get", "fill", "set", "delete"];
    for op in order {
        if let Some(l) = run.totals.latency.get(op) {
            rows.push(vec![
                op.to_string(),
                l.count.to_string(),
                fmt_us(l.mean_us),
                fmt_us(l.p50_us),
                fmt_us(l.p90_us),
                fmt_us(l.p99_us),
                fmt_us(l.p999_us),
                fmt_us(l.max_us),
            ]);
        }
    }
    render(&rows)
}

fn fmt_us(v: f64) -> String {
    if v < 100.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.0}")
    }
}

/// Columns padded to their widest cell: the first left-aligned, the rest
/// right-aligned (numbers).
pub fn render(rows: &[Vec<String>]) -> String {
    let cols = rows.iter().map(|r| r.len()).max().unwrap_or(0);
    let mut width = vec![0usize; cols];
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            width[i] = width[i].max(c.chars().count());
        }
    }
    let mut out = String::new();
    for (n, r) in rows.iter().enumerate() {
        let mut line = String::new();
        for (i, c) in r.iter().enumerate() {
            if i > 0 {
                line.push_str("  ");
            }
            let pad = width[i] - c.chars().count();
            if i <= 1 {
                line.push_str(c);
                line.push_str(&" ".repeat(pad));
            } else {
                line.push_str(&" ".repeat(pad));
                line.push_str(c);
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
        if n == 0 {
            let total: usize = width.iter().sum::<usize>() + 2 * cols.saturating_sub(1);
            out.push_str(&"-".repeat(total));
            out.push('\n');
        }
    }
    out
}

// ---------------------------------------------------------------------------
// Date and commit

/// The current UTC time as RFC 3339, without a date crate: days since the
/// epoch to a civil date with Howard Hinnant's `civil_from_days` algorithm.
pub fn utc_now_rfc3339() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    rfc3339(secs)
}

fn rfc3339(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

/// `git rev-parse HEAD` of the working directory (with `-dirty` when there
/// are uncommitted changes to tracked files), or None outside a checkout.
pub fn git_commit() -> Option<String> {
    let out = std::process::Command::new("git")
        .args(["rev-parse", "HEAD"])
        .stderr(std::process::Stdio::null())
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let hash = String::from_utf8(out.stdout).ok()?.trim().to_string();
    let dirty = std::process::Command::new("git")
        .args(["diff", "--quiet", "HEAD"])
        .stderr(std::process::Stdio::null())
        .status()
        .map(|s| !s.success())
        .unwrap_or(false);
    Some(if dirty { format!("{hash}-dirty") } else { hash })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(seq: u64, us: u64) -> At {
        At {
            seq,
            elapsed_us: us,
        }
    }

    #[test]
    fn interval_spec_parses_requests_and_seconds() {
        assert_eq!("1000".parse(), Ok(IntervalSpec::Requests(1000)));
        assert_eq!("1000r".parse(), Ok(IntervalSpec::Requests(1000)));
        assert_eq!("0.5s".parse(), Ok(IntervalSpec::Seconds(0.5)));
        assert!("0".parse::<IntervalSpec>().is_err());
        assert!("-1s".parse::<IntervalSpec>().is_err());
        assert!("xs".parse::<IntervalSpec>().is_err());
        assert_eq!(IntervalSpec::Requests(10).index(at(25, 0)), 2);
        assert_eq!(IntervalSpec::Seconds(0.5).index(at(0, 1_600_000)), 3);
    }

    #[test]
    fn recorder_totals_intervals_and_merge() {
        let spec = IntervalSpec::Requests(2);
        let mut a = Recorder::new(spec);
        let mut b = Recorder::new(spec);
        // seq 0: hit (10 B, cost 5), seq 1: miss (30 B, cost 7) + fill,
        // seq 2: set, seq 3: delete, seq 4: hit (20 B, cost 1).
        a.get(at(0, 0), true, 10, 5);
        b.get(at(1, 10), false, 30, 7);
        b.fill(at(1, 12));
        a.set(at(2, 20));
        b.delete(at(3, 30));
        a.get(at(4, 1_000_040), true, 20, 1);
        a.latency(at(0, 0), LatOp::Get, 10_000);
        b.latency(at(1, 10), LatOp::Get, 30_000);
        a.merge(&b);
        let r = a.finish(RunMeta::default(), Duration::from_secs(2));
        let c = &r.totals.counts;
        assert_eq!(
            (c.requests, c.gets, c.hits, c.sets, c.deletes),
            (5, 3, 2, 1, 1)
        );
        assert_eq!((c.bytes_requested, c.bytes_hit), (60, 30));
        assert_eq!((c.cost_requested, c.cost_hit), (13, 6));
        assert!((r.totals.hit_ratio - 2.0 / 3.0).abs() < 1e-12);
        assert!((r.totals.byte_hit_ratio - 0.5).abs() < 1e-12);
        assert!((r.totals.cost_hit_ratio - 6.0 / 13.0).abs() < 1e-12);
        assert_eq!(r.totals.recomputation_cost, 7);
        assert_eq!(r.totals.fills, 1);
        assert!((r.totals.throughput_rps - 2.5).abs() < 1e-12);
        assert_eq!(r.intervals.len(), 3);
        assert_eq!(r.intervals[0].counts.gets, 2);
        assert_eq!(r.intervals[0].counts.hits, 1);
        assert_eq!(r.intervals[0].fills, 1);
        assert_eq!(r.intervals[1].counts.requests, 2);
        assert_eq!(r.intervals[2].start, 4.0);
        assert!((r.intervals[2].start_s - 1.00004).abs() < 1e-9);
        let lat = &r.totals.latency["get"];
        assert_eq!(lat.count, 2);
        // 3 significant digits: 10 us and 30 us within 0.1%.
        assert!((lat.p50_us - 10.0).abs() < 0.02, "{}", lat.p50_us);
        assert!((lat.max_us - 30.0).abs() < 0.05, "{}", lat.max_us);
        assert_eq!(r.totals.latency["all"].count, 2);
        assert!(!r.totals.latency.contains_key("set"));
        assert_eq!(r.intervals[0].latency.as_ref().map(|l| l.count), Some(2));
    }

    #[test]
    fn result_round_trips_through_json_and_prints() {
        let mut rec = Recorder::new(IntervalSpec::Seconds(1.0));
        rec.get(at(0, 0), true, 1, 1);
        rec.latency(at(0, 0), LatOp::Get, 5_000);
        let meta = RunMeta {
            label: "cachalot".into(),
            model: "ycsb-b".into(),
            ..RunMeta::default()
        };
        let r = rec.finish(meta, Duration::from_millis(500));
        let text = serde_json::to_string(&r).unwrap();
        let back: RunResult = serde_json::from_str(&text).unwrap();
        // serde_json's float parsing may differ in the last bit: compare
        // the integer parts exactly and the floats closely.
        assert_eq!(back.meta, r.meta);
        assert_eq!(back.totals.counts, r.totals.counts);
        assert_eq!(back.intervals.len(), 1);
        assert_eq!(back.intervals[0].counts, r.intervals[0].counts);
        let (x, y) = (&back.totals.latency["get"], &r.totals.latency["get"]);
        assert_eq!(x.cdf.len(), y.cdf.len());
        assert!((x.p99_us - y.p99_us).abs() < 1e-9);
        let table = format_table(std::slice::from_ref(&r));
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines.len(), 3);
        assert!(lines[2].starts_with("cachalot  ycsb-b"), "{table}");
        assert!(lines[2].contains("1.0000"), "{table}");
        assert!(lines[2].ends_with("5.0"), "{table}");
        let lat = format_latency(&r);
        let lines: Vec<&str> = lat.lines().collect();
        assert_eq!(lines.len(), 4, "{lat}");
        assert!(lines[2].starts_with("all "), "{lat}");
        assert!(lines[3].starts_with("get "), "{lat}");
        assert!(lines[3].ends_with("5.0"), "{lat}");
    }

    #[test]
    fn rfc3339_dates() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(1_700_000_000), "2023-11-14T22:13:20Z");
    }
}
