//! Items larger than the largest chunk (`chain`): property tests of chained
//! items under memory pressure, against a model of what the cache may hold.
//!
//! The memory limit is a few pages, so items are evicted, pages stolen,
//! moved and drained all the time; the engine may forget any item (the model
//! forgets it on a miss), but whatever it returns must be exactly the last
//! value stored, and `validate()` (chains included) must hold after each step.
//! Every policy pair runs: CLOCK and GD-Wheel, with automove and mrc moves.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use crate::engine::Arith;
use crate::{
    ArithOutcome, Clock, Config, Engine, EvictionPolicy, Expiry, RebalancePolicy, Store, StoreMode,
    StoreOutcome,
};
use proptest::prelude::*;

/// Chained over 16 KB chunks up to 64 KB items, in a few pages.
fn config(memory_limit: usize, eviction: EvictionPolicy, rebalance: RebalancePolicy) -> Config {
    Config {
        memory_limit,
        // Five classes (216 B to 16 KB chunks) in three or four pages:
        // items are evicted and pages stolen and moved all the time.
        growth_factor: 4.0,
        chunk_min_data: 200,
        item_size_max: 64 << 10,
        slab_chunk_max: 16 << 10,
        eviction,
        rebalance,
        // The N-zone alone: chains across its pages.
        zzone: false,
        ..Config::default()
    }
}

#[derive(Clone, Debug)]
enum Op {
    Set { key: u8, len: usize },
    Extend { key: u8, len: usize, append: bool },
    Get { key: u8 },
    Delete { key: u8 },
    Incr { key: u8 },
    Touch { key: u8 },
    Maintain { budget: usize },
    Move { from: usize, to: usize },
    Flush,
}

fn len() -> impl Strategy<Value = usize> {
    prop_oneof![0usize..200, 200usize..20_000, 16_000usize..70_000]
}

fn op() -> impl Strategy<Value = Op> {
    let key = 0u8..=255;
    prop_oneof![
        60 => (key.clone(), len()).prop_map(|(key, len)| Op::Set { key, len }),
        20 => (key.clone(), len(), any::<bool>())
            .prop_map(|(key, len, append)| Op::Extend { key, len: len / 4, append }),
        60 => key.clone().prop_map(|key| Op::Get { key }),
        10 => key.clone().prop_map(|key| Op::Delete { key }),
        10 => key.clone().prop_map(|key| Op::Incr { key }),
        10 => key.clone().prop_map(|key| Op::Touch { key }),
        20 => prop_oneof![Just(1usize), Just(64), Just(100_000)].prop_map(|budget| Op::Maintain { budget }),
        10 => (0usize..5, 0usize..5).prop_map(|(from, to)| Op::Move { from, to }),
        1 => Just(Op::Flush),
    ]
}

fn value(key: u8, len: usize, salt: u64) -> Vec<u8> {
    (0..len)
        .map(|i| b'a' + ((i as u64 * 31 + u64::from(key) * 7 + salt) % 26) as u8)
        .collect()
}

fn run(ops: &[Op], config: Config) {
    let clock = Arc::new(Clock::new());
    let mut e = Engine::new(config, clock.clone()).unwrap();
    let mut model: HashMap<u8, Vec<u8>> = HashMap::new();
    for (step, op) in ops.iter().enumerate() {
        let k = |key: u8| format!("key:{key}").into_bytes();
        match *op {
            Op::Set { key, len } => {
                let v = value(key, len, step as u64);
                match e.store(&Store::set(&k(key), &v)) {
                    StoreOutcome::Stored { .. } => {
                        model.insert(key, v);
                    }
                    other => {
                        assert!(len > 60_000 || other == StoreOutcome::NoMemory, "{other:?}");
                        model.remove(&key);
                    }
                }
            }
            Op::Extend { key, len, append } => {
                let v = value(key, len, step as u64);
                let kb = k(key);
                let req = Store {
                    mode: if append {
                        StoreMode::Append
                    } else {
                        StoreMode::Prepend
                    },
                    ..Store::set(&kb, &v)
                };
                match e.store(&req) {
                    StoreOutcome::Stored { .. } => {
                        let old = model.get(&key).expect("extended an item the model has");
                        let new = if append {
                            [&old[..], &v[..]].concat()
                        } else {
                            [&v[..], &old[..]].concat()
                        };
                        model.insert(key, new);
                    }
                    // Too large: the item stays.
                    StoreOutcome::TooLarge => {}
                    // Missing, or out of memory (the old item may or may
                    // not have lost its page meanwhile): forget it on both
                    // sides.
                    _ => {
                        e.delete(&kb, 0);
                        model.remove(&key);
                    }
                }
            }
            Op::Get { key } => match e.get(&k(key)) {
                Some(it) => {
                    let want = model.get(&key).expect("hit on an item the model has");
                    assert_eq!(it.value.len(), want.len());
                    assert!(it.value == want[..], "value of key {key} at step {step}");
                    assert_eq!(it.value.to_vec(), *want);
                }
                None => {
                    model.remove(&key);
                }
            },
            Op::Delete { key } => {
                e.delete(&k(key), 0);
                model.remove(&key);
            }
            Op::Incr { key } => {
                let r = e.arith(
                    &k(key),
                    &Arith {
                        incr: true,
                        delta: 1,
                        cas: 0,
                        autovivify: None,
                        new_expiry: None,
                    },
                );
                // Values are letters: never a number.
                match r {
                    ArithOutcome::NonNumeric => assert!(model.contains_key(&key)),
                    ArithOutcome::NotFound => {
                        model.remove(&key);
                    }
                    other => panic!("incr on letters: {other:?}"),
                }
            }
            Op::Touch { key } => {
                if e.touch(&k(key), Expiry::Never).is_none() {
                    model.remove(&key);
                }
            }
            Op::Maintain { budget } => {
                clock.advance(Duration::from_secs(1));
                e.maintain(budget);
            }
            Op::Move { from, to } => {
                e.start_page_move(from, Some(to));
            }
            Op::Flush => {
                e.flush_all(None);
                model.clear();
            }
        }
        // Includes the memory bound.
        e.validate();
    }
    // Whatever is left reads back exactly.
    for (key, want) in &model {
        if let Some(it) = e.get(format!("key:{key}").as_bytes()) {
            assert!(it.value == want[..]);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn chained_items_under_pressure(ops in proptest::collection::vec(op(), 1..800)) {
        for eviction in [EvictionPolicy::Lru, EvictionPolicy::GdWheel] {
            for (memory, rebalance) in [(4 << 20, RebalancePolicy::Memcached), (5 << 20, RebalancePolicy::Mrc)] {
                run(&ops, config(memory, eviction, rebalance));
            }
        }
    }
}

/// Values of 1 MB + 1, 2 MB, 16 MB and exactly `-I` with `-I 32m -m 64`:
/// 1 MB pages, 512 KB chunks, everything inside the limit.
#[test]
fn large_values_with_default_chunks() {
    let clock = Arc::new(Clock::new());
    let config = Config {
        memory_limit: 64 << 20,
        item_size_max: 32 << 20,
        ..Config::default()
    };
    let mut e = Engine::new(config, clock).unwrap();
    let key = b"big";
    // The largest value memcached takes: its 48-byte header, 8 bytes of
    // CAS, the key and its NUL and the value's CRLF fill the rest of -I.
    let at_limit = (32 << 20) - 48 - 8 - (key.len() + 1) - 2;
    assert!(e.fits(key.len(), at_limit, 0));
    assert!(!e.fits(key.len(), at_limit + 1, 0));
    for (i, len) in [(1 << 20) + 1, 2 << 20, 16 << 20, at_limit, 100]
        .into_iter()
        .enumerate()
    {
        let v = value(i as u8, len, 0);
        assert!(matches!(
            e.store(&Store::set(key, &v)),
            StoreOutcome::Stored { .. }
        ));
        let it = e.get(key).unwrap();
        assert_eq!(it.value.len(), len);
        assert!(it.value == v[..]);
        e.validate();
        let s = e.stats();
        assert!(s.total_malloced <= 64 << 20);
        // Pages stay 1 MB.
        assert_eq!(s.total_malloced % (1 << 20), 0);
    }
    // Append across the chunk limit, then shrink back by a set.
    let a = value(7, 500_000, 1);
    let b = value(8, 600_000, 2);
    assert!(matches!(
        e.store(&Store::set(b"ab", &a)),
        StoreOutcome::Stored { .. }
    ));
    let append = Store {
        mode: StoreMode::Append,
        ..Store::set(b"ab", &b)
    };
    assert!(matches!(e.store(&append), StoreOutcome::Stored { .. }));
    assert!(e.get(b"ab").unwrap().value == [&a[..], &b[..]].concat());
    e.validate();
    assert!(e.delete(b"ab", 0) == crate::DeleteOutcome::Deleted);
    e.flush_all(None);
    e.validate();
    assert!(e.get(key).is_none());
}

/// Pages of the chunk class move while chains straddle them: hot heads are
/// rescued elsewhere (their segments then point at the new place), a
/// segment whose head lives on another page takes its item with it, and a
/// page taken synchronously for another class does the same.
#[test]
fn page_moves_with_chains_across_pages() {
    for eviction in [EvictionPolicy::Lru, EvictionPolicy::GdWheel] {
        let clock = Arc::new(Clock::new());
        let config = Config {
            memory_limit: 8 << 20,
            ..config(8 << 20, eviction, RebalancePolicy::Off)
        };
        let mut e = Engine::new(config, clock.clone()).unwrap();
        // Three chunks per item, 64 chunks per page: chains straddle pages.
        let keys: Vec<Vec<u8>> = (0..150).map(|i| format!("big:{i}").into_bytes()).collect();
        let vals: Vec<Vec<u8>> = (0..150).map(|i| value(i as u8, 40_000, i)).collect();
        for (k, v) in keys.iter().zip(&vals) {
            assert!(matches!(
                e.store(&Store::set(k, v)),
                StoreOutcome::Stored { .. }
            ));
        }
        let check = |e: &mut Engine| {
            e.validate();
            let mut hits = 0;
            for (k, v) in keys.iter().zip(&vals) {
                if let Some(it) = e.get(k) {
                    assert!(it.value == v[..]);
                    hits += 1;
                }
            }
            hits
        };
        assert!(check(&mut e) > 100);
        let big = e.slab_stats().last().unwrap().id as i32;
        assert_eq!(big, 5);
        // Hot items (read above) are rescued; a move runs to its end.
        for _ in 0..3 {
            e.slabs_reassign(big, 1);
            let hits = check(&mut e);
            assert!(hits > 0, "{hits}");
        }
        // Each smaller class needs a page: stolen from the chunk class at
        // once (the most pages), with no rescue.
        for (i, len) in [100, 600, 3000, 12_000].into_iter().enumerate() {
            let v = value(0, len, 0);
            assert!(matches!(
                e.store(&Store::set(format!("small:{i}").as_bytes(), &v)),
                StoreOutcome::Stored { .. }
            ));
            check(&mut e);
        }
        clock.advance(Duration::from_secs(1));
        e.maintain(1 << 20);
        check(&mut e);
    }
}

/// Expired chained items are reclaimed with all their chunks; with `-M` a
/// chained store that finds no memory fails cleanly and keeps what was there.
#[test]
fn expiry_and_no_evict() {
    let clock = Arc::new(Clock::new());
    let config = Config {
        memory_limit: 4 << 20,
        item_size_max: 2 << 20,
        evict: false,
        ..Config::default()
    };
    let mut e = Engine::new(config, clock.clone()).unwrap();
    let v = value(1, 1_500_000, 0);
    let dying = Store {
        expiry: clock.expiry(1),
        ..Store::set(b"dies", &v)
    };
    assert!(matches!(e.store(&dying), StoreOutcome::Stored { .. }));
    clock.advance(Duration::from_secs(2));
    e.maintain(1 << 20);
    e.validate();
    assert_eq!(e.stats().curr_items, 0);
    // Memory for two such values (four pages minus the index): the third
    // fails and leaves no stray chunk behind.
    let mut stored = Vec::new();
    for i in 0..3u8 {
        let v = value(i, 1_500_000, 1);
        let key = [b'k', i];
        match e.store(&Store::set(&key, &v)) {
            StoreOutcome::Stored { .. } => stored.push((key, v)),
            other => assert_eq!(other, StoreOutcome::NoMemory),
        }
        e.validate();
    }
    assert!(!stored.is_empty() && stored.len() < 3, "{}", stored.len());
    for (key, v) in &stored {
        assert!(e.get(key).unwrap().value == v[..]);
    }
}
