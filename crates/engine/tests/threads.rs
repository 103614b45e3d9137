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

use cachalot_engine::engine::{Arith, Lookup, Store};
use cachalot_engine::{Cache, Clock, Config, EvictionPolicy, Expiry, RebalancePolicy};

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

fn run(eviction: EvictionPolicy, rebalance: RebalancePolicy, stripes: usize) {
    let config = Config {
        memory_limit: 24 << 20,
        eviction,
        rebalance,
        lock_stripes: stripes,
        in_place_sets: true,
        // A sample table this small makes the MRC profile sample few keys
        // (it samples all of them while they fit): the others take the
        // lock-free paths.
        rebalance_tuning: cachalot_engine::rebalance::Tuning {
            mrc_bytes: 16 << 10,
            ..Default::default()
        },
        ..Config::default()
    };
    let clock = Arc::new(Clock::new());
    let cache = Arc::new(Cache::new(config, clock.clone()).unwrap());
    let stop = Arc::new(AtomicBool::new(false));
    let bad = Arc::new(AtomicU64::new(0));
    let hits = Arc::new(AtomicU64::new(0));
    let in_place = Arc::new(AtomicU64::new(0));
    let maintainer = {
        let (cache, stop, clock) = (cache.clone(), stop.clone(), clock.clone());
        std::thread::spawn(move || {
            let mut ticks = 0u32;
            while !stop.load(Ordering::Relaxed) {
                cache.lock().maintain(64);
                ticks += 1;
                if ticks.is_multiple_of(64) {
                    // Time moves: expiries and delayed flushes come due.
                    clock.advance(std::time::Duration::from_secs(1));
                }
                std::thread::yield_now();
            }
        })
    };
    let workers: Vec<_> = (0..4u64)
        .map(|t| {
            let (cache, bad, hits) = (cache.clone(), bad.clone(), hits.clone());
            let in_place = in_place.clone();
            let clock = clock.clone();
            std::thread::spawn(move || {
                let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ ((t + 1) * 0x1234_5678));
                for i in 0..60_000u32 {
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
                            cache.get_batch(&refs, Lookup::GET, |j, kb, item| {
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
                                Some(_) => {
                                    in_place.fetch_add(1, Ordering::Relaxed);
                                }
                                None => {
                                    cache.lock().store(&s);
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
                            if i.is_multiple_of(101) {
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
    stop.store(true, Ordering::Relaxed);
    maintainer.join().unwrap();
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
    assert!(s.evictions > 0, "{eviction:?}: memory was short: {s:?}");
    // A few dozen classes share 22 pages: some stores find none.
    assert!(s.outofmemory < s.total_items / 4, "{eviction:?}: {s:?}");
}

#[test]
fn gets_race_everything_else_under_clock() {
    run(EvictionPolicy::Lru, RebalancePolicy::Mrc, 16);
}

#[test]
fn gets_race_everything_else_under_clock_without_a_profile() {
    run(EvictionPolicy::Lru, RebalancePolicy::Memcached, 256);
}

#[test]
fn gets_race_everything_else_under_lazy_gdwheel() {
    run(EvictionPolicy::GdWheelLazy, RebalancePolicy::CostPerByte, 4);
}

#[test]
fn gets_race_everything_else_with_locked_hits() {
    // Eager GD-Wheel and SAS: every GET takes the engine lock.
    run(EvictionPolicy::GdWheel, RebalancePolicy::Sas, 1);
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
        in_place += u64::from(cache.try_store(&Store::set(&key(k), &v)).is_some());
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
