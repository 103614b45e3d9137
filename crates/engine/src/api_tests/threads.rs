//! The engine under threads (issue 10): GETs on the lock-free path of
//! `Cache::get` race stores (in place under their stripe, `Cache::store`,
//! or through the engine), deletes, arithmetic, touches, flushes, page
//! moves and the maintainer. Every value names its key and length and is
//! filled with a byte derived from both, so a GET that read a chunk being
//! reused, moved or half written would return a value that does not check
//! out. At the end the engine's invariants must hold (`validate`).

use std::ops::ControlFlow;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use crate::engine::{Arith, ArithOutcome, Lookup, ReassignOutcome, Store, StoreMode};
use crate::{Cache, Clock, Config, EvictionPolicy, Expiry, RebalancePolicy};

const KEYS: u64 = 20_000;

fn key(k: u64) -> Vec<u8> {
    format!("key:{k}").into_bytes()
}

/// `<key>|<len>|` then the fill byte up to `len` bytes.
fn value(k: u64, len: usize) -> Vec<u8> {
    let mut v = format!("key:{k}|{len}|").into_bytes();
    let fill = (k as u8).wrapping_mul(31).wrapping_add(len as u8) | 1;
    v.resize(len.max(v.len()), fill);
    v
}

/// Whether `v` is a value `value(k, _)` could have made (or a counter).
fn check(k: u64, v: &[u8]) -> bool {
    if v.iter().all(|b| b.is_ascii_digit() || *b == b' ') {
        return true;
    }
    let head = format!("key:{k}|");
    let Some(rest) = v.strip_prefix(head.as_bytes()) else {
        return false;
    };
    let Some(bar) = rest.iter().position(|&b| b == b'|') else {
        return false;
    };
    let Ok(len) = std::str::from_utf8(&rest[..bar])
        .unwrap_or("x")
        .parse::<usize>()
    else {
        return false;
    };
    v == value(k, len).as_slice()
}

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// The server's maintainer, without pause: `maintain(budget)` slices, the
/// clock a second further every `per_second` of them (time moves, so
/// expiries and delayed flushes come due). Stops when dropped.
struct Maintainer {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Maintainer {
    fn start(cache: &Arc<Cache>, clock: &Arc<Clock>, budget: usize, per_second: u32) -> Maintainer {
        let stop = Arc::new(AtomicBool::new(false));
        let (cache, clock, flag) = (cache.clone(), clock.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            let mut ticks = 0u32;
            while !flag.load(Ordering::Relaxed) {
                cache.lock().maintain(budget);
                // The Z-zone's writer, which also runs without the engine
                // lock.
                cache.flush_zone(8);
                ticks += 1;
                if ticks.is_multiple_of(per_second) {
                    clock.advance(std::time::Duration::from_secs(1));
                }
                std::thread::yield_now();
            }
        });
        Maintainer {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for Maintainer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            // A maintainer that panicked fails the test (unless it is
            // already failing).
            if t.join().is_err() && !std::thread::panicking() {
                panic!("maintainer panicked");
            }
        }
    }
}

fn run(eviction: EvictionPolicy, rebalance: RebalancePolicy, stripes: usize, repartition: bool) {
    run_with(eviction, rebalance, stripes, repartition, false);
}

fn run_with(
    eviction: EvictionPolicy,
    rebalance: RebalancePolicy,
    stripes: usize,
    repartition: bool,
    zzone: bool,
) {
    let config = Config {
        zzone,
        // Some 30 classes are in use, each granted its floor of pages even
        // beyond `-m` (as memcached grants first pages): the rest is the
        // two zones' to share, and little enough that items are demoted.
        memory_limit: 24 << 20,
        eviction,
        rebalance,
        lock_stripes: stripes,
        in_place_sets: true,
        repartition,
        // A sample table this small makes the MRC profile sample few keys
        // (it samples all of them while they fit): the others take the
        // lock-free paths.
        rebalance_tuning: crate::rebalance::Tuning {
            mrc_bytes: 16 << 10,
            ..Default::default()
        },
        ..Config::default()
    };
    let clock = Arc::new(Clock::new());
    let cache = Arc::new(Cache::new(config, clock.clone()).unwrap());
    let bad = Arc::new(AtomicU64::new(0));
    let hits = Arc::new(AtomicU64::new(0));
    let in_place = Arc::new(AtomicU64::new(0));
    let maintainer = Maintainer::start(&cache, &clock, 64, 64);
    let workers: Vec<_> = (0..4u64)
        .map(|t| {
            let (cache, bad, hits) = (cache.clone(), bad.clone(), hits.clone());
            let in_place = in_place.clone();
            let clock = clock.clone();
            std::thread::spawn(move || {
                let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ ((t + 1) * 0x1234_5678));
                for i in 0..3_000_000u32 {
                    // With re-partitioning, go on until items have traded
                    // chunks (the maintainer may get little CPU).
                    // With a Z-zone, until GETs have read it.
                    if i >= 60_000
                        && (!repartition && !zzone
                            || i.is_multiple_of(1000) && {
                                let st = cache.lock().stats();
                                st.repartition.is_none_or(|r| r.swaps > 100)
                                    && st.zzone.is_none_or(|z| z.zone.hits > 100)
                            })
                    {
                        break;
                    }
                    // Skewed keys, so threads meet on the same items.
                    let r = rng.next();
                    let k = (r % KEYS) * (r >> 60) / 16;
                    let op = rng.next() % 100;
                    let kb = key(k);
                    match op {
                        0..=69 => {
                            cache.get(&kb, Lookup::GET, |item| {
                                if let Some(item) = item {
                                    hits.fetch_add(1, Ordering::Relaxed);
                                    if item.key != kb.as_slice() || !check(k, &item.value.to_vec())
                                    {
                                        bad.fetch_add(1, Ordering::Relaxed);
                                    }
                                }
                            });
                        }
                        70..=74 => {
                            // A multi-get of neighbours.
                            let keys: Vec<Vec<u8>> = (k..k + 5).map(key).collect();
                            let refs: Vec<&[u8]> = keys.iter().map(|k| k.as_slice()).collect();
                            cache.get_batch(&refs, Lookup::GET, |j, kb, _, item| {
                                if let Some(item) = item {
                                    if item.key != kb || !check(k + j as u64, &item.value.to_vec())
                                    {
                                        bad.fetch_add(1, Ordering::Relaxed);
                                    }
                                }
                                ControlFlow::Continue(())
                            });
                        }
                        75..=91 => {
                            // Sizes over many classes, some chained; a third
                            // near one size, which SETs rewrite in place.
                            // With a Z-zone, items over half a block (and
                            // chained ones) are stored apart from their
                            // blocks, so GETs read records as they change.
                            let len = match rng.next() % 64 {
                                0 => 300_000 + (rng.next() % 300_000) as usize,
                                1..=15 => 1000 + (rng.next() % 20_000) as usize,
                                16..=36 => 100 + (rng.next() % 4) as usize,
                                _ => 20 + (rng.next() % 400) as usize,
                            };
                            let mut s = Store::set(&kb, &[]);
                            let v = value(k, len);
                            s.value = &v;
                            if rng.next().is_multiple_of(8) {
                                s.expiry = Expiry::At(clock.now() + 2);
                            }
                            match cache.try_store(&s) {
                                Ok(_) => {
                                    in_place.fetch_add(1, Ordering::Relaxed);
                                }
                                Err(f) => {
                                    cache.finish_store(&mut cache.lock(), &s, f);
                                }
                            }
                        }
                        92..=95 => {
                            cache.lock().delete(&kb, 0);
                        }
                        96 => {
                            let ck = key(KEYS + k % 16);
                            let mut e = cache.lock();
                            e.arith(
                                &ck,
                                &Arith {
                                    incr: true,
                                    delta: 1,
                                    cas: 0,
                                    autovivify: Some((0, Expiry::Never)),
                                    new_expiry: None,
                                },
                            );
                        }
                        97 => {
                            cache.lock().touch(&kb, Expiry::At(clock.now() + 3));
                        }
                        98 => {
                            // Rarely with re-partitioning or a Z-zone: a
                            // cache flushed every few milliseconds of a
                            // loaded machine leaves pages too empty for
                            // items to trade, and little to read.
                            let every = if repartition || zzone { 10_007 } else { 101 };
                            if i.is_multiple_of(every) {
                                let at = clock.now() + 1;
                                cache.lock().flush_all(Some(at));
                            }
                        }
                        _ => {
                            cache.lock().lookup(&kb, Lookup::PEEK);
                        }
                    }
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    drop(maintainer);
    assert_eq!(
        bad.load(Ordering::Relaxed),
        0,
        "{eviction:?}: wrong bytes read"
    );
    assert!(
        hits.load(Ordering::Relaxed) > 1000,
        "{eviction:?}: GETs hit"
    );
    // Only CLOCK without learned costs rewrites in place.
    assert_eq!(
        in_place.load(Ordering::Relaxed) > 100,
        eviction == EvictionPolicy::Lru,
        "{eviction:?}: SETs in place: {}",
        in_place.load(Ordering::Relaxed)
    );
    let mut e = cache.lock();
    e.validate();
    let s = e.stats();
    // Memory was short: the N-zone's victims were evicted, or demoted
    // (the values compress so well that the zone, holding them, need not
    // evict), some of them stored apart from their blocks.
    let demoted = s.zzone.map_or(0, |z| z.zone.demotions);
    assert!(
        s.evictions > 0 || demoted > 0,
        "{eviction:?}: memory was short: {s:?}"
    );
    assert_eq!(
        s.zzone.is_some_and(|z| z.zone.large_written > 0),
        zzone,
        "{:?}",
        s.zzone
    );
    // A few dozen classes share 22 pages, yet no store is refused: a class
    // with no page gets one even beyond `-m`, as in memcached.
    assert_eq!(s.outofmemory, 0, "{eviction:?}: {s:?}");
    // GETs read the Z-zone while it changed.
    assert_eq!(
        s.zzone.is_some_and(|z| z.zone.hits > 100),
        zzone,
        "{:?}",
        s.zzone
    );
    // Items traded chunks under the readers' feet.
    assert_eq!(
        s.repartition.is_some_and(|r| r.swaps > 100),
        repartition,
        "{:?}",
        s.repartition
    );
}

#[test]
fn gets_race_everything_else_under_clock() {
    run(EvictionPolicy::Lru, RebalancePolicy::Mrc, 16, false);
}

#[test]
fn gets_race_items_trading_chunks() {
    // Cavast's re-partitioning swaps items within pages meanwhile.
    run(EvictionPolicy::Lru, RebalancePolicy::Memcached, 16, true);
}

#[test]
fn gets_race_everything_else_with_a_zzone() {
    // GETs that miss the N-zone decode Z-zone blocks without the engine
    // lock while demotions, sweeps and promotions rewrite them.
    run_with(EvictionPolicy::Lru, RebalancePolicy::Mrc, 16, false, true);
}

#[test]
fn gets_race_everything_else_under_clock_without_a_profile() {
    run(EvictionPolicy::Lru, RebalancePolicy::Memcached, 256, false);
}

#[test]
fn gets_race_everything_else_under_lazy_gdwheel() {
    run(
        EvictionPolicy::GdWheelLazy,
        RebalancePolicy::CostPerByte,
        4,
        false,
    );
}

#[test]
fn gets_race_everything_else_under_sieve() {
    // Lock-free GETs set REF while SIEVE's hand clears it.
    run(EvictionPolicy::Sieve, RebalancePolicy::Mrc, 16, false);
}

#[test]
fn gets_race_everything_else_with_locked_hits() {
    // Eager GD-Wheel and SAS: every GET takes the engine lock.
    run(EvictionPolicy::GdWheel, RebalancePolicy::Sas, 1, false);
}

/// In-place SETs of a few hot keys race GETs of them: values of several
/// lengths within one class, long enough that a copy takes a while, so a
/// GET that read an item being rewritten would see a value that does not
/// check out.
#[test]
fn in_place_sets_are_never_read_half_written() {
    let config = Config {
        memory_limit: 8 << 20,
        rebalance: RebalancePolicy::Off,
        in_place_sets: true,
        ..Config::default()
    };
    let cache = Arc::new(Cache::new(config, Arc::new(Clock::new())).unwrap());
    for k in 0..4 {
        cache.store(&Store::set(&key(k), &value(k, 3000)));
    }
    let stop = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let (cache, stop) = (cache.clone(), stop.clone());
            std::thread::spawn(move || {
                let (mut bad, mut hits) = (0u64, 0u64);
                while !stop.load(Ordering::Relaxed) {
                    for k in 0..4 {
                        cache.get(&key(k), Lookup::GET, |item| {
                            let item = item.expect("never evicted");
                            hits += 1;
                            bad += u64::from(!check(k, &item.value.to_vec()));
                        });
                    }
                }
                (bad, hits)
            })
        })
        .collect();
    let mut in_place = 0u64;
    for i in 0..100_000u64 {
        let k = i % 4;
        let v = value(k, 3000 + (i * 7 % 8) as usize);
        in_place += u64::from(cache.try_store(&Store::set(&key(k), &v)).is_ok());
    }
    stop.store(true, Ordering::Relaxed);
    let (bad, hits) = readers
        .into_iter()
        .map(|r| r.join().unwrap())
        .fold((0, 0), |(b, h), (b2, h2)| (b + b2, h + h2));
    assert_eq!(in_place, 100_000, "all in place");
    assert!(hits > 1000, "{hits} GETs");
    assert_eq!(bad, 0, "half-written values read ({hits} GETs)");
    cache.lock().validate();
}

/// Cavast's re-partitioning swaps items between chunks while GETs read
/// them without the engine lock. Every round makes a random quarter of the
/// keys hot, lets a pass read the temperatures while the readers wait (a
/// GET warms its item up), then lets the readers loose while the pass
/// trades the hot items into their pages' first columns. A GET that read a
/// chunk being swapped would see a value that does not check out, or no
/// item.
#[test]
fn swaps_are_never_seen_half_done() {
    let config = Config {
        memory_limit: 8 << 20,
        rebalance: RebalancePolicy::Off,
        repartition: true,
        lock_stripes: 16,
        ..Config::default()
    };
    let clock = Arc::new(Clock::new());
    let cache = Arc::new(Cache::new(config, clock.clone()).unwrap());
    // Few keys and long values: readers often meet a swap under way.
    const N: u64 = 64;
    for k in 0..N {
        cache.store(&Store::set(&key(k), &value(k, 20_000)));
    }
    let gate = Arc::new(std::sync::RwLock::new(()));
    let stop = Arc::new(AtomicBool::new(false));
    let reads = Arc::new(AtomicU64::new(0));
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let (cache, stop, reads, gate) =
                (cache.clone(), stop.clone(), reads.clone(), gate.clone());
            std::thread::spawn(move || {
                let mut bad = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let _open = gate.read().unwrap();
                    for k in 0..N {
                        cache.get(&key(k), Lookup::GET, |item| {
                            bad += u64::from(!item.is_some_and(|i| check(k, &i.value.to_vec())));
                        });
                    }
                    reads.fetch_add(N, Ordering::Relaxed);
                }
                bad
            })
        })
        .collect();
    let mut rng = Rng(0x5EED);
    let mut rounds = 0;
    // Enough rounds, and enough reads among them however the threads are
    // scheduled.
    while rounds < 300 || reads.load(Ordering::Relaxed) < 20_000 && rounds < 100_000 {
        rounds += 1;
        let closed = gate.write().unwrap();
        clock.advance(std::time::Duration::from_secs(1));
        let mut e = cache.lock();
        for _ in 0..N / 4 {
            let k = key(rng.next() % N);
            // The second fetch refreshes the access time (memcached's rule).
            e.lookup(&k, Lookup::GET);
            e.lookup(&k, Lookup::GET);
        }
        e.release_stripes();
        let pages = e.stats().repartition.unwrap().pages;
        while !e.repartition_is_placing() && e.stats().repartition.unwrap().pages == pages {
            e.maintain(1);
            e.release_stripes();
        }
        drop(e);
        drop(closed);
        // Small slices, so the readers run between them.
        while cache.lock().stats().repartition.unwrap().pages == pages {
            cache.lock().maintain(8);
        }
    }
    stop.store(true, Ordering::Relaxed);
    let bad: u64 = readers.into_iter().map(|r| r.join().unwrap()).sum();
    let reads = reads.load(Ordering::Relaxed);
    let e = &mut cache.lock();
    let swaps = e.stats().repartition.unwrap().swaps;
    assert!(swaps > 1000, "{swaps} swaps");
    assert!(reads > 10_000, "{reads} GETs");
    assert_eq!(bad, 0, "{bad} of {reads} GETs read a swap half done");
    e.validate();
}

/// With memory to spare nothing may disappear: two clients, each with keys
/// of its own and an exact model of which are there, store (in place or
/// not), delete, count and touch them, and churn short-lived keys that
/// give the maintainer expired items to reclaim; the maintainer runs
/// without pause and time moves fast. Every long-lived key must be found
/// exactly when the model says so.
#[test]
fn no_item_is_lost_with_memory_to_spare() {
    let config = Config {
        memory_limit: 64 << 20,
        in_place_sets: true,
        ..Config::default()
    };
    let clock = Arc::new(Clock::new());
    let cache = Arc::new(Cache::new(config, clock.clone()).unwrap());
    let maintainer = Maintainer::start(&cache, &clock, 64, 16);
    let clients: Vec<_> = (0..2u64)
        .map(|t| {
            let (cache, clock) = (cache.clone(), clock.clone());
            std::thread::spawn(move || {
                let mut rng = Rng(0x2545_F491_4F6C_DD1D ^ ((t + 1) * 0x9E37_79B9));
                // Long-lived keys: t*1M + 0..500; short-lived: t*1M + 1000..
                let base = t * 1_000_000;
                let mut present = vec![false; 500];
                let mut lost = Vec::new();
                for i in 0..100_000u64 {
                    let k = rng.next() % 500;
                    let kb = key(base + k);
                    match rng.next() % 10 {
                        0..=3 => {
                            let len = 20 + (rng.next() % 40) as usize;
                            let v = value(base + k, len);
                            let mut s = Store::set(&kb, &v);
                            if i % 2 == 1 {
                                s.expiry = Expiry::At(clock.now() + 10_000_000);
                            }
                            cache.store(&s);
                            present[k as usize] = true;
                        }
                        4 => {
                            cache.lock().delete(&kb, 0);
                            present[k as usize] = false;
                        }
                        5 => {
                            let ck = key(base + 500 + k % 16);
                            cache.lock().arith(
                                &ck,
                                &Arith {
                                    incr: false,
                                    delta: 1,
                                    cas: 0,
                                    autovivify: Some((7, Expiry::Never)),
                                    new_expiry: None,
                                },
                            );
                        }
                        6 => {
                            cache.lock().touch(&kb, Expiry::Never);
                        }
                        _ => {
                            // Churn: expired at once, or soon.
                            let ck = key(base + 1000 + i % 5000);
                            let v = value(base + 1000 + i % 5000, 30);
                            let mut s = Store::set(&ck, &v);
                            s.expiry = match rng.next() % 3 {
                                0 => Expiry::Expired,
                                _ => Expiry::At(clock.now() + 1),
                            };
                            cache.store(&s);
                        }
                    }
                    let found = cache.get(&kb, Lookup::GET, |it| it.is_some());
                    if found != present[k as usize] {
                        lost.push((i, k, present[k as usize]));
                        present[k as usize] = found;
                    }
                    for c in 0..16 {
                        let ck = key(base + 500 + c);
                        if i > 1000 && !cache.get(&ck, Lookup::GET, |it| it.is_some()) {
                            lost.push((i, 500 + c, true));
                            cache.store(&Store::set(&ck, b"7"));
                        }
                    }
                }
                lost
            })
        })
        .collect();
    let lost: Vec<_> = clients.into_iter().map(|c| c.join().unwrap()).collect();
    drop(maintainer);
    let mut e = cache.lock();
    e.validate();
    let s = e.stats();
    assert!(
        lost.iter().all(|l| l.is_empty()),
        "items lost or found wrongly (step, key, expected): {lost:?}\n{s:?}"
    );
    assert_eq!(s.evictions + s.slab_reassign_evictions, 0, "{s:?}");
}

/// One client and the maintainer, as in a server with one connection: the
/// client's every reply must match a model of the cache (memory to spare,
/// so nothing is evicted) while the maintainer reclaims, time moves, and
/// stores of every kind (in place, new, expired at once, chained,
/// prepended), counters, flushes and multi-gets go on.
#[test]
fn one_client_beside_the_maintainer_matches_a_model() {
    use std::collections::HashMap;
    let config = Config {
        memory_limit: 256 << 20,
        in_place_sets: true,
        ..Config::default()
    };
    let clock = Arc::new(Clock::new());
    let cache = Arc::new(Cache::new(config, clock.clone()).unwrap());
    let maintainer = Maintainer::start(&cache, &clock, 512, 16);
    let mut rng = Rng(0x5DEE_CE66_D1CE_4E5B);
    let mut model: HashMap<u64, Vec<u8>> = HashMap::new();
    let mut wrong = Vec::new();
    for i in 0..150_000u64 {
        let k = rng.next() % 300;
        let kb = key(k);
        let len = match rng.next() % 1000 {
            0..=1 => 600_000 + (rng.next() % 300_000) as usize,
            2..=100 => 100 + (rng.next() % 3000) as usize,
            _ => 1 + (rng.next() % 60) as usize,
        };
        let v: Vec<u8> = (0..len).map(|j| (i as usize + j) as u8).collect();
        match rng.next() % 20 {
            0..=5 => {
                let mut s = Store::set(&kb, &v);
                s.expiry = if rng.next().is_multiple_of(2) {
                    Expiry::Never
                } else {
                    Expiry::At(clock.now() + 10_000_000)
                };
                cache.store(&s);
                model.insert(k, v.clone());
            }
            6 => {
                let mode = if rng.next().is_multiple_of(2) {
                    StoreMode::Set
                } else {
                    StoreMode::Add
                };
                let s = Store {
                    mode,
                    expiry: Expiry::Expired,
                    ..Store::set(&kb, &v[..len.min(20)])
                };
                cache.store(&s);
                if mode == StoreMode::Set || !model.contains_key(&k) {
                    model.remove(&k);
                }
            }
            7 => {
                let s = Store {
                    mode: StoreMode::Prepend,
                    ..Store::set(&kb, &v[..len.min(30)])
                };
                cache.store(&s);
                if let Some(old) = model.get_mut(&k) {
                    let mut new = v[..len.min(30)].to_vec();
                    new.extend_from_slice(old);
                    if new.len() < 1_000_000 {
                        *old = new;
                    }
                }
            }
            8 => {
                cache.lock().delete(&kb, 0);
                model.remove(&k);
            }
            9 => {
                let ck = 1000 + k % 8;
                let out = cache.lock().arith(
                    &key(ck),
                    &Arith {
                        incr: true,
                        delta: 3,
                        cas: 0,
                        autovivify: Some((5, Expiry::Never)),
                        new_expiry: None,
                    },
                );
                let want = match model.get(&ck) {
                    Some(v) => {
                        std::str::from_utf8(v)
                            .unwrap()
                            .trim()
                            .parse::<u64>()
                            .unwrap()
                            + 3
                    }
                    None => 5,
                };
                match out {
                    ArithOutcome::Value { value, .. } if value == want => {}
                    other => wrong.push(format!("{i}: arith {ck}: {other:?}, want {want}")),
                }
                model.insert(ck, want.to_string().into_bytes());
            }
            10 => {
                cache.lock().touch(&kb, Expiry::Never);
            }
            11 if rng.next().is_multiple_of(500) => {
                if rng.next().is_multiple_of(2) {
                    cache.lock().flush_all(None);
                    model.clear();
                } else {
                    let at = clock.now() + 10_000_000;
                    cache.lock().flush_all(Some(at));
                }
            }
            12 => {
                let keys: Vec<Vec<u8>> = (k..k + 6).map(key).collect();
                let refs: Vec<&[u8]> = keys.iter().map(|k| k.as_slice()).collect();
                cache.get_batch(&refs, Lookup::GET, |j, _, _, item| {
                    let got = item.map(|it| it.value.to_vec());
                    let want = model.get(&(k + j as u64));
                    if got.as_ref() != want {
                        wrong.push(format!(
                            "{i}: batch key {} found {:?}, model {:?}",
                            k + j as u64,
                            got.map(|g| g.len()),
                            want.map(|w| w.len())
                        ));
                    }
                    ControlFlow::Continue(())
                });
            }
            _ => {}
        }
        for kk in [k, 1000 + k % 8] {
            let got = cache.get(&key(kk), Lookup::GET, |it| it.map(|it| it.value.to_vec()));
            if got.as_ref() != model.get(&kk) {
                wrong.push(format!(
                    "{i}: key {kk} found {:?}, model {:?}",
                    got.as_ref().map(|g| g.len()),
                    model.get(&kk).map(|w| w.len())
                ));
                match got {
                    Some(g) => model.insert(kk, g),
                    None => model.remove(&kk),
                };
            }
        }
        if wrong.len() > 20 {
            break;
        }
    }
    drop(maintainer);
    let mut e = cache.lock();
    e.validate();
    let s = e.stats();
    assert!(wrong.is_empty(), "{wrong:#?}\n{s:?}");
    assert_eq!(s.evictions + s.slab_reassign_evictions, 0, "{s:?}");
}

/// SETs of new keys place their items without the engine lock, in chunks
/// reserved for their thread (`magazine`), while pages move between the
/// two classes they fill, whole caches are flushed and the maintainer
/// runs: a page that leaves its class, or a flush, must first take back
/// every reserved chunk, or an item would be written into a page another
/// class has (a GET then reads a value that does not check out, or
/// `validate` finds the item in the wrong class or unindexed).
#[test]
fn new_keys_race_page_moves_and_flushes() {
    let config = Config {
        memory_limit: 16 << 20,
        in_place_sets: true,
        lockfree_inserts: true,
        rebalance: RebalancePolicy::Off,
        // New keys skip the engine lock only without a Z-zone.
        zzone: false,
        ..Config::default()
    };
    let clock = Arc::new(Clock::new());
    let cache = Arc::new(Cache::new(config, clock.clone()).unwrap());
    // Pages in both classes to move from the start.
    for k in 200_000_000..200_030_000u64 {
        let len = if k.is_multiple_of(2) { 60 } else { 260 };
        cache.store(&Store::set(&key(k), &value(k, len)));
    }
    let stop = Arc::new(AtomicBool::new(false));
    let unlocked = Arc::new(AtomicU64::new(0));
    let stores = Arc::new(AtomicU64::new(0));
    let writers: Vec<_> = (0..2u64)
        .map(|t| {
            let (cache, stop, unlocked) = (cache.clone(), stop.clone(), unlocked.clone());
            let stores = stores.clone();
            std::thread::spawn(move || {
                let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ (t + 1));
                let (mut bad, mut i) = (0u64, 0u64);
                while !stop.load(Ordering::Relaxed) {
                    let k = t * 100_000_000 + i;
                    // Two classes: about 90 and 300 bytes.
                    let len = if rng.next().is_multiple_of(2) {
                        60
                    } else {
                        260
                    } + (rng.next() % 8) as usize;
                    let (kb, v) = (key(k), value(k, len));
                    let s = Store::set(&kb, &v);
                    match cache.try_store(&s) {
                        Ok(_) => {
                            unlocked.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(f) => {
                            cache.finish_store(&mut cache.lock(), &s, f);
                        }
                    }
                    // This key, and one stored a while ago (a page move
                    // may have evicted either: then it is a miss).
                    for back in [0, rng.next() % (i + 1)] {
                        let k = k - back;
                        cache.get(&key(k), Lookup::GET, |it| {
                            if let Some(it) = it {
                                bad += u64::from(!check(k, &it.value.to_vec()));
                            }
                        });
                    }
                    i += 1;
                    stores.fetch_add(1, Ordering::Relaxed);
                }
                (bad, i)
            })
        })
        .collect();
    let maintainer = Maintainer::start(&cache, &clock, 64, 1000);
    let mut moved = 0;
    // Each move or flush waits for the writers to have stored 200 more
    // keys since the last one (not for a time: on a busy machine they
    // might not have run at all).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(300);
    let mut seen = 0;
    for round in 0..400u32 {
        while stores.load(Ordering::Relaxed) < seen + 200 {
            assert!(
                std::time::Instant::now() < deadline,
                "the writers stalled at round {round}"
            );
            std::thread::sleep(std::time::Duration::from_micros(100));
        }
        seen = stores.load(Ordering::Relaxed);
        let mut e = cache.lock();
        let classes: Vec<u32> = e
            .slab_stats()
            .iter()
            .filter(|c| c.total_pages > 0)
            .map(|c| c.id)
            .collect();
        if round % 50 == 49 {
            e.flush_all(None);
        } else if let Some(&dst) = classes.get(round as usize % classes.len().max(1)) {
            // From the class with the most pages to another one.
            moved += u32::from(e.slabs_reassign(-1, dst as i32) == ReassignOutcome::Ok);
        }
    }
    stop.store(true, Ordering::Relaxed);
    let results: Vec<_> = writers.into_iter().map(|w| w.join().unwrap()).collect();
    drop(maintainer);
    let (bad, stores) = results
        .iter()
        .fold((0, 0), |(b, n), &(b2, n2)| (b + b2, n + n2));
    let unlocked = unlocked.load(Ordering::Relaxed);
    let mut e = cache.lock();
    e.validate();
    assert_eq!(bad, 0, "values that do not check out");
    assert!(moved > 50, "{moved} page moves");
    // Most new keys found a reserved chunk (a refill serves up to 32).
    assert!(
        unlocked * 2 > stores,
        "{unlocked} of {stores} without the lock"
    );
}
