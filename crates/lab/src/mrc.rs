//! `cachalot-lab mrc`: miss-ratio curves of LRU by stack distance, weighted by
//! cost, overall and per slab class, and the offline optimal slab assignment.
//!
//! Sources: Mattson et al.'s stack algorithm (IBM Syst. J. 1970) as Carra &
//! Michiardi extend it with costs (`../shared/seeds/003_*`, Algorithm 1): one
//! pass over the trace records, for every GET, where the object stood in the
//! LRU stack; an LRU cache of size C hits exactly the requests at distance
//! <= C, so one pass gives the whole curve. Distances come from an O(log n)
//! counting tree ([`stack`]) in items and, weighted by size, in bytes (the
//! sizes of the distinct objects above plus its own: an LRU that evicts until
//! the newcomer fits hits exactly those). Per slab class, objects are grouped
//! by the chunk their item (16-byte header + key + value) needs under the
//! engine's `-f`/`-n`/`-I` classes, each class with its own stack (memcached
//! and cachalot evict per class), and the curves in pages feed the paper's
//! Algorithm 2 ([`optimal`]).
//!
//! Look-aside semantics as `replay`/`sim`: a GET is a hit or a miss (then the
//! application SETs, so the object goes on top either way); a SET moves the
//! object to the top without counting; a DELETE takes it out of the stacks.
//! TTLs are ignored here (`sim` honours them). Only GETs count in the ratios.

pub mod hist;
pub mod optimal;

use std::collections::HashMap;
use std::io::Write;
use std::path::PathBuf;

use cachalot_engine::{item, slab, Config, DEFAULT_PAGE_SIZE};
use serde::Serialize;

use crate::trace::{Op, Request};
use crate::workload::Source;
use cachalot_engine::stack::Stack;
use hist::{LogHist, Tally, Thresholds};

#[derive(clap::Args, Debug)]
#[command(
    about = "LRU miss-ratio curves by stack distance (items, bytes, cost), per slab class, and the optimal slab assignment",
    long_about = "Computes LRU miss-ratio curves in one pass (Mattson's stack algorithm with \
                  costs, Carra & Michiardi's Algorithm 1, on an O(log n) counting tree): in \
                  items, in bytes, and per slab class in pages; then the offline optimal \
                  assignment of pages to slab classes for --memory (Algorithm 2, and the exact \
                  optimum by dynamic programming when small enough)."
)]
pub struct MrcArgs {
    #[command(flatten)]
    pub source: Source,
    /// Cache sizes in bytes for the byte curve, comma separated (64MB, 512k, 1g, 1000).
    #[arg(long, value_delimiter = ',', value_parser = parse_size)]
    pub sizes: Vec<u64>,
    /// Cache sizes in items for the item curve, comma separated.
    #[arg(long, value_delimiter = ',')]
    pub items: Vec<u64>,
    /// Points on each curve that has no explicit sizes, evenly spaced up to
    /// the largest stack distance seen.
    #[arg(long, default_value_t = 10)]
    pub points: usize,
    /// Requests that only warm the stacks up: they move objects but are not
    /// counted (like the thesis's YCSB warm-up before measuring).
    #[arg(long, default_value_t = 0)]
    pub warmup: u64,
    /// Also report the smallest cache (items and bytes) whose LRU hit ratio
    /// reaches this, e.g. 0.95.
    #[arg(long)]
    pub target_hit: Option<f64>,
    /// What an object's size is in the byte curve: the value (the trace's size
    /// column, as libCacheSim counts), the item (header + key + value), or the
    /// slab chunk it occupies.
    #[arg(long, value_enum, default_value_t = BytesOf::Value)]
    pub bytes_of: BytesOf,
    #[command(flatten)]
    pub slab: SlabArgs,
    /// Print every slab class's curve summary, not only the assignment.
    #[arg(long)]
    pub per_class: bool,
    /// Write the full result (all curves) as JSON to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

/// The memory and slab flags of the engine (memcached's -m, -f, -n, -I),
/// which `sim` (building an engine) and `mrc` (its slab geometry, and the
/// memory to assign) share.
#[derive(clap::Args, Debug, Clone)]
pub struct SlabArgs {
    /// Memory for items and index, like -m (MB without a suffix); `mrc`
    /// assigns it to slab classes.
    #[arg(short = 'm', long, default_value = "64", value_parser = parse_megabytes)]
    pub memory: u64,
    /// Chunk size growth factor between slab classes (-f).
    #[arg(short = 'f', long, default_value_t = Config::default().growth_factor)]
    pub growth_factor: f64,
    /// Minimum key + value + flags space in the smallest chunk (-n).
    #[arg(short = 'n', long, default_value_t = Config::default().chunk_min_data)]
    pub chunk_min: usize,
    /// Largest item (-I; 1m, 512k).
    #[arg(short = 'I', long, default_value = "1m", value_parser = parse_size)]
    pub max_item_size: u64,
}

/// Which size the byte curve uses.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum BytesOf {
    Value,
    Item,
    Chunk,
}

/// Parse "64MB", "512k", "1g", "1.5GiB", "1000" (bytes; binary multiples).
pub fn parse_size(s: &str) -> Result<u64, String> {
    parse_with_default_unit(s, 1)
}

/// Like [`parse_size`] but a bare number means megabytes (memcached's -m).
pub fn parse_megabytes(s: &str) -> Result<u64, String> {
    parse_with_default_unit(s, 1 << 20)
}

fn parse_with_default_unit(s: &str, unit: u64) -> Result<u64, String> {
    let t = s.trim().to_ascii_lowercase();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, suffix) = t.split_at(split);
    let mult: u64 = match suffix.trim() {
        "" => unit,
        "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        "t" | "tb" | "tib" => 1 << 40,
        other => return Err(format!("unknown size unit {other:?} in {s:?}")),
    };
    let n: f64 = num
        .parse()
        .map_err(|_| format!("expected a size like 64MB, got {s:?}"))?;
    let v = n * mult as f64;
    if !v.is_finite() || v < 0.0 || v > u64::MAX as f64 {
        return Err(format!("size out of range: {s:?}"));
    }
    Ok(v.round() as u64)
}

/// Slab geometry of the engine for a configuration (what `Engine::new` builds).
#[derive(Clone, Debug)]
pub struct Geometry {
    pub page_size: usize,
    pub chunk_sizes: Vec<u32>,
    pub item_size_max: usize,
}

impl Geometry {
    /// The engine's default geometry: 1 MB pages, classes up to memcached's
    /// default `slab_chunk_max` (half a page).
    pub fn new(growth_factor: f64, chunk_min_data: usize, item_size_max: usize) -> Geometry {
        Geometry {
            page_size: DEFAULT_PAGE_SIZE,
            chunk_sizes: slab::class_sizes(
                item::HEADER_LEN + chunk_min_data,
                growth_factor,
                item_size_max.min(DEFAULT_PAGE_SIZE / 2),
            ),
            item_size_max,
        }
    }

    /// Class index (0-based; `stats slabs` numbers them from 1) for an item
    /// of `total_len` bytes, None if larger than -I.
    pub fn class_of(&self, total_len: usize) -> Option<usize> {
        if total_len > self.item_size_max {
            return None;
        }
        // Larger items are chained over chunks of the last class (counted
        // here as one).
        let i = self
            .chunk_sizes
            .partition_point(|&c| (c as usize) < total_len);
        Some(i.min(self.chunk_sizes.len() - 1))
    }
}

/// What the analysis needs besides the requests.
#[derive(Clone, Debug)]
pub struct MrcOptions {
    pub byte_sizes: Vec<u64>,
    pub item_sizes: Vec<u64>,
    pub points: usize,
    /// Leading requests that update the stacks without being counted.
    pub warmup: u64,
    /// Hit ratio whose smallest cache size to report.
    pub target_hit: Option<f64>,
    pub bytes_of: BytesOf,
    pub geometry: Geometry,
    /// Memory for the detailed optimal assignment.
    pub memory: u64,
}

/// One point of a miss-ratio curve.
#[derive(Clone, Debug, Serialize)]
pub struct CurvePoint {
    /// Cache size (items or bytes).
    pub size: u64,
    pub miss_ratio: f64,
    pub byte_miss_ratio: f64,
    /// Cost of the misses over the cost of all GETs.
    pub cost_miss_ratio: f64,
    pub hits: Tally,
}

/// One slab class's stack: its cumulative hit curve by pages.
#[derive(Clone, Debug, Serialize)]
pub struct ClassCurve {
    /// memcached's class number (1-based).
    pub id: u32,
    pub chunk_size: u32,
    pub chunks_per_page: u32,
    /// Objects put into the class (first requests, and again after a delete
    /// or a size change that moved them between classes).
    pub objects: u64,
    /// GETs measured in this class (hits at some size, or first requests).
    pub requests: Tally,
    /// First requests (misses at any size).
    pub compulsory: Tally,
    /// `hits_by_pages[k]`: hits (count, cost, bytes) with k pages; index 0 is
    /// all zero, the last entry holds every object of the class.
    pub hits_by_pages: Vec<Tally>,
}

/// A slab assignment for some memory.
#[derive(Clone, Debug, Serialize)]
pub struct SlabPlan {
    /// (class id, pages) for every class given pages.
    pub pages: Vec<(u32, usize)>,
    pub pages_used: usize,
    pub hit_ratio: f64,
    pub byte_hit_ratio: f64,
    pub cost_hit_ratio: f64,
}

/// The smallest LRU caches that reach a hit ratio (None: not reachable,
/// i.e. the target is above 1 - compulsory misses). Sizes are histogram
/// edges, so at most 0.8% above the exact smallest size.
#[derive(Clone, Debug, Serialize)]
pub struct TargetSizes {
    pub hit_ratio: f64,
    pub items: Option<u64>,
    pub bytes: Option<u64>,
}

/// The optimum for one memory size.
#[derive(Clone, Debug, Serialize)]
pub struct OptimalPoint {
    pub memory: u64,
    pub pages: usize,
    /// Carra & Michiardi's Algorithm 2 (greedy on cost-hit differences).
    pub greedy: SlabPlan,
    /// The exact optimum (dynamic programming), when small enough to compute.
    pub exact: Option<SlabPlan>,
}

/// Everything `mrc` computes.
#[derive(Clone, Debug, Serialize)]
pub struct MrcReport {
    pub source: String,
    pub requests: u64,
    /// Leading requests not counted (they only warmed the stacks).
    pub warmup: u64,
    pub gets: u64,
    pub sets: u64,
    pub deletes: u64,
    pub distinct_objects: u64,
    /// What the byte curve counts per object.
    pub bytes_of: BytesOf,
    /// Bytes of all objects in the stack at the end (the cache size that
    /// holds everything, give or take deletes and size changes).
    pub footprint_bytes: u64,
    /// All GETs: count, cost, value bytes.
    pub requested: Tally,
    /// First-time GETs (misses at any cache size).
    pub compulsory: Tally,
    /// GETs of items larger than -I (never cached by the engine).
    pub too_large: Tally,
    pub by_items: Vec<CurvePoint>,
    pub by_bytes: Vec<CurvePoint>,
    pub target: Option<TargetSizes>,
    pub page_size: usize,
    pub classes: Vec<ClassCurve>,
    /// The optimum at --memory, then at every byte-curve size (greedy only
    /// there unless the exact one is cheap).
    pub optimal: OptimalPoint,
    pub optimal_by_size: Vec<OptimalPoint>,
}

const NO_CLASS: u16 = u16::MAX;

struct ClassState {
    stack: Stack,
    per_page: u32,
    objects: u64,
    requests: Tally,
    compulsory: Tally,
    /// Hits by the number of pages they need (exact: few pages per class).
    by_pages: Vec<Tally>,
}

/// The one-pass analysis; feed it requests, then [`Analyzer::finish`].
pub struct Analyzer {
    opts: MrcOptions,
    ids: HashMap<u64, u32, BuildIdHasher>,
    obj_class: Vec<u16>,
    gslots: Vec<u32>,
    cslots: Vec<u32>,
    global: Stack,
    classes: Vec<ClassState>,
    item_hist: LogHist,
    byte_hist: LogHist,
    item_thr: Thresholds,
    byte_thr: Thresholds,
    requests: u64,
    sets: u64,
    deletes: u64,
    requested: Tally,
    compulsory: Tally,
    too_large: Tally,
    /// Largest distances seen: a cache this large hits every re-reference.
    max_items: u64,
    max_bytes: u64,
}

impl Analyzer {
    pub fn new(opts: MrcOptions) -> Analyzer {
        let classes = opts
            .geometry
            .chunk_sizes
            .iter()
            .map(|&c| ClassState {
                stack: Stack::new(false),
                per_page: (opts.geometry.page_size / c as usize).max(1) as u32,
                objects: 0,
                requests: Tally::default(),
                compulsory: Tally::default(),
                by_pages: vec![Tally::default()],
            })
            .collect();
        Analyzer {
            item_thr: Thresholds::new(opts.item_sizes.clone()),
            byte_thr: Thresholds::new(opts.byte_sizes.clone()),
            opts,
            ids: HashMap::default(),
            obj_class: Vec::new(),
            gslots: Vec::new(),
            cslots: Vec::new(),
            global: Stack::new(true),
            classes,
            item_hist: LogHist::default(),
            byte_hist: LogHist::default(),
            requests: 0,
            sets: 0,
            deletes: 0,
            requested: Tally::default(),
            compulsory: Tally::default(),
            too_large: Tally::default(),
            max_items: 0,
            max_bytes: 0,
        }
    }

    fn object(&mut self, key: u64) -> u32 {
        let next = self.ids.len() as u32;
        let id = *self.ids.entry(key).or_insert(next);
        if id == next {
            self.obj_class.push(NO_CLASS);
        }
        id
    }

    /// Size of the request's object in the byte curve, and its class.
    fn sizes(&self, r: &Request) -> (u32, Option<usize>) {
        // Keys longer than memcached's 250 bytes are cut, as replay and sim do.
        let key_len = (r.key_size as usize).clamp(1, cachalot_engine::KEY_MAX_LEN);
        let total = item::total_len(key_len, r.value_size as usize, 0);
        let class = self.opts.geometry.class_of(total);
        let size = match self.opts.bytes_of {
            BytesOf::Value => r.value_size as u64,
            BytesOf::Item => total as u64,
            BytesOf::Chunk => class
                .and_then(|c| self.opts.geometry.chunk_sizes.get(c))
                .map_or(total as u64, |&c| c as u64),
        };
        (size.min(u32::MAX as u64) as u32, class)
    }

    /// Move `obj` to the top of `class`'s stack (out of its old one),
    /// returning where it was in the old class's stack and that class.
    fn class_access(&mut self, obj: u32, class: Option<usize>) -> Option<(usize, u64)> {
        let old = self.obj_class[obj as usize];
        let mut found = None;
        if old != NO_CLASS {
            let oc = old as usize;
            if let Some(d) = self.classes[oc].stack.remove(obj, &mut self.cslots) {
                found = Some((oc, d.items));
            }
        }
        match class {
            Some(c) => {
                let st = &mut self.classes[c];
                st.stack.access(obj, 1, &mut self.cslots);
                if old as usize != c {
                    st.objects += 1;
                }
                self.obj_class[obj as usize] = c as u16;
            }
            None => self.obj_class[obj as usize] = NO_CLASS,
        }
        found
    }

    pub fn access(&mut self, r: &Request) {
        self.requests += 1;
        if self.requests <= self.opts.warmup {
            self.warm(r);
            return;
        }
        match r.op {
            Op::Get => {
                let (size, class) = self.sizes(r);
                let obj = self.object(r.key);
                self.requested.add(r.cost, r.value_size);
                match self.global.access(obj, size, &mut self.gslots) {
                    Some(d) => {
                        self.max_items = self.max_items.max(d.items);
                        self.max_bytes = self.max_bytes.max(d.bytes);
                        self.item_hist.record(d.items, r.cost, r.value_size);
                        self.byte_hist.record(d.bytes, r.cost, r.value_size);
                        self.item_thr.record(d.items, r.cost, r.value_size);
                        self.byte_thr.record(d.bytes, r.cost, r.value_size);
                    }
                    None => self.compulsory.add(r.cost, r.value_size),
                }
                if class.is_none() {
                    self.too_large.add(r.cost, r.value_size);
                }
                // The hit is judged where the object lives now (its old class
                // if its size changed); a first request counts in its class.
                match self.class_access(obj, class) {
                    Some((oc, items)) => {
                        let st = &mut self.classes[oc];
                        st.requests.add(r.cost, r.value_size);
                        let pages = items.div_ceil(st.per_page as u64) as usize;
                        if st.by_pages.len() <= pages {
                            st.by_pages.resize(pages + 1, Tally::default());
                        }
                        st.by_pages[pages].add(r.cost, r.value_size);
                    }
                    None => {
                        if let Some(c) = class {
                            let st = &mut self.classes[c];
                            st.requests.add(r.cost, r.value_size);
                            st.compulsory.add(r.cost, r.value_size);
                        }
                    }
                }
            }
            Op::Set => {
                self.sets += 1;
                let (size, class) = self.sizes(r);
                let obj = self.object(r.key);
                self.global.access(obj, size, &mut self.gslots);
                self.class_access(obj, class);
            }
            Op::Delete => {
                self.deletes += 1;
                self.delete(r.key);
            }
        }
    }

    /// A warm-up request: the stacks change as usual, nothing is counted.
    fn warm(&mut self, r: &Request) {
        match r.op {
            Op::Get | Op::Set => {
                let (size, class) = self.sizes(r);
                let obj = self.object(r.key);
                self.global.access(obj, size, &mut self.gslots);
                self.class_access(obj, class);
            }
            Op::Delete => self.delete(r.key),
        }
    }

    fn delete(&mut self, key: u64) {
        if let Some(&obj) = self.ids.get(&key) {
            self.global.remove(obj, &mut self.gslots);
            let old = self.obj_class[obj as usize];
            if old != NO_CLASS {
                self.classes[old as usize]
                    .stack
                    .remove(obj, &mut self.cslots);
                self.obj_class[obj as usize] = NO_CLASS;
            }
        }
    }

    fn point(&self, size: u64, hits: Tally) -> CurvePoint {
        let req = &self.requested;
        let miss = |h: u64, all: u64| {
            if all == 0 {
                0.0
            } else {
                1.0 - h as f64 / all as f64
            }
        };
        CurvePoint {
            size,
            miss_ratio: miss(hits.count, req.count),
            byte_miss_ratio: miss(hits.bytes, req.bytes),
            cost_miss_ratio: miss(hits.cost, req.cost),
            hits,
        }
    }

    /// A curve: exact at the explicit sizes, else `points` bucket edges
    /// evenly spread up to `max` (the largest distance seen, where every
    /// re-reference hits, which is exact too).
    fn curve(&self, thr: &Thresholds, hist: &LogHist, explicit: bool, max: u64) -> Vec<CurvePoint> {
        if explicit {
            return thr
                .cumulative()
                .into_iter()
                .map(|(s, t)| self.point(s, t))
                .collect();
        }
        let n = self.opts.points.max(1) as u64;
        let mut out: Vec<CurvePoint> = Vec::new();
        for i in 1..=n {
            let want = (max as u128 * i as u128 / n as u128) as u64;
            let (edge, t) = if i == n {
                (max, hist.hits_at_edge(u64::MAX).1)
            } else {
                hist.hits_at_edge(want.max(1))
            };
            if out.last().is_some_and(|p| p.size == edge) {
                continue;
            }
            out.push(self.point(edge, t));
        }
        out
    }

    /// Cumulative per-class curves in pages, and the plans.
    fn plan(&self, curves: &[Vec<Tally>], pages: &[usize]) -> SlabPlan {
        let mut hits = Tally::default();
        let mut list = Vec::new();
        for (w, &k) in pages.iter().enumerate() {
            if k == 0 {
                continue;
            }
            list.push((w as u32 + 1, k));
            let c = &curves[w];
            if let Some(t) = c.get(k).or(c.last()) {
                hits = hits.plus(t);
            }
        }
        let ratio = |h: u64, all: u64| if all == 0 { 0.0 } else { h as f64 / all as f64 };
        SlabPlan {
            pages_used: pages.iter().sum(),
            pages: list,
            hit_ratio: ratio(hits.count, self.requested.count),
            byte_hit_ratio: ratio(hits.bytes, self.requested.bytes),
            cost_hit_ratio: ratio(hits.cost, self.requested.cost),
        }
    }

    fn optimal_at(&self, curves: &[Vec<Tally>], memory: u64, exact: bool) -> OptimalPoint {
        let pages = (memory / self.opts.geometry.page_size as u64) as usize;
        let cost: Vec<Vec<u64>> = curves
            .iter()
            .map(|c| c.iter().map(|t| t.cost).collect())
            .collect();
        let g = optimal::greedy(&cost, pages);
        let e = if exact {
            optimal::exact(&cost, pages)
        } else {
            None
        };
        OptimalPoint {
            memory,
            pages,
            greedy: self.plan(curves, &g.pages),
            exact: e.map(|a| self.plan(curves, &a.pages)),
        }
    }

    pub fn finish(self, source: String) -> MrcReport {
        let distinct = self.ids.len() as u64;
        let footprint = self.global.total_bytes();
        let by_items = self.curve(
            &self.item_thr,
            &self.item_hist,
            !self.opts.item_sizes.is_empty(),
            self.max_items,
        );
        let by_bytes = self.curve(
            &self.byte_thr,
            &self.byte_hist,
            !self.opts.byte_sizes.is_empty(),
            self.max_bytes,
        );
        let target = self.opts.target_hit.map(|t| {
            // The smallest count of hits that makes the ratio: ceil(t * gets).
            let need = (t * self.requested.count as f64).ceil().max(0.0) as u64;
            TargetSizes {
                hit_ratio: t,
                items: self.item_hist.smallest_edge_with(need),
                bytes: self.byte_hist.smallest_edge_with(need),
            }
        });
        let class_curves: Vec<Vec<Tally>> = self
            .classes
            .iter()
            .map(|c| {
                let mut acc = Tally::default();
                c.by_pages
                    .iter()
                    .map(|t| {
                        acc = acc.plus(t);
                        acc
                    })
                    .collect()
            })
            .collect();
        let optimal = self.optimal_at(&class_curves, self.opts.memory, true);
        // Exact DP per curve point only while it stays cheap.
        let optimal_by_size = by_bytes
            .iter()
            .map(|p| {
                let pages = p.size / self.opts.geometry.page_size as u64;
                let cheap = pages <= 2048;
                self.optimal_at(&class_curves, p.size, cheap)
            })
            .collect();
        let classes = self
            .classes
            .iter()
            .zip(class_curves)
            .enumerate()
            .filter(|(_, (c, _))| c.objects > 0)
            .map(|(i, (c, curve))| ClassCurve {
                id: i as u32 + 1,
                chunk_size: self.opts.geometry.chunk_sizes[i],
                chunks_per_page: c.per_page,
                objects: c.objects,
                requests: c.requests,
                compulsory: c.compulsory,
                hits_by_pages: curve,
            })
            .collect();
        MrcReport {
            source,
            requests: self.requests,
            warmup: self.opts.warmup.min(self.requests),
            gets: self.requested.count,
            sets: self.sets,
            deletes: self.deletes,
            distinct_objects: distinct,
            bytes_of: self.opts.bytes_of,
            footprint_bytes: footprint,
            requested: self.requested,
            compulsory: self.compulsory,
            too_large: self.too_large,
            by_items,
            by_bytes,
            target,
            page_size: self.opts.geometry.page_size,
            classes,
            optimal,
            optimal_by_size,
        }
    }
}

/// Run the analysis over a request stream (for tests and other commands).
pub fn analyze(
    requests: impl Iterator<Item = Request>,
    opts: MrcOptions,
    source: String,
    progress: Option<&indicatif::ProgressBar>,
) -> MrcReport {
    let mut a = Analyzer::new(opts);
    for (i, r) in requests.enumerate() {
        a.access(&r);
        if i % 65_536 == 65_535 {
            if let Some(p) = progress {
                p.inc(65_536);
            }
        }
    }
    a.finish(source)
}

/// Object ids from models are often small sequential numbers: spread them
/// (splitmix64's finaliser) instead of paying for SipHash on every request.
#[derive(Default, Clone, Copy)]
pub struct BuildIdHasher;

#[derive(Default)]
pub struct IdHasher(u64);

impl std::hash::Hasher for IdHasher {
    fn finish(&self) -> u64 {
        let mut z = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ b as u64).wrapping_mul(0x100_0000_01B3);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 ^= n;
    }
}

impl std::hash::BuildHasher for BuildIdHasher {
    type Hasher = IdHasher;
    fn build_hasher(&self) -> IdHasher {
        IdHasher::default()
    }
}

/// A progress bar for `n` requests (a spinner when the count is unknown),
/// drawn on stderr only when it is a terminal.
pub fn progress_bar(n: Option<u64>, what: &str) -> indicatif::ProgressBar {
    let pb = match n {
        Some(n) => indicatif::ProgressBar::new(n),
        None => indicatif::ProgressBar::new_spinner(),
    };
    let style = match n {
        Some(_) => indicatif::ProgressStyle::with_template(
            "{msg} [{bar:40}] {human_pos}/{human_len} requests ({per_sec}, eta {eta})",
        ),
        None => indicatif::ProgressStyle::with_template(
            "{msg} {spinner} {human_pos} requests ({per_sec})",
        ),
    };
    if let Ok(s) = style {
        pb.set_style(s.progress_chars("=> "));
    }
    pb.set_message(what.to_string());
    pb
}

fn fmt_bytes(b: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KB", "MB", "GB", "TB"];
    let mut v = b as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{b} B")
    } else {
        format!("{v:.2} {}", UNITS[u])
    }
}

/// The readable table.
pub fn print_report(r: &MrcReport, per_class: bool, out: &mut impl Write) -> std::io::Result<()> {
    writeln!(
        out,
        "{}: {} requests ({} GETs, {} SETs, {} DELETEs counted after {} warm-up), {} objects, footprint {} ({:?} sizes)",
        r.source,
        r.requests,
        r.gets,
        r.sets,
        r.deletes,
        r.warmup,
        r.distinct_objects,
        fmt_bytes(r.footprint_bytes),
        r.bytes_of
    )?;
    let ratio = |a: u64, b: u64| if b == 0 { 0.0 } else { a as f64 / b as f64 };
    writeln!(
        out,
        "compulsory misses: {:.4} of GETs, {:.4} of cost; too large for -I: {:.4}",
        ratio(r.compulsory.count, r.requested.count),
        ratio(r.compulsory.cost, r.requested.cost),
        ratio(r.too_large.count, r.requested.count)
    )?;
    writeln!(out, "\nLRU by items")?;
    writeln!(
        out,
        "{:>14} {:>10} {:>10} {:>10}",
        "items", "miss", "byte miss", "cost miss"
    )?;
    for p in &r.by_items {
        writeln!(
            out,
            "{:>14} {:>10.4} {:>10.4} {:>10.4}",
            p.size, p.miss_ratio, p.byte_miss_ratio, p.cost_miss_ratio
        )?;
    }
    writeln!(
        out,
        "\nLRU by bytes; slab opt: cost miss ratio of the optimal slab assignment with that memory in pages (Alg. 2 greedy / exact DP)"
    )?;
    writeln!(
        out,
        "{:>12} {:>10} {:>10} {:>10} {:>7} {:>12} {:>12}",
        "bytes", "miss", "byte miss", "cost miss", "pages", "slab opt", "exact"
    )?;
    for (p, o) in r.by_bytes.iter().zip(&r.optimal_by_size) {
        writeln!(
            out,
            "{:>12} {:>10.4} {:>10.4} {:>10.4} {:>7} {:>12.4} {:>12}",
            fmt_bytes(p.size),
            p.miss_ratio,
            p.byte_miss_ratio,
            p.cost_miss_ratio,
            o.pages,
            1.0 - o.greedy.cost_hit_ratio,
            o.exact.as_ref().map_or("-".to_string(), |e| format!(
                "{:.4}",
                1.0 - e.cost_hit_ratio
            ))
        )?;
    }
    if let Some(t) = &r.target {
        let show =
            |v: Option<u64>, f: &dyn Fn(u64) -> String| v.map_or("unreachable".to_string(), f);
        writeln!(
            out,
            "\nLRU hit ratio {:.4} from {} items, {} ({:?} sizes)",
            t.hit_ratio,
            show(t.items, &|v| v.to_string()),
            show(t.bytes, &|v| format!("{} B = {}", v, fmt_bytes(v))),
            r.bytes_of
        )?;
    }
    let o = &r.optimal;
    writeln!(
        out,
        "\nOptimal slab assignment for {} ({} pages of {}):",
        fmt_bytes(o.memory),
        o.pages,
        fmt_bytes(r.page_size as u64)
    )?;
    let show = |name: &str, p: &SlabPlan, out: &mut dyn Write| -> std::io::Result<()> {
        writeln!(
            out,
            "  {name}: cost hit ratio {:.4}, hit ratio {:.4}, byte hit ratio {:.4}, {} pages used",
            p.cost_hit_ratio, p.hit_ratio, p.byte_hit_ratio, p.pages_used
        )?;
        let list: Vec<String> = p.pages.iter().map(|(c, k)| format!("{c}:{k}")).collect();
        writeln!(out, "    class:pages {}", list.join(" "))
    };
    show("Algorithm 2 (greedy)", &o.greedy, out)?;
    match &o.exact {
        Some(e) => show("exact (DP)", e, out)?,
        None => writeln!(out, "  exact (DP): too large to compute")?,
    }
    if per_class {
        // Each class's own curve at three points: with the pages the optimal
        // assignment (Algorithm 2) gives it, and with all it could use.
        writeln!(
            out,
            "\nPer slab class (hit and cost miss ratios within the class; opt = Algorithm 2 at {})",
            fmt_bytes(o.memory)
        )?;
        writeln!(
            out,
            "{:>5} {:>8} {:>9} {:>10} {:>10} {:>10} {:>9} {:>8} {:>9} {:>9} {:>8}",
            "class",
            "chunk",
            "per page",
            "objects",
            "GETs",
            "1st miss",
            "opt pages",
            "hit@opt",
            "cmiss@opt",
            "all pages",
            "hit@all"
        )?;
        for c in &r.classes {
            let at = |k: usize| {
                c.hits_by_pages
                    .get(k)
                    .or(c.hits_by_pages.last())
                    .copied()
                    .unwrap_or_default()
            };
            let k = o
                .greedy
                .pages
                .iter()
                .find(|(id, _)| *id == c.id)
                .map_or(0, |&(_, k)| k);
            let (opt, all) = (at(k), at(usize::MAX));
            writeln!(
                out,
                "{:>5} {:>8} {:>9} {:>10} {:>10} {:>10} {:>9} {:>8.4} {:>9.4} {:>9} {:>8.4}",
                c.id,
                c.chunk_size,
                c.chunks_per_page,
                c.objects,
                c.requests.count,
                c.compulsory.count,
                k,
                ratio(opt.count, c.requests.count),
                1.0 - ratio(opt.cost, c.requests.cost),
                c.hits_by_pages.len().saturating_sub(1),
                ratio(all.count, c.requests.count)
            )?;
        }
    }
    Ok(())
}

pub fn run(args: MrcArgs) -> anyhow::Result<()> {
    // The engine's own limits (Engine::new refuses the same).
    anyhow::ensure!(
        args.slab.growth_factor > 1.0,
        "growth factor must be greater than 1.0"
    );
    let max_item = cachalot_engine::VALUE_MAX_LEN as u64 + 1;
    anyhow::ensure!(
        (1024..=max_item).contains(&args.slab.max_item_size),
        "item size max must be between 1024 bytes and {max_item} bytes"
    );
    if let Some(t) = args.target_hit {
        anyhow::ensure!((0.0..=1.0).contains(&t), "--target-hit is a ratio in 0..1");
    }
    let geometry = Geometry::new(
        args.slab.growth_factor,
        args.slab.chunk_min,
        usize::try_from(args.slab.max_item_size)?,
    );
    let opts = MrcOptions {
        byte_sizes: args.sizes.clone(),
        item_sizes: args.items.clone(),
        points: args.points,
        bytes_of: args.bytes_of,
        geometry,
        memory: args.slab.memory,
        warmup: args.warmup,
        target_hit: args.target_hit,
    };
    let requests = args.source.open()?;
    let known = args.source.trace.is_none().then_some(args.source.requests);
    let pb = progress_bar(known, "mrc");
    let report = analyze(requests, opts, args.source.name(), Some(&pb));
    pb.finish_and_clear();
    print_report(&report, args.per_class, &mut std::io::stdout().lock())?;
    if let Some(path) = &args.json {
        let f = std::fs::File::create(path)?;
        serde_json::to_writer_pretty(std::io::BufWriter::new(f), &report)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get(key: u64, value_size: u32, cost: u32) -> Request {
        Request {
            time_us: 0,
            key,
            key_size: 16,
            value_size,
            cost,
            op: Op::Get,
            ttl: 0,
        }
    }

    fn opts() -> MrcOptions {
        MrcOptions {
            byte_sizes: vec![],
            item_sizes: vec![],
            points: 10,
            bytes_of: BytesOf::Value,
            geometry: Geometry::new(1.25, 16, 1 << 20),
            memory: 2 << 20,
            warmup: 0,
            target_hit: None,
        }
    }

    /// A plain LRU cache of `cap` items or bytes, simulated directly.
    fn lru_hits(reqs: &[Request], cap: u64, bytes: bool) -> (u64, u64) {
        lru_hits_after(reqs, cap, bytes, 0)
    }

    /// Same, counting only requests from index `skip` on.
    fn lru_hits_after(reqs: &[Request], cap: u64, bytes: bool, skip: usize) -> (u64, u64) {
        let mut list: Vec<(u64, u64)> = Vec::new(); // most recent first
        let (mut hits, mut cost) = (0, 0);
        for (i, r) in reqs.iter().enumerate() {
            let sz = if bytes { r.value_size as u64 } else { 1 };
            if let Some(p) = list.iter().position(|&(k, _)| k == r.key) {
                if i >= skip {
                    hits += 1;
                    cost += r.cost as u64;
                }
                let e = list.remove(p);
                list.insert(0, e);
            } else if sz <= cap {
                let mut used: u64 = list.iter().map(|&(_, s)| s).sum();
                while used + sz > cap {
                    let (_, s) = list.pop().unwrap();
                    used -= s;
                }
                list.insert(0, (r.key, sz));
            }
        }
        (hits, cost)
    }

    fn trace(n: usize, seed: u64) -> Vec<Request> {
        let mut x = seed;
        (0..n)
            .map(|_| {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let u = (x >> 33) as f64 / (1u64 << 31) as f64;
                // Skewed keys: small ids much more often.
                let key = (u * u * u * 400.0) as u64;
                get(key, 10 + (key as u32 * 37) % 300, 1 + (key as u32 % 5))
            })
            .collect()
    }

    #[test]
    fn curves_match_a_direct_lru_simulation() {
        let reqs = trace(20_000, 5);
        let mut o = opts();
        o.item_sizes = vec![1, 10, 50, 100, 300];
        o.byte_sizes = vec![500, 5_000, 20_000, 60_000];
        let r = analyze(reqs.iter().copied(), o, "t".into(), None);
        assert_eq!(r.gets, 20_000);
        for p in &r.by_items {
            let (h, c) = lru_hits(&reqs, p.size, false);
            assert_eq!(p.hits.count, h, "items {}", p.size);
            assert_eq!(p.hits.cost, c, "items {}", p.size);
        }
        for p in &r.by_bytes {
            let (h, c) = lru_hits(&reqs, p.size, true);
            assert_eq!(p.hits.count, h, "bytes {}", p.size);
            assert_eq!(p.hits.cost, c, "bytes {}", p.size);
        }
        // Miss ratios are consistent with the counts.
        let p = &r.by_items[2];
        assert!((p.miss_ratio - (1.0 - p.hits.count as f64 / 20_000.0)).abs() < 1e-12);
    }

    #[test]
    fn point_curves_are_exact_at_their_edges_and_end_at_the_cold_miss_floor() {
        let reqs = trace(20_000, 9);
        let r = analyze(reqs.iter().copied(), opts(), "t".into(), None);
        assert!(!r.by_items.is_empty());
        for p in r.by_items.iter().chain(&r.by_bytes) {
            let bytes = r.by_bytes.iter().any(|q| std::ptr::eq(q, p));
            let (h, _) = lru_hits(&reqs, p.size, bytes);
            assert_eq!(p.hits.count, h, "size {} bytes={bytes}", p.size);
        }
        // The last point is the largest distance: only first requests miss.
        let last = r.by_items.last().unwrap();
        assert!(last.size <= r.distinct_objects);
        assert_eq!(last.hits.count, r.gets - r.compulsory.count);
        let (h, _) = lru_hits(&reqs, last.size - 1, false);
        assert!(h < last.hits.count, "a smaller cache misses something");
        // Curves never rise.
        for w in r.by_bytes.windows(2) {
            assert!(w[1].miss_ratio <= w[0].miss_ratio);
        }
    }

    #[test]
    fn per_class_stacks_and_optimum_match_per_class_lru() {
        // Two classes: 100-byte and 5000-byte values. With 1 MB pages a
        // page holds thousands of small items, so use many objects.
        let g = Geometry::new(1.25, 16, 1 << 20);
        let small = g.class_of(item::total_len(16, 100, 0)).unwrap();
        let big = g.class_of(item::total_len(16, 5000, 0)).unwrap();
        assert_ne!(small, big);
        let per_small = (g.page_size / g.chunk_sizes[small] as usize) as u64;
        let per_big = (g.page_size / g.chunk_sizes[big] as usize) as u64;
        let mut reqs = Vec::new();
        let mut x = 77u64;
        for _ in 0..200_000 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let u = (x >> 33) as f64 / (1u64 << 31) as f64;
            if x & 1 == 0 {
                let k = (u * u * 3.0 * per_small as f64) as u64;
                reqs.push(get(k, 100, 1));
            } else {
                let k = 1 << 40 | (u * u * 4.0 * per_big as f64) as u64;
                reqs.push(get(k, 5000, 3));
            }
        }
        let mut o = opts();
        o.memory = 3 << 20;
        let r = analyze(reqs.iter().copied(), o, "t".into(), None);
        let cs = r
            .classes
            .iter()
            .find(|c| c.id as usize == small + 1)
            .unwrap();
        let cb = r.classes.iter().find(|c| c.id as usize == big + 1).unwrap();
        for (c, keys_big, per) in [(cs, false, per_small), (cb, true, per_big)] {
            let sub: Vec<Request> = reqs
                .iter()
                .filter(|q| (q.key >> 40 == 1) == keys_big)
                .copied()
                .collect();
            assert_eq!(c.requests.count, sub.len() as u64);
            for (k, t) in c.hits_by_pages.iter().enumerate().take(5) {
                let (h, cost) = lru_hits(&sub, k as u64 * per, false);
                assert_eq!((t.count, t.cost), (h, cost), "class {} pages {k}", c.id);
            }
        }
        // The optimum for 3 pages is the best split, by brute force.
        let best = (0..=3usize)
            .map(|k| {
                let a = cs.hits_by_pages.get(k).or(cs.hits_by_pages.last()).unwrap();
                let b = cb
                    .hits_by_pages
                    .get(3 - k)
                    .or(cb.hits_by_pages.last())
                    .unwrap();
                a.cost + b.cost
            })
            .max()
            .unwrap();
        let e = r.optimal.exact.as_ref().unwrap();
        assert!((e.cost_hit_ratio - best as f64 / r.requested.cost as f64).abs() < 1e-12);
        assert!(r.optimal.greedy.cost_hit_ratio <= e.cost_hit_ratio + 1e-12);
        assert_eq!(r.optimal.pages, 3);
    }

    #[test]
    fn sets_move_to_top_and_deletes_remove() {
        let mut a = Analyzer::new(MrcOptions {
            item_sizes: vec![1, 2],
            ..opts()
        });
        let mut set = get(1, 10, 1);
        set.op = Op::Set;
        a.access(&get(1, 10, 1)); // cold
        a.access(&get(2, 10, 1)); // cold
        a.access(&set); // 1 on top, not counted
        a.access(&get(1, 10, 1)); // distance 1
        let mut del = get(1, 10, 1);
        del.op = Op::Delete;
        a.access(&del);
        a.access(&get(1, 10, 1)); // cold again
        a.access(&get(2, 10, 1)); // distance 2
        let r = a.finish("t".into());
        assert_eq!((r.gets, r.sets, r.deletes), (5, 1, 1));
        assert_eq!(r.compulsory.count, 3);
        let c: Vec<(u64, u64)> = r.by_items.iter().map(|p| (p.size, p.hits.count)).collect();
        assert_eq!(c, vec![(1, 1), (2, 2)]);
    }

    #[test]
    fn warmup_fills_the_stack_without_counting() {
        let reqs = trace(10_000, 3);
        let mut o = opts();
        o.item_sizes = vec![20, 80];
        o.byte_sizes = vec![10_000];
        o.warmup = 4_000;
        let r = analyze(reqs.iter().copied(), o, "t".into(), None);
        assert_eq!((r.requests, r.warmup, r.gets), (10_000, 4_000, 6_000));
        for p in &r.by_items {
            assert_eq!(p.hits.count, lru_hits_after(&reqs, p.size, false, 4_000).0);
        }
        let p = &r.by_bytes[0];
        assert_eq!(p.hits.count, lru_hits_after(&reqs, p.size, true, 4_000).0);
        // After 4000 requests over ~400 keys, first references are rare.
        assert!(r.compulsory.count < 100, "{}", r.compulsory.count);
    }

    #[test]
    fn target_hit_ratio_gives_the_smallest_cache() {
        let reqs = trace(20_000, 4);
        let mut o = opts();
        o.target_hit = Some(0.6);
        let r = analyze(reqs.iter().copied(), o, "t".into(), None);
        let t = r.target.as_ref().unwrap();
        let items = t.items.unwrap();
        // Item distances below 256 have exact buckets: the smallest size.
        assert!(items < 256, "{items}");
        let need = (0.6 * r.gets as f64).ceil() as u64;
        assert!(lru_hits(&reqs, items, false).0 >= need);
        assert!(lru_hits(&reqs, items - 1, false).0 < need);
        // Bytes: reached at the edge, not 1% below it.
        let bytes = t.bytes.unwrap();
        assert!(lru_hits(&reqs, bytes, true).0 >= need);
        assert!(lru_hits(&reqs, bytes * 99 / 100, true).0 < need);
        // Above 1 - compulsory misses it cannot be reached.
        let mut o = opts();
        o.target_hit = Some(1.0);
        let r = analyze(reqs.iter().copied(), o, "t".into(), None);
        assert_eq!(r.target.as_ref().unwrap().items, None);
    }

    #[test]
    fn sizes_parse_like_memcached_flags() {
        assert_eq!(parse_size("64MB"), Ok(64 << 20));
        assert_eq!(parse_size("512k"), Ok(512 << 10));
        assert_eq!(parse_size("1.5GiB"), Ok(3 << 29));
        assert_eq!(parse_size("1000"), Ok(1000));
        assert_eq!(parse_megabytes("64"), Ok(64 << 20));
        assert_eq!(parse_megabytes("2g"), Ok(2 << 30));
        assert!(parse_size("12 parsecs").is_err());
        assert!(parse_size("").is_err());
        assert!(parse_size("-5").is_err());
    }

    #[test]
    fn classes_follow_the_engine() {
        let g = Geometry::new(1.25, 16, 1 << 20);
        // The smallest item fits the first class; -I is the last class.
        assert_eq!(g.class_of(item::total_len(1, 0, 0)), Some(0));
        assert_eq!(g.class_of(1 << 20), Some(g.chunk_sizes.len() - 1));
        assert_eq!(g.class_of((1 << 20) + 1), None);
        for (i, &c) in g.chunk_sizes.iter().enumerate() {
            assert_eq!(g.class_of(c as usize), Some(i));
            if i + 1 < g.chunk_sizes.len() {
                assert_eq!(g.class_of(c as usize + 1), Some(i + 1));
            }
        }
    }
}
