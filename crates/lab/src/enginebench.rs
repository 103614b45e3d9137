//! `cachalot-lab engine-bench`: the engine's throughput with N threads, in
//! process, and what its one lock costs (issue 10's "tools to see it").
//!
//! It drives `cachalot_engine::Cache` the way the server does today: each
//! worker thread takes the engine lock per request (a GET looks up and copies
//! the value out under the lock, as `text.rs` `fetch` does; a SET takes it
//! twice, for `fits` and then `store`, as `text.rs` `store` does), and a
//! maintainer thread ticks the clock and calls `Engine::maintain` in the
//! server's slices (up to 8 × 512 chunks every 200 ms, `net.rs`
//! `maintainer_thread`).
//!
//! Keys are Zipf(θ) ranks ([`Zipf`], the lab's rejection-inversion sampler)
//! mapped to ids by a fixed permutation, so hot keys are scattered over the
//! pages a prefill fills in id order, and rendered by [`key_bytes`]. Each
//! worker draws its requests before the clock starts into a ring of `--ring`
//! entries that it then cycles, so the timed loop costs a ring read, a key
//! render into a reused buffer and the engine call; values all come from one
//! shared buffer ([`value_bytes`]).
//!
//! Lock figures are measured around the guard, with no engine change: every
//! acquisition is counted (requests vs maintainer); the maintainer's holds
//! are all timed; requests' holds and waits are timed on every
//! `--time-every`-th request (reading the clock three times per request costs
//! about 30% of the throughput). GETs go through `get`, a function of their
//! own, so `valgrind --tool=callgrind --toggle-collect` can count the cache
//! misses of GETs alone (docs/lab.md, "engine-bench").

use std::ops::ControlFlow;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use anyhow::Context;
use cachalot_engine::engine::Lookup;
use cachalot_engine::{Cache, Clock, Engine, Store};
use hdrhistogram::Histogram;
use serde::Serialize;

use crate::metrics;
use crate::mrc::parse_megabytes;
use crate::sim::{EngineArgs, MAINTAIN_BUDGET, MAINTAIN_PERIOD_US};
use crate::trace::key_bytes;
use crate::values::{value_bytes, ValueKind};
use crate::workload::dist::{Rng, Zipf};
use crate::workload::min_key_len;

/// Ring entries are key ids (below 2^31) with this bit set for a SET.
const SET_BIT: u32 = 1 << 31;

/// A prime above any item count, so `rank * PERMUTE mod items` is a bijection.
const PERMUTE: u128 = (1 << 61) - 1;

#[derive(clap::Args, Debug)]
#[command(
    about = "Drive cachalot's engine in-process with N threads; print ops/s and lock holds",
    long_about = "Runs N worker threads doing a GET/SET mix over Zipf keys against \
                  cachalot_engine::Cache (the server's mutex-guarded engine) with the server's \
                  maintainer thread beside them, and reports total and per-thread ops/s, the \
                  hit ratio, and how the engine lock is taken: acquisitions by requests and by \
                  the maintainer, the maintainer's longest hold, and the requests' hold and wait \
                  percentiles. See docs/lab.md (engine-bench) and docs/benchmarks-history.md \
                  (Engine scaling)."
)]
pub struct EngineBenchArgs {
    #[command(flatten)]
    pub engine: EngineArgs,
    /// Worker threads.
    #[arg(long, default_value_t = 2)]
    pub threads: usize,
    /// Key + value bytes of all items (MB without a suffix); sets the item count.
    #[arg(long, default_value = "32", value_parser = parse_megabytes, conflicts_with = "items")]
    pub dataset: u64,
    /// Number of distinct keys (instead of --dataset).
    #[arg(long)]
    pub items: Option<u64>,
    /// Value size in bytes.
    #[arg(long, default_value_t = 100)]
    pub value_size: usize,
    /// Key length in bytes (raised to what keeps the ids distinct).
    #[arg(long, default_value_t = 16)]
    pub key_len: usize,
    /// Zipf exponent of key popularity (0 = uniform).
    #[arg(long, default_value_t = 0.99)]
    pub zipf: f64,
    /// Share of requests that are GETs; the rest are SETs.
    #[arg(long, default_value_t = 0.9)]
    pub get_ratio: f64,
    /// Timed run length in seconds.
    #[arg(long, default_value_t = 5.0)]
    pub duration: f64,
    /// Run exactly this many requests (over all threads) instead of --duration.
    #[arg(long)]
    pub ops: Option<u64>,
    /// Set every key once before timing (split over the worker threads).
    #[arg(long)]
    pub warm: bool,
    /// With --warm: set the keys in popularity order (the most popular
    /// first), so the hot items share pages: what perfect hot/cold
    /// placement across pages could give (an experiment, not a policy).
    #[arg(long, requires = "warm")]
    pub hot_first: bool,
    /// Run the same requests this many seconds before timing, untimed, so
    /// that background work that converges (re-partitioning) has done so.
    #[arg(long, default_value_t = 0.0)]
    pub settle: f64,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Requests each worker draws in advance and cycles through.
    #[arg(long, default_value_t = 1 << 21)]
    pub ring: usize,
    /// GETs go to the engine as multi-gets of this many keys (one lock each;
    /// SETs drawn in between are done on their own).
    #[arg(long, default_value_t = 1)]
    pub batch: usize,
    /// With --batch: look the keys up with prefetching (`lookup_batch`, as
    /// the server's multi-get does) or one after another (false).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub prefetch: bool,
    /// GETs take the engine lock, as before issue 10 (`Engine::get` under
    /// `Cache::lock`), instead of only their key's stripe (`Cache::get`):
    /// the same build's old path, for comparison.
    #[arg(long)]
    pub locked_gets: bool,
    /// Time the lock of every Nth request (0 = none, 1 = all); counts are exact.
    #[arg(long, default_value_t = 16)]
    pub time_every: u64,
    /// Write the report as JSON here.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

/// Pages re-partitioned, chunks scanned and items swapped in a run.
#[derive(Clone, Debug, Serialize)]
pub struct RepartitionReport {
    pub pages: u64,
    pub scanned: u64,
    pub swaps: u64,
}

/// What one run measured.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub threads: usize,
    pub items: u64,
    pub key_len: usize,
    pub value_size: usize,
    pub memory_mb: u64,
    pub zipf: f64,
    pub get_ratio: f64,
    pub prefill_s: f64,
    pub elapsed_s: f64,
    pub ops: u64,
    pub gets: u64,
    pub hits: u64,
    pub sets: u64,
    pub ops_per_s: f64,
    pub per_thread_ops_per_s: Vec<f64>,
    pub hit_ratio: f64,
    /// Items in the cache at the end, from the engine's own stats.
    pub curr_items: u64,
    /// `--hugepages`, and the process's memory on transparent huge pages
    /// at the end (`AnonHugePages` of /proc/self/smaps_rollup; None where
    /// the kernel does not say).
    pub hugepages: bool,
    pub anon_huge_mb: Option<u64>,
    /// `--batch` and `--prefetch`.
    pub batch: usize,
    pub prefetch: bool,
    pub locked_gets: bool,
    /// `--in-place-sets` (SETs may rewrite their item under its stripe).
    pub in_place_sets: bool,
    /// Cache lines a GET touches in the data, averaged over
    /// [`FOOTPRINT_SAMPLE`] keys drawn as the GETs draw them, after the
    /// prefill (`Cache::footprint`): index lines, then item lines.
    pub lines_per_get: (f64, f64),
    /// Re-partitioning during the timed run (`-o repartition=1`).
    pub repartition: Option<RepartitionReport>,
    pub lock: LockReport,
}

/// GETs sampled for `Report::lines_per_get`.
pub const FOOTPRINT_SAMPLE: usize = 10_000;

/// How the engine lock was taken during the timed run.
#[derive(Clone, Debug, Default, Serialize)]
pub struct LockReport {
    /// Engine lock acquisitions by requests: SETs, and GETs with
    /// --locked-gets (a GET otherwise takes only its stripe's lock).
    pub request_acquisitions: u64,
    /// GETs (single or multi) timed without the engine lock, and how long
    /// each call took (stripe lock, lookup, copy).
    pub stripe_gets_timed: u64,
    pub stripe_get_p50_ns: u64,
    pub stripe_get_p99_ns: u64,
    /// SETs done under their stripe only (`Cache::try_store`: in place,
    /// or a new key in a reserved chunk), and each attempt's time (the
    /// failed ones then took the engine lock).
    pub unlocked_sets: u64,
    pub stripe_set_p50_ns: u64,
    pub stripe_set_p99_ns: u64,
    /// Acquisitions by the maintainer thread (one per maintain slice).
    pub maintainer_acquisitions: u64,
    pub maintainer_hold_max_ns: u64,
    pub maintainer_hold_total_ns: u64,
    /// Request acquisitions timed (every --time-every-th request).
    pub request_timed: u64,
    pub request_hold_p50_ns: u64,
    pub request_hold_p99_ns: u64,
    pub request_hold_max_ns: u64,
    /// Time from asking for the lock to getting it.
    pub request_wait_p99_ns: u64,
    pub request_wait_max_ns: u64,
}

/// Everything the threads share, fixed before they start.
struct Plan {
    items: u64,
    key_len: usize,
    zipf: f64,
    get_ratio: f64,
    seed: u64,
    ring: usize,
    time_every: u64,
    batch: usize,
    prefetch: bool,
    locked_gets: bool,
    value: Vec<u8>,
}

/// How one thread took the engine lock: every acquisition counted, holds
/// and waits recorded while `timed` is set.
struct LockUse {
    acquisitions: u64,
    timed: bool,
    hold: Histogram<u64>,
    wait: Histogram<u64>,
    /// Lock-free GET calls (`Cache::get`), timed.
    stripe_get: Histogram<u64>,
    /// SET attempts without the engine lock (`Cache::try_store`), timed,
    /// and how many succeeded (the others took the engine lock).
    stripe_set: Histogram<u64>,
    unlocked_sets: u64,
}

impl LockUse {
    fn new() -> LockUse {
        LockUse {
            acquisitions: 0,
            timed: false,
            hold: metrics::histogram(3),
            wait: metrics::histogram(3),
            stripe_get: metrics::histogram(3),
            stripe_set: metrics::histogram(3),
            unlocked_sets: 0,
        }
    }
}

/// Take the engine lock for `f`, counted, and timed if asked.
#[inline(always)]
fn locked<R>(cache: &Cache, lu: &mut LockUse, f: impl FnOnce(&mut Engine) -> R) -> R {
    lu.acquisitions += 1;
    if !lu.timed {
        return f(&mut cache.lock());
    }
    let t0 = Instant::now();
    let mut engine = cache.lock();
    let t1 = Instant::now();
    let r = f(&mut engine);
    let t2 = Instant::now();
    drop(engine);
    lu.wait.saturating_record((t1 - t0).as_nanos() as u64);
    lu.hold.saturating_record((t2 - t1).as_nanos() as u64);
    r
}

/// `f` outside the engine lock, timed into `hist` if `timed`.
#[inline(always)]
fn unlocked<R>(timed: bool, hist: &mut Histogram<u64>, f: impl FnOnce() -> R) -> R {
    if !timed {
        return f();
    }
    let t0 = Instant::now();
    let r = f();
    hist.saturating_record(t0.elapsed().as_nanos() as u64);
    r
}

/// One GET as the server does it: look up and copy the value out, under
/// the key's stripe lock (`Cache::get`), or under the engine lock with
/// `--locked-gets`. Not inlined, so callgrind's `--toggle-collect` can
/// count its misses.
#[inline(never)]
fn get(cache: &Cache, key: &[u8], locked_gets: bool, out: &mut Vec<u8>, lu: &mut LockUse) -> bool {
    out.clear();
    let mut copy = |item: Option<cachalot_engine::ItemRef<'_>>| match item {
        Some(item) => {
            item.value.copy_to(out);
            true
        }
        None => false,
    };
    if locked_gets {
        locked(cache, lu, |e| copy(e.get(key)))
    } else {
        unlocked(lu.timed, &mut lu.stripe_get, || {
            cache.get(key, Lookup::GET, copy)
        })
    }
}

/// A multi-get as the server does it (`Cache::get_batch`), or with
/// `--locked-gets` under one engine lock, the keys looked up with
/// prefetching (`lookup_batch`) or one by one; each value copied out.
#[inline(never)]
fn mget(cache: &Cache, batch: &[Vec<u8>], plan: &Plan, out: &mut Vec<u8>, lu: &mut LockUse) -> u64 {
    let keys: Vec<&[u8]> = batch.iter().map(Vec::as_slice).collect();
    let keys = keys.as_slice();
    out.clear();
    let mut hits = 0;
    if !plan.locked_gets {
        unlocked(lu.timed, &mut lu.stripe_get, || {
            cache.get_batch(keys, Lookup::GET, |_, _, _, item| {
                if let Some(item) = item {
                    item.value.copy_to(out);
                    hits += 1;
                }
                ControlFlow::Continue(())
            })
        });
        return hits;
    }
    locked(cache, lu, |e| {
        if plan.prefetch {
            e.lookup_batch(keys, Lookup::GET, |_, _, _, item| {
                if let Some(item) = item {
                    item.value.copy_to(out);
                    hits += 1;
                }
                ControlFlow::Continue(())
            });
        } else {
            for key in keys {
                if let Some(item) = e.get(key) {
                    item.value.copy_to(out);
                    hits += 1;
                }
            }
        }
    });
    hits
}

/// One SET as the server's text protocol does it (`Cache::store`): `fits`
/// (no lock), the in-place rewrite under the key's stripe if it can be,
/// else `store` under the engine lock.
#[inline(never)]
fn set(cache: &Cache, key: &[u8], value: &[u8], lu: &mut LockUse) {
    if cache.fits(key.len(), value.len(), 0) {
        let req = Store::set(key, value);
        match unlocked(lu.timed, &mut lu.stripe_set, || cache.try_store(&req)) {
            Ok(_) => lu.unlocked_sets += 1,
            Err(fallback) => {
                locked(cache, lu, |e| cache.finish_store(e, &req, fallback));
            }
        }
    }
}

/// Key id of Zipf rank `rank` (1-based): a fixed scatter of the ranks.
fn key_id(rank: u64, items: u64) -> u32 {
    ((rank - 1) as u128 * PERMUTE % items as u128) as u32
}

/// A worker's requests, drawn before the clock starts.
fn draw_ring(plan: &Plan, thread: usize, len: usize) -> Vec<u32> {
    let zipf = Zipf::new(plan.items, plan.zipf);
    let mut rng = Rng::new(plan.seed, 0xe5b0 + thread as u64);
    (0..len)
        .map(|_| {
            let id = key_id(zipf.sample(&mut rng), plan.items);
            if rng.f64() < plan.get_ratio {
                id
            } else {
                id | SET_BIT
            }
        })
        .collect()
}

/// Mean index and item lines of [`FOOTPRINT_SAMPLE`] GETs drawn as a
/// worker draws them (a stream of its own).
fn footprint(cache: &Cache, plan: &Plan) -> (f64, f64) {
    let mut key = Vec::with_capacity(plan.key_len);
    let (mut index, mut item) = (0usize, 0usize);
    for e in draw_ring(plan, 1 << 32, FOOTPRINT_SAMPLE) {
        key_bytes(u64::from(e & !SET_BIT), plan.key_len, &mut key);
        let f = cache.footprint(&key);
        index += f.index;
        item += f.item;
    }
    let n = FOOTPRINT_SAMPLE as f64;
    (index as f64 / n, item as f64 / n)
}

/// What one worker did.
struct WorkerResult {
    ops: u64,
    gets: u64,
    hits: u64,
    sets: u64,
    elapsed: Duration,
    lock: LockUse,
}

fn worker(
    cache: &Cache,
    plan: &Plan,
    thread: usize,
    quota: Option<u64>,
    start: &Barrier,
    stop: &AtomicBool,
) -> WorkerResult {
    let len = quota.map_or(plan.ring, |q| (q as usize).clamp(1, plan.ring));
    let ring = draw_ring(plan, thread, len);
    let mut key = Vec::with_capacity(plan.key_len);
    let mut out = Vec::with_capacity(plan.value.len());
    let mut lock = LockUse::new();
    let (mut gets, mut hits, mut sets) = (0u64, 0u64, 0u64);
    // Keys of the multi-get being gathered (--batch).
    let mut batch = vec![Vec::with_capacity(plan.key_len); plan.batch];
    let (mut nbatch, mut mgets) = (0, 0u64);
    start.wait();
    let began = Instant::now();
    let mut i = 0u64;
    let mut at = 0usize;
    loop {
        if quota.is_some_and(|q| i >= q) || (i.is_multiple_of(1024) && stop.load(Ordering::Relaxed))
        {
            break;
        }
        let e = ring[at];
        at = if at + 1 == ring.len() { 0 } else { at + 1 };
        key_bytes(u64::from(e & !SET_BIT), plan.key_len, &mut key);
        lock.timed = plan.time_every != 0 && i.is_multiple_of(plan.time_every);
        if plan.batch > 1 && e & SET_BIT == 0 {
            std::mem::swap(&mut key, &mut batch[nbatch]);
            nbatch += 1;
            if nbatch == plan.batch {
                // Every --time-every-th multi-get is timed.
                lock.timed = plan.time_every != 0 && mgets.is_multiple_of(plan.time_every);
                mgets += 1;
                hits += mget(cache, &batch, plan, &mut out, &mut lock);
                gets += nbatch as u64;
                nbatch = 0;
            }
        } else if e & SET_BIT != 0 {
            set(cache, &key, &plan.value, &mut lock);
            sets += 1;
        } else {
            hits += u64::from(get(cache, &key, plan.locked_gets, &mut out, &mut lock));
            gets += 1;
        }
        i += 1;
    }
    // The last, partial multi-get (every drawn request is served).
    if nbatch > 0 {
        hits += mget(cache, &batch[..nbatch], plan, &mut out, &mut lock);
        gets += nbatch as u64;
    }
    WorkerResult {
        ops: i,
        gets,
        hits,
        sets,
        elapsed: began.elapsed(),
        lock,
    }
}

/// The server's maintainer (net.rs `maintainer_thread`), with its holds timed.
/// Returns (acquisitions, longest hold, total hold).
fn maintainer(cache: &Cache, stop: &AtomicBool) -> (u64, Duration, Duration) {
    let (mut n, mut max, mut total) = (0u64, Duration::ZERO, Duration::ZERO);
    while !stop.load(Ordering::Relaxed) {
        cache.clock().tick();
        let slices = cache.lock().maintain_slices();
        for _ in 0..slices {
            let mut engine = cache.lock();
            let t = Instant::now();
            let visited = engine.maintain(MAINTAIN_BUDGET);
            let held = t.elapsed();
            drop(engine);
            n += 1;
            max = max.max(held);
            total += held;
            if visited < MAINTAIN_BUDGET || stop.load(Ordering::Relaxed) {
                break;
            }
            std::thread::yield_now();
        }
        // The server's Z-zone writer has a thread of its own.
        cache.flush_zone(4096);
        cache.train_zone();
        std::thread::park_timeout(Duration::from_micros(MAINTAIN_PERIOD_US));
    }
    (n, max, total)
}

/// Set every key once, the ids (or with `hot_first` the popularity ranks)
/// split over `threads` threads.
fn prefill(cache: &Cache, plan: &Plan, threads: usize, hot_first: bool) {
    std::thread::scope(|s| {
        for t in 0..threads {
            s.spawn(move || {
                let mut key = Vec::with_capacity(plan.key_len);
                let mut lock = LockUse::new();
                for i in (t as u64..plan.items).step_by(threads) {
                    let id = match hot_first {
                        true => u64::from(key_id(i + 1, plan.items)),
                        false => i,
                    };
                    key_bytes(id, plan.key_len, &mut key);
                    set(cache, &key, &plan.value, &mut lock);
                }
            });
        }
    });
}

/// Run the benchmark these arguments describe.
pub fn bench(a: &EngineBenchArgs) -> anyhow::Result<Report> {
    anyhow::ensure!(a.threads >= 1, "--threads must be at least 1");
    anyhow::ensure!(
        (0.0..=1.0).contains(&a.get_ratio),
        "--get-ratio must be in [0, 1]"
    );
    anyhow::ensure!(a.zipf >= 0.0 && a.zipf.is_finite(), "--zipf must be >= 0");
    anyhow::ensure!(a.ring >= 1, "--ring must be at least 1");
    anyhow::ensure!((1..=1024).contains(&a.batch), "--batch must be in 1..=1024");
    let items = a
        .items
        .unwrap_or(a.dataset / (a.key_len + a.value_size).max(1) as u64);
    anyhow::ensure!(
        (1..u64::from(SET_BIT)).contains(&items),
        "the item count must be in 1..2^31 (got {items})"
    );
    let key_len = a
        .key_len
        .clamp(min_key_len(items) as usize, cachalot_engine::KEY_MAX_LEN);
    let mut value = Vec::new();
    value_bytes(ValueKind::Random, 0, a.value_size, &mut value);
    let plan = Plan {
        items,
        key_len,
        zipf: a.zipf,
        get_ratio: a.get_ratio,
        seed: a.seed,
        ring: a.ring,
        time_every: a.time_every,
        batch: a.batch,
        prefetch: a.prefetch,
        locked_gets: a.locked_gets,
        value,
    };
    let cache =
        Cache::new(a.engine.config()?, Arc::new(Clock::new())).context("engine configuration")?;

    let t = Instant::now();
    if a.warm {
        prefill(&cache, &plan, a.threads, a.hot_first);
    }
    let prefill_s = t.elapsed().as_secs_f64();
    let lines_per_get = footprint(&cache, &plan);

    if a.settle > 0.0 {
        run_workers(&cache, &plan, a.threads, Some(a.settle), |_| None);
    }
    let repartition_before = cache.lock().stats().repartition.unwrap_or_default();
    let (results, maint) = run_workers(
        &cache,
        &plan,
        a.threads,
        a.ops.is_none().then_some(a.duration),
        |t| {
            a.ops.map(|n| {
                let k = a.threads as u64;
                n / k + u64::from((t as u64) < n % k)
            })
        },
    );
    let repartition = cache.lock().stats().repartition.map(|r| RepartitionReport {
        pages: r.pages - repartition_before.pages,
        scanned: r.scanned - repartition_before.scanned,
        swaps: r.swaps - repartition_before.swaps,
    });

    let mut lock = LockUse::new();
    for r in &results {
        lock.acquisitions += r.lock.acquisitions;
        // Same bounds on both sides, so adding cannot fail.
        let _ = lock.hold.add(&r.lock.hold);
        let _ = lock.wait.add(&r.lock.wait);
        let _ = lock.stripe_get.add(&r.lock.stripe_get);
        let _ = lock.stripe_set.add(&r.lock.stripe_set);
        lock.unlocked_sets += r.lock.unlocked_sets;
    }
    let sum = |f: fn(&WorkerResult) -> u64| results.iter().map(f).sum::<u64>();
    let (ops, gets, hits, sets) = (
        sum(|r| r.ops),
        sum(|r| r.gets),
        sum(|r| r.hits),
        sum(|r| r.sets),
    );
    let elapsed_s = results
        .iter()
        .map(|r| r.elapsed.as_secs_f64())
        .fold(0.0, f64::max);
    let curr_items = cache.lock().stats().curr_items;
    Ok(Report {
        threads: a.threads,
        items,
        key_len,
        value_size: a.value_size,
        memory_mb: a.engine.slab.memory >> 20,
        zipf: a.zipf,
        get_ratio: a.get_ratio,
        prefill_s,
        elapsed_s,
        ops,
        gets,
        hits,
        sets,
        ops_per_s: ops as f64 / elapsed_s.max(1e-9),
        per_thread_ops_per_s: results
            .iter()
            .map(|r| r.ops as f64 / r.elapsed.as_secs_f64().max(1e-9))
            .collect(),
        hit_ratio: if gets == 0 {
            0.0
        } else {
            hits as f64 / gets as f64
        },
        curr_items,
        hugepages: a.engine.hugepages,
        batch: a.batch,
        prefetch: a.prefetch,
        locked_gets: a.locked_gets,
        in_place_sets: a.engine.in_place_sets,
        lines_per_get,
        repartition,
        anon_huge_mb: anon_huge_kb().map(|kb| kb >> 10),
        lock: LockReport {
            request_acquisitions: lock.acquisitions,
            stripe_gets_timed: lock.stripe_get.len(),
            stripe_get_p50_ns: lock.stripe_get.value_at_quantile(0.5),
            stripe_get_p99_ns: lock.stripe_get.value_at_quantile(0.99),
            unlocked_sets: lock.unlocked_sets,
            stripe_set_p50_ns: lock.stripe_set.value_at_quantile(0.5),
            stripe_set_p99_ns: lock.stripe_set.value_at_quantile(0.99),
            maintainer_acquisitions: maint.0,
            maintainer_hold_max_ns: maint.1.as_nanos() as u64,
            maintainer_hold_total_ns: maint.2.as_nanos() as u64,
            request_timed: lock.hold.len(),
            request_hold_p50_ns: lock.hold.value_at_quantile(0.5),
            request_hold_p99_ns: lock.hold.value_at_quantile(0.99),
            request_hold_max_ns: lock.hold.max(),
            request_wait_p99_ns: lock.wait.value_at_quantile(0.99),
            request_wait_max_ns: lock.wait.max(),
        },
    })
}

/// Run `threads` workers with the maintainer beside them, for `duration`
/// seconds or until each has done its `quota`.
fn run_workers(
    cache: &Cache,
    plan: &Plan,
    threads: usize,
    duration: Option<f64>,
    quota: impl Fn(usize) -> Option<u64>,
) -> (Vec<WorkerResult>, (u64, Duration, Duration)) {
    let stop = AtomicBool::new(false);
    let start = Barrier::new(threads + 1);
    std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                let (start, stop, quota) = (&start, &stop, quota(t));
                s.spawn(move || worker(cache, plan, t, quota, start, stop))
            })
            .collect();
        let maint = s.spawn(|| maintainer(cache, &stop));
        start.wait();
        if let Some(d) = duration {
            std::thread::sleep(Duration::from_secs_f64(d.max(0.0)));
            stop.store(true, Ordering::Relaxed);
        }
        let results: Vec<WorkerResult> = workers
            .into_iter()
            .map(|w| w.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect();
        stop.store(true, Ordering::Relaxed);
        maint.thread().unpark();
        let maint = maint
            .join()
            .unwrap_or_else(|p| std::panic::resume_unwind(p));
        (results, maint)
    })
}

/// `AnonHugePages` of this process, in KB.
fn anon_huge_kb() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/smaps_rollup").ok()?;
    let line = s.lines().find(|l| l.starts_with("AnonHugePages:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// Human-readable summary of a report.
pub fn format_report(r: &Report) -> String {
    let per_thread: Vec<String> = r
        .per_thread_ops_per_s
        .iter()
        .map(|x| format!("{x:.0}"))
        .collect();
    let l = &r.lock;
    let rows = vec![
        vec!["figure".to_string(), "value".to_string()],
        vec![
            "items × (key+value)".into(),
            format!("{} × ({}+{}) B", r.items, r.key_len, r.value_size),
        ],
        vec!["memory".into(), format!("{} MB", r.memory_mb)],
        vec!["prefill".into(), format!("{:.2} s", r.prefill_s)],
        vec![
            "ops".into(),
            format!(
                "{} in {:.2} s ({} gets, {} sets)",
                r.ops, r.elapsed_s, r.gets, r.sets
            ),
        ],
        vec!["ops/s".into(), format!("{:.0}", r.ops_per_s)],
        vec!["ops/s per thread".into(), per_thread.join(" ")],
        vec!["hit ratio".into(), format!("{:.4}", r.hit_ratio)],
        vec![
            "lines per GET: index + item".into(),
            format!(
                "{:.3} + {:.3} = {:.3}",
                r.lines_per_get.0,
                r.lines_per_get.1,
                r.lines_per_get.0 + r.lines_per_get.1
            ),
        ],
        vec!["items cached".into(), r.curr_items.to_string()],
        vec![
            "re-partitioning: pages / chunks read / swaps".into(),
            r.repartition.as_ref().map_or("off".into(), |p| {
                format!("{} / {} / {}", p.pages, p.scanned, p.swaps)
            }),
        ],
        vec![
            "multi-get batch / prefetch".into(),
            format!("{} / {}", r.batch, r.prefetch),
        ],
        vec![
            "hugepages / on huge pages".into(),
            format!(
                "{} / {}",
                r.hugepages,
                r.anon_huge_mb.map_or("-".into(), |m| format!("{m} MB"))
            ),
        ],
        vec![
            "GETs under the engine lock".into(),
            if r.locked_gets {
                "yes (--locked-gets)"
            } else {
                "no (stripe lock only)"
            }
            .into(),
        ],
        vec![
            "lock: by requests / maintainer".into(),
            format!("{} / {}", l.request_acquisitions, l.maintainer_acquisitions),
        ],
        vec![
            "GET without engine lock p50 / p99".into(),
            format!(
                "{} / {} ns ({} timed)",
                l.stripe_get_p50_ns, l.stripe_get_p99_ns, l.stripe_gets_timed
            ),
        ],
        vec![
            "SETs without the engine lock, attempt p50 / p99".into(),
            format!(
                "{} of {}, {} / {} ns",
                l.unlocked_sets, r.sets, l.stripe_set_p50_ns, l.stripe_set_p99_ns
            ),
        ],
        vec![
            "lock: maintainer hold max / total".into(),
            format!(
                "{:.1} us / {:.1} ms",
                l.maintainer_hold_max_ns as f64 / 1e3,
                l.maintainer_hold_total_ns as f64 / 1e6
            ),
        ],
        vec![
            "lock: request hold p50 / p99 / max".into(),
            format!(
                "{} / {} / {} ns ({} timed)",
                l.request_hold_p50_ns,
                l.request_hold_p99_ns,
                l.request_hold_max_ns,
                l.request_timed
            ),
        ],
        vec![
            "lock: request wait p99 / max".into(),
            format!("{} / {} ns", l.request_wait_p99_ns, l.request_wait_max_ns),
        ],
    ];
    metrics::render(&rows)
}

pub fn run(a: EngineBenchArgs) -> anyhow::Result<()> {
    let r = bench(&a)?;
    print!("{}", format_report(&r));
    if let Some(p) = &a.json {
        metrics::write_json(p, &r)?;
    }
    Ok(())
}
