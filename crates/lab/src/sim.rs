//! `cachalot-lab sim`: the same look-aside run as `replay`, through
//! cachalot's engine in-process: no sockets, no threads, exactly repeatable,
//! and fast enough for policy studies over many memory sizes.
//!
//! What makes it agree with `replay` against a cachalot server with the same
//! `-m`/`-f`/`-n`/`-I`: the same engine (`cachalot_engine::Cache`, GETs down its tier chain, with the
//! server's default `Config`), the same look-aside steps (GET; on a miss SET
//! `value_size` bytes from `values::value_bytes`, flags 0, exptime = ttl,
//! with the request's cost, as replay sends `cost=` to cachalot), the same
//! key bytes (`trace::key_bytes`, cut to memcached's 250), and the server's
//! background work: its maintainer thread calls `Engine::maintain(512)` up to
//! 8 times every 200 ms (crates/server/src/net.rs), so we do the same every
//! 200 ms of simulated time. Time is the trace's `time_us` (so TTLs and
//! slab automove's 10 s period play out as in the trace), or `--rate R` to
//! pace the requests at R per second the way `replay --rate R` does; the
//! engine's clock is advanced with `Clock::advance` and never reads the wall
//! clock. The result is the same document as `replay` (`metrics::RunResult`),
//! without latencies; `totals.elapsed_s` is the simulation's own run time.
//!
//! With the Z-zone (`--zzone true`) every interval also records the split
//! at its end (`metrics::ZoneInterval`: each zone's memory and items, the
//! split's target, and the GET hits, promotions and demotions of the Z-zone
//! during the interval), read from `Engine::stats` as the server's
//! `stats zzone` reads it: the data of zExpander's Fig. 15 for `plot --kind
//! zone-split`.
//!
//! Learned costs (`--learn-costs`, docs/cost.md) need the engine's
//! microsecond clock, which the simulation drives too (`Clock::set_us`):
//! trace time plus the backend delays so far. With `--backend-delay cost`
//! the clients send no cost: between a GET miss and its SET the clock moves
//! by the request's cost in microseconds (the recomputation the cost
//! stands for), so the engine can only learn it from that gap.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cachalot_engine::codec::Codec;
use cachalot_engine::engine::Lookup;
use cachalot_engine::mrc::{self, LiveMrc};
use cachalot_engine::rebalance::{SasRule, Tuning};
use cachalot_engine::{
    Cache, Clock, Config, DeleteOutcome, EvictionPolicy, RebalancePolicy, Store, StoreOutcome,
};

use crate::metrics::{self, At, IntervalSpec, Recorder, RunMeta, RunResult, ZoneInterval};
use crate::mrc::{progress_bar, SlabArgs};
use crate::trace::{key_bytes, Op, Request};
use crate::values::{value_bytes, ValueKind};
use crate::workload::Source;

/// memcached's longest key; `replay` cuts longer model keys the same way.
const KEY_MAX: usize = 250;

/// The server's maintainer: every 200 ms, up to `Engine::maintain_slices`
/// slices of 512 chunks.
pub(crate) const MAINTAIN_PERIOD_US: u64 = 200_000;
pub(crate) const MAINTAIN_BUDGET: usize = 512;

/// After a gap in the trace longer than this many maintainer periods, the
/// rest of the gap is skipped in one step (the reclaimer has swept every page
/// by then; only the clock still needs to move).
const MAX_TICKS_PER_GAP: u64 = 600;

/// The engine flags `sim` shares with the server (memcached's names).
#[derive(clap::Args, Debug, Clone)]
pub struct EngineArgs {
    #[command(flatten)]
    pub slab: SlabArgs,
    /// -o slab_automove=N: 0 off, 1 background (the default), 2 aggressive.
    #[arg(long, default_value_t = Config::default().slab_automove)]
    pub slab_automove: u8,
    /// -M: return errors instead of evicting.
    #[arg(short = 'M', long)]
    pub no_evict: bool,
    /// -o eviction=: lru (CLOCK, the default), gdwheel (GreedyDual by cost),
    /// gdwheel-lazy (hits applied when the item reaches the front) or sieve
    /// (SIEVE, NSDI'24).
    #[arg(long, default_value = "lru", value_parser = parse_eviction)]
    pub eviction: EvictionPolicy,
    /// -o learn_costs=1: learn costs from the gap between a GET miss and its SET.
    #[arg(long)]
    pub learn_costs: bool,
    /// -o rebalance=: how pages move between slab classes: off, memcached
    /// (automove), sas (Carra & Michiardi's Algorithm 3), cost-per-byte
    /// (GD-Wheel ch. 5) or mrc (their optimum, Algorithm 2, on sampled
    /// curves).
    #[arg(long, default_value = RebalancePolicy::default().name(), value_parser = parse_rebalance)]
    pub rebalance: RebalancePolicy,
    /// SAS: move a page every this many capacity misses (the paper's M).
    #[arg(long, default_value_t = Tuning::default().sas_misses)]
    pub sas_misses: u64,
    /// SAS: decay of its counters per decision (0 = reset every interval).
    #[arg(long, default_value_t = Tuning::default().sas_decay)]
    pub sas_decay: f64,
    /// SAS: how it picks the classes: marginal (the default: next-page gain
    /// against estimated loss) or paper (Algorithm 3 as written).
    #[arg(long, default_value = "marginal", value_parser = parse_sas_rule)]
    pub sas_rule: SasRule,
    /// SAS: ghost set window in pages of each class's evictions.
    #[arg(long, default_value_t = Tuning::default().ghost_pages)]
    pub ghost_pages: u32,
    /// SAS: ghost set size in KB (0 = what the window needs, at most 1/256
    /// of the memory).
    #[arg(long, default_value_t = 0)]
    pub ghost_kb: usize,
    /// mrc: sampled GETs between two decisions.
    #[arg(long, default_value_t = Tuning::default().mrc_period)]
    pub mrc_period: u64,
    /// -o hugepages=: item pages on transparent huge pages (true/false).
    #[arg(long, default_value_t = Config::default().hugepages, action = clap::ArgAction::Set)]
    pub hugepages: bool,
    /// -o lock_stripes=: index stripes (a power of two).
    #[arg(long, default_value_t = Config::default().lock_stripes)]
    pub lock_stripes: usize,
    /// -o in_place_sets=: a SET of an item of the same class overwrites it
    /// in place (true/false).
    #[arg(long, default_value_t = Config::default().in_place_sets, action = clap::ArgAction::Set)]
    pub in_place_sets: bool,
    /// -o lockfree_inserts=: a SET of a new key writes its item in a chunk
    /// reserved for its thread, holding only its stripe (true/false).
    #[arg(long, default_value_t = Config::default().lockfree_inserts, action = clap::ArgAction::Set)]
    pub lockfree_inserts: bool,
    /// -o repartition=: the maintainer sorts each page's items into
    /// columns by temperature, hottest first (Cavast; true/false).
    #[arg(long, default_value_t = Config::default().repartition, action = clap::ArgAction::Set)]
    pub repartition: bool,
    /// -o zzone=: the compressed Z-zone (zExpander; true/false).
    #[arg(long, default_value_t = Config::default().zzone, action = clap::ArgAction::Set)]
    pub zzone: bool,
    /// -o zzone_target=: percent of expensive operations the split keeps in
    /// the N-zone (0: the Z-zone takes all it can).
    #[arg(long, default_value_t = Config::default().zzone_target)]
    pub zzone_target: u8,
    /// -o zzone_block=: bytes a Z-zone block holds compressed.
    #[arg(long, default_value_t = Config::default().zzone_block)]
    pub zzone_block: usize,
    /// -o zzone_deltas=: deltas a Z-zone block takes before a rewrite.
    #[arg(long, default_value_t = Config::default().zzone_deltas)]
    pub zzone_deltas: u8,
    /// -o zzone_codec=: zstd, lz4 or none.
    #[arg(long, default_value = "zstd", value_parser = parse_codec)]
    pub zzone_codec: Codec,
}

fn parse_codec(s: &str) -> Result<Codec, String> {
    match s {
        "zstd" => Ok(Codec::Zstd),
        "lz4" => Ok(Codec::Lz4),
        "none" => Ok(Codec::Raw),
        _ => Err(format!("unknown codec {s} (zstd, lz4, none)")),
    }
}

fn parse_sas_rule(s: &str) -> Result<SasRule, String> {
    s.parse()
}

fn parse_rebalance(s: &str) -> Result<RebalancePolicy, String> {
    s.parse()
}

fn parse_eviction(s: &str) -> Result<EvictionPolicy, String> {
    s.parse()
}

/// Where the cost of a miss shows up.
#[derive(clap::ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum BackendDelay {
    /// The client sends the request's cost with the SET (like `cost=`).
    #[default]
    None,
    /// The client sends no cost; the SET comes the request's cost in
    /// microseconds after the miss (for `--learn-costs`).
    Cost,
}

impl EngineArgs {
    pub fn config(&self) -> anyhow::Result<Config> {
        Ok(Config {
            memory_limit: usize::try_from(self.slab.memory)?,
            item_size_max: usize::try_from(self.slab.max_item_size)?,
            growth_factor: self.slab.growth_factor,
            chunk_min_data: self.slab.chunk_min,
            slab_automove: self.slab_automove,
            evict: !self.no_evict,
            eviction: self.eviction,
            learn_costs: self.learn_costs,
            rebalance: self.rebalance,
            hugepages: self.hugepages,
            lock_stripes: self.lock_stripes,
            in_place_sets: self.in_place_sets,
            lockfree_inserts: self.lockfree_inserts,
            repartition: self.repartition,
            zzone: self.zzone,
            zzone_target: self.zzone_target,
            zzone_block: self.zzone_block,
            zzone_deltas: self.zzone_deltas,
            zzone_codec: self.zzone_codec,
            rebalance_tuning: Tuning {
                sas_misses: self.sas_misses,
                sas_decay: self.sas_decay,
                sas_rule: self.sas_rule,
                ghost_pages: self.ghost_pages,
                ghost_bytes: self.ghost_kb << 10,
                mrc_period: self.mrc_period,
                ..Tuning::default()
            },
            ..Config::default()
        })
    }
}

#[derive(clap::Args, Debug)]
#[command(
    about = "Run a trace or model through cachalot's engine in-process (look-aside, like replay)",
    long_about = "Runs the requests through cachalot's storage engine in this process, with \
                  replay's look-aside semantics (GET; on a miss SET the value with its ttl and \
                  cost). No network: fast and exactly repeatable. The engine clock follows the \
                  trace's timestamps (or --rate), and the server's background maintenance runs \
                  every 200 ms of that time, so hit ratios agree with replay against a cachalot \
                  server started with the same -m/-f/-n/-I."
)]
pub struct SimArgs {
    #[command(flatten)]
    pub source: Source,
    #[command(flatten)]
    pub engine: EngineArgs,
    /// Pace requests at this many per second instead of the trace's timestamps
    /// (what the engine clock sees; use replay's --rate to compare TTL effects).
    #[arg(long)]
    pub rate: Option<f64>,
    /// What values look like (the engine stores them as they are).
    #[arg(long, value_enum, default_value_t = ValueKind::Random)]
    pub values: ValueKind,
    /// Interval for the per-interval figures: requests (100000) or seconds of
    /// simulated time (1s).
    #[arg(long, default_value = "100000")]
    pub interval: IntervalSpec,
    /// Print the per-interval table too.
    #[arg(long)]
    pub show_intervals: bool,
    /// none: SETs carry the request's cost; cost: they carry none and come
    /// that many microseconds after the miss (what --learn-costs learns from).
    #[arg(long, value_enum, default_value_t = BackendDelay::None)]
    pub backend_delay: BackendDelay,
    /// Write the result document (same format as replay's) here.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

/// Everything [`simulate`] needs besides the requests.
#[derive(Clone, Debug)]
pub struct SimConfig {
    pub engine: Config,
    pub values: ValueKind,
    pub interval: IntervalSpec,
    /// Requests per second of simulated time; None = the trace's time_us.
    pub rate: Option<f64>,
    pub backend_delay: BackendDelay,
}

impl SimConfig {
    pub fn new(engine: Config) -> SimConfig {
        SimConfig {
            engine,
            values: ValueKind::Random,
            interval: IntervalSpec::default(),
            rate: None,
            backend_delay: BackendDelay::None,
        }
    }
}

/// The engine with its simulated clock and the server's maintainer schedule.
/// GETs go through the `Cache`, as the server's do (one tier chain); the
/// rest through the engine under its lock.
struct Sim {
    cache: Cache,
    clock: Arc<Clock>,
    /// Simulated microseconds since the start, and the whole seconds the
    /// engine clock has been moved so far.
    now_us: u64,
    clock_secs: u64,
    /// Backend delays so far (`--backend-delay cost`): the engine's
    /// microsecond clock reads now_us + delay_us.
    delay_us: u64,
    backend_delay: BackendDelay,
    next_maintain_us: u64,
    key: Vec<u8>,
    value: Vec<u8>,
    /// The live miss-ratio curve, fed as the server feeds it (`stats mrc`).
    mrc: LiveMrc,
}

impl Sim {
    fn new(config: Config, backend_delay: BackendDelay) -> anyhow::Result<Sim> {
        let clock = Arc::new(Clock::new());
        clock.set_us(0);
        let cache = Cache::new(config.clone(), clock.clone())
            .map_err(|e| anyhow::anyhow!("engine configuration: {e}"))?;
        Ok(Sim {
            cache,
            clock,
            now_us: 0,
            clock_secs: 0,
            delay_us: 0,
            backend_delay,
            next_maintain_us: MAINTAIN_PERIOD_US,
            key: Vec::with_capacity(KEY_MAX),
            value: Vec::new(),
            mrc: LiveMrc::for_memory(config.memory_limit, 0),
        })
    }

    fn set_clock(&mut self, us: u64) {
        let secs = us / 1_000_000;
        if secs > self.clock_secs {
            self.clock
                .advance(Duration::from_secs(secs - self.clock_secs));
            self.clock_secs = secs;
        }
    }

    /// Move simulated time to `us` (never backwards), running the
    /// maintainer at every 200 ms tick passed on the way, each at its time.
    fn advance_to(&mut self, us: u64) {
        if us <= self.now_us {
            return;
        }
        let mut ticks = 0;
        while self.next_maintain_us <= us {
            if ticks == MAX_TICKS_PER_GAP {
                // A long gap: jump to its last tick.
                let last = us - (us - self.next_maintain_us) % MAINTAIN_PERIOD_US;
                self.next_maintain_us = last;
            }
            self.set_clock(self.next_maintain_us);
            let mut engine = self.cache.lock();
            for _ in 0..engine.maintain_slices() {
                if engine.maintain(MAINTAIN_BUDGET) < MAINTAIN_BUDGET {
                    break;
                }
            }
            engine.train_zone_now();
            drop(engine);
            self.next_maintain_us += MAINTAIN_PERIOD_US;
            ticks += 1;
        }
        self.set_clock(us);
        self.now_us = us;
        self.clock.set_us(us + self.delay_us);
    }

    /// One request, look-aside; records it.
    fn request(&mut self, r: &Request, at: At, values: ValueKind, rec: &mut Recorder) {
        key_bytes(r.key, (r.key_size as usize).min(KEY_MAX), &mut self.key);
        match r.op {
            Op::Get => {
                // As a server GET does: a Z-zone hit may stay there.
                let hit = self.cache.get(&self.key, Lookup::GET, |it| it.is_some());
                rec.get(at, hit, r.value_size, r.cost);
                let size = mrc::item_size(self.key.len(), r.value_size as usize);
                let access = match hit {
                    true => mrc::Access::Hit { size },
                    false => mrc::Access::Miss,
                };
                self.observe(access);
                let now = self.clock.now();
                self.mrc.count_gets(1.0, f64::from(u8::from(!hit)), now);
                if !hit {
                    if self.backend_delay == BackendDelay::Cost {
                        self.delay_us += r.cost as u64;
                        self.clock.set_us(self.now_us + self.delay_us);
                    }
                    if !self.store(r, values) {
                        rec.error(at);
                    }
                    rec.fill(at);
                }
            }
            Op::Set => {
                if !self.store(r, values) {
                    rec.error(at);
                }
                rec.set(at);
            }
            Op::Delete => {
                // NOT_FOUND is a normal reply, not an error.
                let _: DeleteOutcome = self.cache.lock().delete(&self.key, 0);
                self.observe(mrc::Access::Delete);
                rec.delete(at);
            }
        }
    }

    /// SET the request's value; false when the engine refused it (too large,
    /// out of memory), which a server answers with SERVER_ERROR.
    fn store(&mut self, r: &Request, values: ValueKind) -> bool {
        // Refused before a value is built: a trace may ask for huge values.
        if !self.cache.fits(self.key.len(), r.value_size as usize, 0) {
            return false;
        }
        value_bytes(values, r.key, r.value_size as usize, &mut self.value);
        let mut st = Store::set(&self.key, &self.value);
        st.expiry = self.clock.expiry(r.ttl as i64);
        st.cost = (self.backend_delay == BackendDelay::None).then_some(r.cost);
        let stored = matches!(self.cache.lock().store(&st), StoreOutcome::Stored { .. });
        let size = mrc::item_size(self.key.len(), self.value.len());
        self.observe(mrc::Access::Store { size });
        stored
    }

    /// Tell the live curve what a request did to the current key.
    fn observe(&mut self, access: mrc::Access) {
        let h = cachalot_engine::hash::hash(&self.key);
        self.mrc.record(h, access, self.clock.now(), || None);
    }
}

/// Run `requests` through a fresh engine and return the run document (with
/// `meta` filled in with the engine's settings and stats). Same requests and
/// config, same result, every time.
pub fn simulate(
    requests: impl Iterator<Item = Request>,
    cfg: &SimConfig,
    mut meta: RunMeta,
    progress: Option<&indicatif::ProgressBar>,
) -> anyhow::Result<RunResult> {
    let mut sim = Sim::new(cfg.engine.clone(), cfg.backend_delay)?;
    let mut rec = Recorder::new(cfg.interval);
    let started = Instant::now();
    let rate = cfg.rate.filter(|r| r.is_finite() && *r > 0.0);
    let mut t0 = None;
    let mut probe = ZoneProbe::default();
    for (seq, r) in requests.enumerate() {
        let seq = seq as u64;
        let us = match rate {
            Some(rate) => (seq as f64 * 1e6 / rate) as u64,
            None => r.time_us.saturating_sub(*t0.get_or_insert(r.time_us)),
        };
        let at = At {
            seq,
            elapsed_us: us.max(sim.now_us),
        };
        // A new interval: the zones as the last one left them.
        probe.enter(cfg.interval.index(at), &sim.cache);
        sim.advance_to(us);
        sim.request(&r, at, cfg.values, &mut rec);
        if seq % 65_536 == 65_535 {
            if let Some(p) = progress {
                p.inc(65_536);
            }
        }
    }
    probe.enter(usize::MAX, &sim.cache);
    fill_meta(&mut meta, cfg, &sim);
    let mut result = rec.finish(meta, started.elapsed());
    for iv in &mut result.intervals {
        iv.zzone = probe.samples.remove(&(iv.index as usize));
    }
    Ok(result)
}

/// Samples the zones at the end of every interval, for the figures of the
/// split adapting (zExpander Fig. 15): only with a Z-zone.
#[derive(Default)]
struct ZoneProbe {
    /// The interval the requests are in.
    current: Option<usize>,
    /// Z-zone hits, promotions and demotions at its start.
    start: (u64, u64, u64),
    samples: BTreeMap<usize, ZoneInterval>,
}

impl ZoneProbe {
    /// The next request is in interval `index`: if that is a new one, record
    /// the interval just left as the engine has it now.
    fn enter(&mut self, index: usize, cache: &Cache) {
        if self.current == Some(index) {
            return;
        }
        let st = cache.lock().stats();
        let Some(z) = st.zzone else {
            self.current = Some(index);
            return;
        };
        let zs = z.zone;
        let now = (zs.hits, zs.promotions, zs.demotions);
        if let Some(left) = self.current {
            self.samples.insert(
                left,
                ZoneInterval {
                    target_percent: z.share_percent,
                    memory_limit: st.limit_maxbytes,
                    nzone_memory: st.total_malloced,
                    zzone_memory: zs.memory_bytes,
                    nzone_items: st.curr_items.saturating_sub(zs.items),
                    zzone_items: zs.items,
                    nzone_item_bytes: st.bytes,
                    zzone_item_bytes: zs.raw_bytes,
                    zzone_hits: now.0.saturating_sub(self.start.0),
                    promotions: now.1.saturating_sub(self.start.1),
                    demotions: now.2.saturating_sub(self.start.2),
                },
            );
        }
        self.current = Some(index);
        self.start = now;
    }
}

/// The engine's settings and, like replay's `stats` after a run, its counters.
fn fill_meta(meta: &mut RunMeta, cfg: &SimConfig, sim: &Sim) {
    let c = &cfg.engine;
    meta.server = "in-process".to_string();
    meta.server_kind = "cachalot-engine".to_string();
    meta.server_version = Some(env!("CARGO_PKG_VERSION").to_string());
    meta.memory_mb = Some((c.memory_limit >> 20) as u64);
    let s = &mut meta.settings;
    s.insert("memory_limit".into(), c.memory_limit.into());
    s.insert("growth_factor".into(), c.growth_factor.into());
    s.insert("chunk_min_data".into(), c.chunk_min_data.into());
    s.insert("item_size_max".into(), c.item_size_max.into());
    s.insert("slab_automove".into(), c.slab_automove.into());
    s.insert("evict".into(), c.evict.into());
    s.insert("eviction".into(), c.eviction.name().into());
    s.insert("learn_costs".into(), c.learn_costs.into());
    s.insert("rebalance".into(), c.rebalance.name().into());
    s.insert("sas_misses".into(), c.rebalance_tuning.sas_misses.into());
    s.insert("sas_decay".into(), c.rebalance_tuning.sas_decay.into());
    s.insert(
        "sas_rule".into(),
        format!("{:?}", c.rebalance_tuning.sas_rule)
            .to_lowercase()
            .into(),
    );
    s.insert(
        "backend_delay".into(),
        serde_json::to_value(cfg.backend_delay).unwrap_or_default(),
    );
    s.insert(
        "values".into(),
        serde_json::to_value(cfg.values).unwrap_or_default(),
    );
    s.insert("interval".into(), cfg.interval.to_string().into());
    s.insert(
        "rate".into(),
        cfg.rate.map(serde_json::Value::from).unwrap_or_default(),
    );
    s.insert("simulated_seconds".into(), (sim.now_us as f64 / 1e6).into());
    let st = sim.cache.lock().stats();
    let stats = [
        ("curr_items", st.curr_items),
        ("total_items", st.total_items),
        ("bytes", st.bytes),
        ("evictions", st.evictions),
        ("reclaimed", st.reclaimed),
        ("expired_unfetched", st.expired_unfetched),
        ("evicted_unfetched", st.evicted_unfetched),
        ("get_expired", st.get_expired),
        ("crawler_reclaimed", st.crawler_reclaimed),
        ("limit_maxbytes", st.limit_maxbytes),
        ("total_malloced", st.total_malloced),
        ("hash_bytes", st.hash_bytes),
        ("slabs_moved", st.slabs_moved),
        ("slab_reassign_rescues", st.slab_reassign_rescues),
        ("slab_reassign_evictions", st.slab_reassign_evictions),
        ("outofmemory", st.outofmemory),
        ("evicted_cost", st.evicted_cost),
        ("learned_costs", st.learned_costs),
        ("capacity_misses", st.capacity_misses),
        ("cost_capacity_misses", st.cost_capacity_misses),
        ("rebalance_decisions", st.rebalance_decisions),
        ("rebalance_bytes", st.rebalance_bytes),
    ];
    for (k, v) in stats {
        meta.server_stats.insert(k.to_string(), v.to_string());
    }
    meta.server_stats.extend(sim.mrc.report(mrc::Held::of(&st)));
    if let Some(z) = st.zzone {
        let zs = z.zone;
        let zstats = [
            ("zzone_items", zs.items),
            ("zzone_pages", zs.pages),
            ("zzone_share_percent", z.share_percent as u64),
            ("zzone_benchmark", z.benchmark),
            ("zzone_hits", zs.hits),
            ("zzone_promotions", zs.promotions),
            ("zzone_demotions", zs.demotions),
            ("zzone_refused", zs.refused),
            ("zzone_large_items", zs.large_items),
            ("zzone_large_bytes", zs.large_bytes),
            ("zzone_evictions", zs.evictions),
            ("zzone_bytes_in", zs.raw_bytes),
            ("zzone_bytes_out", zs.stored_bytes),
            ("zzone_metadata_bytes", zs.metadata_bytes),
            ("zzone_pending", zs.pending),
            ("zzone_trie_bytes", zs.trie_bytes),
            ("zzone_descriptor_bytes", zs.descriptor_bytes),
            ("zzone_blocks", zs.blocks),
            ("zzone_raw_blocks", zs.written[0].0),
            ("zzone_lz4_blocks", zs.written[1].0),
            ("zzone_zstd_blocks", zs.written[2].0),
        ];
        for (k, v) in zstats {
            meta.server_stats.insert(k.to_string(), v.to_string());
        }
    }
    let pages: Vec<String> = sim
        .cache
        .lock()
        .slab_stats()
        .iter()
        .filter(|c| c.total_pages > 0)
        .map(|c| format!("{}:{}", c.id, c.total_pages))
        .collect();
    meta.server_stats
        .insert("slab_pages".to_string(), pages.join(" "));
}

pub fn run(args: SimArgs) -> anyhow::Result<()> {
    if let Some(r) = args.rate {
        anyhow::ensure!(
            r.is_finite() && r > 0.0,
            "--rate must be a positive number of requests per second"
        );
    }
    let cfg = SimConfig {
        engine: args.engine.config()?,
        values: args.values,
        interval: args.interval,
        rate: args.rate,
        backend_delay: args.backend_delay,
    };
    let requests = args.source.open()?;
    let known = args.source.trace.is_none().then_some(args.source.requests);
    let pb = progress_bar(known, "sim");
    let meta = RunMeta::new("sim", "sim", &args.source);
    let result = simulate(requests, &cfg, meta, Some(&pb))?;
    pb.finish_and_clear();
    metrics::print_table(std::slice::from_ref(&result));
    if args.show_intervals {
        print!("{}", metrics::format_intervals(&result));
    }
    let st = &result.meta.server_stats;
    let get = |k: &str| st.get(k).map_or("-", |v| v.as_str());
    println!(
        "engine: {} items, {} evictions, {} expired, {} slab pages moved; pages per class: {}",
        get("curr_items"),
        get("evictions"),
        get("get_expired")
            .parse::<u64>()
            .unwrap_or(0)
            .saturating_add(get("crawler_reclaimed").parse::<u64>().unwrap_or(0)),
        get("slabs_moved"),
        get("slab_pages")
    );
    if st.contains_key("zzone_items") {
        println!(
            "zzone: {} items in {} pages ({}% of memory), {} hits, {} promotions, {} demotions, \
             {} evictions, {} refused, {} bytes in, {} out, {} metadata, benchmark {} demotions; \
             {} items stored apart in {} bytes",
            get("zzone_items"),
            get("zzone_pages"),
            get("zzone_share_percent"),
            get("zzone_hits"),
            get("zzone_promotions"),
            get("zzone_demotions"),
            get("zzone_evictions"),
            get("zzone_refused"),
            get("zzone_bytes_in"),
            get("zzone_bytes_out"),
            get("zzone_metadata_bytes"),
            get("zzone_benchmark"),
            get("zzone_large_items"),
            get("zzone_large_bytes"),
        );
        println!(
            "zzone metadata: {} blocks, {} pending removals, trie {} B, descriptors {} B; \
             blocks written raw {}, lz4 {}, zstd {}",
            get("zzone_blocks"),
            get("zzone_pending"),
            get("zzone_trie_bytes"),
            get("zzone_descriptor_bytes"),
            get("zzone_raw_blocks"),
            get("zzone_lz4_blocks"),
            get("zzone_zstd_blocks"),
        );
    }
    if let Some(path) = &args.json {
        metrics::write_json(path, &result)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(time_us: u64, key: u64, op: Op, value_size: u32, ttl: u32) -> Request {
        Request {
            time_us,
            key,
            key_size: 20,
            value_size,
            cost: 1 + (key % 9) as u32,
            op,
            ttl,
        }
    }

    /// A skewed stream with sets and deletes, timestamps 10 us apart.
    fn stream(n: u64, keys: u64, seed: u64) -> Vec<Request> {
        let mut x = seed;
        (0..n)
            .map(|i| {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let u = (x >> 11) as f64 / (1u64 << 53) as f64;
                let key = (u * u * keys as f64) as u64;
                let op = match x % 50 {
                    0 => Op::Set,
                    1 => Op::Delete,
                    _ => Op::Get,
                };
                req(i * 10, key, op, 100 + (key % 400) as u32, 0)
            })
            .collect()
    }

    fn small_config() -> SimConfig {
        SimConfig::new(Config {
            memory_limit: 16 << 20,
            ..Config::default()
        })
    }

    #[test]
    fn look_aside_counts_match_a_model_when_everything_fits() {
        // 64 MB holds every key: a GET misses only on the first request after
        // the start or a delete, like a dictionary.
        let reqs = stream(50_000, 2_000, 3);
        let cfg = SimConfig::new(Config::default());
        let r = simulate(reqs.iter().copied(), &cfg, RunMeta::default(), None).unwrap();
        let mut present = std::collections::HashSet::new();
        let mut want = metrics::Counts::default();
        for q in &reqs {
            match q.op {
                Op::Get => {
                    want.record_get(present.contains(&q.key), q.value_size, q.cost);
                    present.insert(q.key);
                }
                Op::Set => {
                    want.requests += 1;
                    want.sets += 1;
                    present.insert(q.key);
                }
                Op::Delete => {
                    want.requests += 1;
                    want.deletes += 1;
                    present.remove(&q.key);
                }
            }
        }
        assert_eq!(r.totals.counts, want);
        assert_eq!(r.totals.fills, want.gets - want.hits);
        assert_eq!(r.totals.errors, 0);
        // Intervals of 100000 requests: one here, with everything.
        assert_eq!(r.intervals.len(), 1);
        assert_eq!(r.intervals[0].counts, want);
        assert_eq!(r.meta.server_stats["evictions"], "0");
    }

    #[test]
    fn repeatable_and_memory_bound() {
        let reqs = stream(300_000, 200_000, 8);
        let a = simulate(
            reqs.iter().copied(),
            &small_config(),
            RunMeta::default(),
            None,
        )
        .unwrap();
        let b = simulate(
            reqs.iter().copied(),
            &small_config(),
            RunMeta::default(),
            None,
        )
        .unwrap();
        assert_eq!(a.totals.counts, b.totals.counts);
        assert_eq!(a.intervals, b.intervals);
        assert_eq!(a.meta.server_stats, b.meta.server_stats);
        // 16 MB cannot hold ~100000 objects of ~350 bytes: evictions, fewer
        // hits than with 64 MB.
        assert_ne!(a.meta.server_stats["evictions"], "0");
        let big = simulate(
            reqs.iter().copied(),
            &SimConfig::new(Config::default()),
            RunMeta::default(),
            None,
        )
        .unwrap();
        assert!(a.totals.hit_ratio + 0.05 < big.totals.hit_ratio);
        assert_eq!(a.intervals.len(), 3);
    }

    #[test]
    fn ttls_follow_trace_time() {
        // Key 1 with a 2 s ttl, read again at 1.5 s (hit) and at 3 s (miss:
        // expired), then refilled and read at 3.1 s (hit).
        let reqs = [
            req(0, 1, Op::Get, 10, 2),
            req(1_500_000, 1, Op::Get, 10, 2),
            req(3_000_000, 1, Op::Get, 10, 2),
            req(3_100_000, 1, Op::Get, 10, 2),
        ];
        let cfg = SimConfig::new(Config::default());
        let r = simulate(reqs.iter().copied(), &cfg, RunMeta::default(), None).unwrap();
        assert_eq!(r.totals.counts.gets, 4);
        assert_eq!(r.totals.counts.hits, 2);
        // With --rate the same requests are 1 ms apart: nothing expires.
        let fast = SimConfig {
            rate: Some(1000.0),
            ..SimConfig::new(Config::default())
        };
        let r = simulate(reqs.iter().copied(), &fast, RunMeta::default(), None).unwrap();
        assert_eq!(r.totals.counts.hits, 3);
    }

    #[test]
    fn maintainer_reclaims_expired_items_during_a_gap() {
        // 1000 keys with a 1 s ttl, then a 5 s gap: the background reclaimer
        // frees them (crawler_reclaimed), as the server's maintainer would.
        let mut reqs: Vec<Request> = (0..1000).map(|k| req(k, k, Op::Get, 50, 1)).collect();
        reqs.push(req(5_000_000, 5000, Op::Get, 50, 0));
        let r = simulate(
            reqs.iter().copied(),
            &SimConfig::new(Config::default()),
            RunMeta::default(),
            None,
        )
        .unwrap();
        assert_eq!(r.meta.server_stats["crawler_reclaimed"], "1000");
        assert_eq!(r.meta.server_stats["curr_items"], "1");
    }

    #[test]
    fn too_large_values_are_errors_not_hits() {
        let reqs = [
            req(0, 1, Op::Get, 2 << 20, 0),
            req(1, 1, Op::Get, 2 << 20, 0),
            req(2, 2, Op::Set, 2 << 20, 0),
            // Far beyond what the engine could hold: refused, not allocated.
            req(3, 3, Op::Get, u32::MAX, 0),
        ];
        let r = simulate(
            reqs.iter().copied(),
            &SimConfig::new(Config::default()),
            RunMeta::default(),
            None,
        )
        .unwrap();
        assert_eq!(r.totals.counts.hits, 0);
        assert_eq!(r.totals.errors, 4);
        assert_eq!(r.totals.fills, 3);
    }

    #[test]
    fn backend_delay_lets_the_engine_learn_every_fill() {
        // Clients send no cost; each fill comes `cost` us after its miss, so
        // with --learn-costs every fill's cost is learned, and GD-Wheel's
        // evictions are cost-aware without a cost on the wire.
        let reqs = stream(200_000, 100_000, 5);
        let cfg = |eviction, learn_costs| SimConfig {
            backend_delay: BackendDelay::Cost,
            ..SimConfig::new(Config {
                eviction,
                learn_costs,
                ..small_config().engine
            })
        };
        let learned = simulate(
            reqs.iter().copied(),
            &cfg(EvictionPolicy::GdWheel, true),
            RunMeta::default(),
            None,
        )
        .unwrap();
        assert_eq!(
            learned.meta.server_stats["learned_costs"],
            learned.totals.fills.to_string()
        );
        assert_eq!(learned.meta.settings["backend_delay"], "cost");
        assert_eq!(learned.meta.settings["eviction"], "gdwheel");
        let blind = simulate(
            reqs.iter().copied(),
            &cfg(EvictionPolicy::GdWheel, false),
            RunMeta::default(),
            None,
        )
        .unwrap();
        assert_eq!(blind.meta.server_stats["learned_costs"], "0");
        // Knowing the costs, GD-Wheel loses less recomputation time.
        let lost = |r: &RunResult| r.totals.counts.cost_requested - r.totals.counts.cost_hit;
        assert!(
            lost(&learned) < lost(&blind),
            "{} vs {}",
            lost(&learned),
            lost(&blind)
        );
    }

    #[test]
    fn zone_split_is_sampled_per_interval() {
        // A skewed stream over more keys than 16 MB holds: the N-zone
        // demotes to the Z-zone, which serves some GET hits. (In a smaller
        // cache, classes that appear once memory is full are granted pages
        // beyond `-m`, and the two zones' shares add up to more than 1.)
        let reqs = stream(300_000, 240_000, 4);
        let cfg = SimConfig {
            values: ValueKind::Proto,
            ..SimConfig::new(Config {
                memory_limit: 16 << 20,
                zzone: true,
                ..Config::default()
            })
        };
        let r = simulate(reqs.iter().copied(), &cfg, RunMeta::default(), None).unwrap();
        assert_eq!(r.intervals.len(), 3);
        let st = &r.meta.server_stats;
        let zones: Vec<&ZoneInterval> = r.intervals.iter().flat_map(|i| &i.zzone).collect();
        assert_eq!(zones.len(), 3, "every interval has its sample");
        // The per-interval Z-zone hits add up to the engine's count, and
        // each interval's are among its hits.
        let hits: u64 = zones.iter().map(|z| z.zzone_hits).sum();
        assert_eq!(hits.to_string(), st["zzone_hits"]);
        assert!(hits > 0, "the Z-zone served nothing");
        for i in &r.intervals {
            let z = i.zzone.as_ref().unwrap();
            assert!(z.zzone_hits <= i.counts.hits);
            assert!((0.0..=1.0).contains(&z.nzone_hit_share(i.counts.hits)));
            assert_eq!(z.memory_limit, 16 << 20);
        }
        // The last sample is the engine at the end of the run.
        let last = zones[2];
        assert_eq!(last.target_percent.to_string(), st["zzone_share_percent"]);
        assert_eq!(last.zzone_items.to_string(), st["zzone_items"]);
        let promotions: u64 = zones.iter().map(|z| z.promotions).sum();
        assert_eq!(promotions.to_string(), st["zzone_promotions"]);
        let items: u64 = st["curr_items"].parse().unwrap();
        assert_eq!(last.nzone_items + last.zzone_items, items);
        assert!(last.zzone_memory > 0 && last.nzone_memory > 0);
        assert!(last.zzone_share() + last.nzone_share() <= 1.0);
        // The table shows the split.
        assert!(metrics::format_intervals(&r).contains("Z mem"));
        // Without a Z-zone, no samples (and the document has no field).
        let off = SimConfig::new(Config {
            memory_limit: 16 << 20,
            zzone: false,
            ..Config::default()
        });
        let plain = simulate(reqs.iter().copied(), &off, RunMeta::default(), None).unwrap();
        assert!(plain.intervals.iter().all(|i| i.zzone.is_none()));
        let json = serde_json::to_string(&plain).unwrap();
        assert!(!json.contains("zzone"));
        assert!(!metrics::format_intervals(&plain).contains("Z mem"));
    }

    #[test]
    fn bad_engine_config_is_an_error() {
        let cfg = SimConfig::new(Config {
            growth_factor: 1.0,
            ..Config::default()
        });
        assert!(simulate(std::iter::empty(), &cfg, RunMeta::default(), None).is_err());
    }
}
