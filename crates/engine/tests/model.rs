//! Property tests: the engine against a simple reference model.
//!
//! The model is a HashMap with memcached's semantics written the obvious way.
//! With a memory limit far above what the operations store, nothing is ever
//! evicted, so every reply and every read must agree exactly; `validate()`
//! checks the engine's internal invariants after each step. Every test runs
//! with each eviction policy (and with learned costs), see `POLICIES`.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use cachalot_engine::engine::{Arith, Lookup};
use cachalot_engine::{
    ArithOutcome, Clock, Config, DeleteOutcome, Engine, EvictionPolicy, Expiry, RebalancePolicy,
    Store, StoreMode, StoreOutcome,
};
use proptest::prelude::*;

#[derive(Clone, Debug)]
struct Entry {
    value: Vec<u8>,
    flags: u32,
    /// Absolute clock second at which it dies (None = never).
    dies: Option<u32>,
    cas: u64,
}

#[derive(Clone, Debug)]
enum Op {
    Store {
        mode: u8,
        key: u8,
        len: usize,
        flags: u32,
        ttl: i64,
        cas_of_last: bool,
        bad_cas: bool,
    },
    Get {
        key: u8,
    },
    Delete {
        key: u8,
    },
    Arith {
        key: u8,
        incr: bool,
        delta: u64,
    },
    Touch {
        key: u8,
        ttl: i64,
    },
    Advance {
        secs: u64,
    },
    Flush,
}

fn op() -> impl Strategy<Value = Op> {
    let key = 0u8..24;
    prop_oneof![
        4 => (0u8..5, key.clone(), 0usize..300, prop_oneof![Just(0u32), any::<u32>()], prop_oneof![Just(0i64), 1i64..5, Just(-1i64)], any::<bool>(), any::<bool>())
            .prop_map(|(mode, key, len, flags, ttl, cas_of_last, bad_cas)| Op::Store { mode, key, len, flags, ttl, cas_of_last, bad_cas }),
        4 => key.clone().prop_map(|key| Op::Get { key }),
        1 => key.clone().prop_map(|key| Op::Delete { key }),
        1 => (key.clone(), any::<bool>(), prop_oneof![0u64..10, Just(u64::MAX)]).prop_map(|(key, incr, delta)| Op::Arith { key, incr, delta }),
        1 => (key.clone(), prop_oneof![Just(0i64), 1i64..5, Just(-1i64)]).prop_map(|(key, ttl)| Op::Touch { key, ttl }),
        1 => (0u64..3).prop_map(|secs| Op::Advance { secs }),
        1 => Just(Op::Flush),
    ]
}

fn key_bytes(k: u8) -> Vec<u8> {
    format!("key:{k:03}").into_bytes()
}

fn value_bytes(k: u8, len: usize) -> Vec<u8> {
    // Half the keys hold numbers so incr/decr have something to work on.
    if k.is_multiple_of(2) {
        (len as u64 * 7).to_string().into_bytes()
    } else {
        (0..len)
            .map(|i| b'a' + ((i + k as usize) % 26) as u8)
            .collect()
    }
}

/// (eviction, learn_costs, rebalance): the engine must behave the same
/// under each.
const POLICIES: [(EvictionPolicy, bool, RebalancePolicy); 4] = [
    (EvictionPolicy::Lru, false, RebalancePolicy::Sas),
    (EvictionPolicy::Lru, false, RebalancePolicy::Mrc),
    (EvictionPolicy::GdWheel, false, RebalancePolicy::CostPerByte),
    (EvictionPolicy::GdWheel, true, RebalancePolicy::Mrc),
];

/// Run `test` once per policy with a default config using it.
fn each_policy(test: impl Fn(Config)) {
    for (eviction, learn_costs, rebalance) in POLICIES {
        test(Config {
            eviction,
            learn_costs,
            rebalance,
            ..Config::default()
        });
    }
}

fn engine(clock: &Arc<Clock>, base: &Config) -> Engine {
    let config = Config {
        memory_limit: 64 << 20,
        ..base.clone()
    };
    Engine::new(config, clock.clone()).unwrap()
}

fn dies(clock: &Clock, ttl: i64) -> Option<Option<u32>> {
    // Some(None) = never, Some(Some(t)) = at t, None = already expired.
    match clock.expiry(ttl) {
        Expiry::Never => Some(None),
        Expiry::At(t) => Some(Some(t)),
        Expiry::Expired => None,
    }
}

fn run(ops: Vec<Op>, base: &Config) {
    let clock = Arc::new(Clock::new());
    let mut e = engine(&clock, base);
    let mut model: HashMap<Vec<u8>, Entry> = HashMap::new();
    let mut last_cas: HashMap<Vec<u8>, u64> = HashMap::new();
    for op in ops {
        let now = clock.now();
        model.retain(|_, v| v.dies.is_none_or(|t| t > now));
        match op {
            Op::Store {
                mode,
                key,
                len,
                flags,
                ttl,
                cas_of_last,
                bad_cas,
            } => {
                let k = key_bytes(key);
                let v = value_bytes(key, len);
                let mode = [
                    StoreMode::Set,
                    StoreMode::Add,
                    StoreMode::Replace,
                    StoreMode::Append,
                    StoreMode::Prepend,
                ][mode as usize];
                let cas = if cas_of_last {
                    last_cas.get(&k).copied().unwrap_or(12345) + bad_cas as u64
                } else {
                    0
                };
                let expiry = clock.expiry(ttl);
                let got = e.store(&Store {
                    key: &k,
                    value: &v,
                    flags,
                    expiry,
                    mode,
                    cas,
                    new_cas: None,
                    cost: None,
                    invalidate: false,
                });
                let existing = model.get(&k).cloned();
                let expect = match (&existing, mode, cas) {
                    (None, _, c) if c != 0 => StoreOutcome::NotFound,
                    (Some(_), StoreMode::Add, _) => StoreOutcome::NotStored,
                    (Some(old), _, c) if c != 0 && c != old.cas => StoreOutcome::Exists,
                    (None, StoreMode::Replace | StoreMode::Append | StoreMode::Prepend, _) => {
                        StoreOutcome::NotStored
                    }
                    _ => StoreOutcome::Stored { cas: 0 },
                };
                match (got, expect) {
                    (StoreOutcome::Stored { cas }, StoreOutcome::Stored { .. }) => {
                        let entry = match (mode, existing) {
                            (StoreMode::Append, Some(old)) => Entry {
                                value: [old.value, v].concat(),
                                cas,
                                ..old
                            },
                            (StoreMode::Prepend, Some(old)) => Entry {
                                value: [v, old.value].concat(),
                                cas,
                                ..old
                            },
                            _ => match dies(&clock, ttl) {
                                Some(d) => Entry {
                                    value: v,
                                    flags,
                                    dies: d,
                                    cas,
                                },
                                None => Entry {
                                    value: v,
                                    flags,
                                    dies: Some(0),
                                    cas,
                                },
                            },
                        };
                        last_cas.insert(k.clone(), cas);
                        if entry.dies == Some(0) {
                            model.remove(&k);
                        } else {
                            model.insert(k, entry);
                        }
                    }
                    (g, x) => assert_eq!(g, x, "store {mode:?} cas={cas}"),
                }
            }
            Op::Get { key } => {
                let k = key_bytes(key);
                let got = e
                    .lookup(&k, Lookup::GET)
                    .map(|i| (i.value.to_vec(), i.flags, i.cas));
                let expect = model.get(&k).map(|m| (m.value.clone(), m.flags, m.cas));
                assert_eq!(got, expect, "get {k:?}");
                if let Some((_, _, cas)) = got {
                    last_cas.insert(k, cas);
                }
            }
            Op::Delete { key } => {
                let k = key_bytes(key);
                let got = e.delete(&k, 0);
                let expect = if model.remove(&k).is_some() {
                    DeleteOutcome::Deleted
                } else {
                    DeleteOutcome::NotFound
                };
                assert_eq!(got, expect);
            }
            Op::Arith { key, incr, delta } => {
                let k = key_bytes(key);
                let got = e.arith(
                    &k,
                    &Arith {
                        incr,
                        delta,
                        cas: 0,
                        autovivify: None,
                        new_expiry: None,
                    },
                );
                match model.get_mut(&k) {
                    None => assert_eq!(got, ArithOutcome::NotFound),
                    Some(m) => {
                        let trimmed = m.value.trim_ascii();
                        let parsed = Some(trimmed)
                            .filter(|t| {
                                !t.is_empty() && t.len() <= 20 && t.iter().all(u8::is_ascii_digit)
                            })
                            .and_then(|t| std::str::from_utf8(t).ok()?.parse::<u64>().ok());
                        match parsed {
                            None => assert_eq!(got, ArithOutcome::NonNumeric),
                            Some(n) => {
                                let want = if incr {
                                    n.wrapping_add(delta)
                                } else {
                                    n.saturating_sub(delta)
                                };
                                match got {
                                    ArithOutcome::Value { value, id } => {
                                        assert_eq!(value, want);
                                        // memcached pads a shorter result with spaces in place.
                                        let mut digits = want.to_string().into_bytes();
                                        if digits.len() < m.value.len() {
                                            digits.resize(m.value.len(), b' ');
                                        }
                                        m.value = digits;
                                        m.cas = e.item(id).cas;
                                        assert_eq!(e.item(id).value, &m.value[..]);
                                    }
                                    other => panic!("arith gave {other:?}"),
                                }
                            }
                        }
                    }
                }
            }
            Op::Touch { key, ttl } => {
                let k = key_bytes(key);
                let got = e.touch(&k, clock.expiry(ttl)).is_some();
                assert_eq!(got, model.contains_key(&k));
                if let Some(m) = model.get_mut(&k) {
                    m.dies = dies(&clock, ttl).unwrap_or(Some(0));
                }
            }
            Op::Advance { secs } => clock.advance(Duration::from_secs(secs)),
            Op::Flush => {
                e.flush_all(None);
                model.clear();
            }
        }
        e.validate();
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]
    #[test]
    fn engine_matches_model(ops in proptest::collection::vec(op(), 1..300)) {
        each_policy(|base| run(ops.clone(), &base));
    }
}

/// Under memory pressure the engine evicts, stays within `-m`, and keeps the
/// most recently written items.
#[test]
fn eviction_keeps_memory_bounded_and_recent_items() {
    each_policy(|base| {
        let clock = Arc::new(Clock::new());
        let config = Config {
            memory_limit: 4 << 20,
            ..base.clone()
        };
        let mut e = Engine::new(config, clock).unwrap();
        let n = 300_000u32;
        for i in 0..n {
            let key = format!("key:{i:010}");
            let r = e.store(&Store::set(key.as_bytes(), b"0123456789"));
            assert!(matches!(r, StoreOutcome::Stored { .. }));
        }
        e.validate();
        let s = e.stats();
        assert!(s.evictions > 0);
        assert!(s.total_malloced + s.hash_bytes <= 4 << 20);
        // The last 10% written are all still there.
        for i in (n - n / 10)..n {
            let key = format!("key:{i:010}");
            assert!(e.get(key.as_bytes()).is_some(), "recent {key} evicted");
        }
        // The first ones are gone, and every lost item counts as an eviction
        // (including those on pages given back as the index grew).
        assert!(e.get(b"key:0000000000").is_none());
        assert_eq!(s.curr_items + s.evictions, s.total_items);
    });
}

/// A value stored in a class that has no page while memory is full still gets
/// stored: a page moves over from the largest class.
#[test]
fn new_class_gets_a_page_when_memory_is_full() {
    each_policy(|base| {
        let clock = Arc::new(Clock::new());
        let config = Config {
            memory_limit: 2 << 20,
            ..base.clone()
        };
        let mut e = Engine::new(config, clock).unwrap();
        for i in 0..100_000u32 {
            e.store(&Store::set(format!("small:{i}").as_bytes(), b"x"));
        }
        let big = vec![7u8; 5000];
        assert!(matches!(
            e.store(&Store::set(b"big", &big)),
            StoreOutcome::Stored { .. }
        ));
        assert_eq!(e.get(b"big").map(|i| i.value.len()), Some(5000));
        e.validate();
    });
}

#[test]
fn too_large_and_no_evict_mode() {
    each_policy(|base| {
        let clock = Arc::new(Clock::new());
        let mut e = Engine::new(
            Config {
                memory_limit: 2 << 20,
                evict: false,
                ..base.clone()
            },
            clock,
        )
        .unwrap();
        let huge = vec![0u8; 1 << 20];
        assert_eq!(e.store(&Store::set(b"k", &huge)), StoreOutcome::TooLarge);
        let mut saw_oom = false;
        for i in 0..200_000u32 {
            match e.store(&Store::set(format!("k{i}").as_bytes(), b"0123456789")) {
                StoreOutcome::Stored { .. } => {}
                StoreOutcome::NoMemory => {
                    saw_oom = true;
                    break;
                }
                other => panic!("{other:?}"),
            }
        }
        assert!(saw_oom, "-M must refuse instead of evicting");
        assert_eq!(e.stats().evictions, 0);
        e.validate();
    });
}

#[test]
fn slabs_reassign_moves_a_page_and_keeps_items_consistent() {
    each_policy(|base| {
        use cachalot_engine::engine::ReassignOutcome;
        let clock = Arc::new(Clock::new());
        let mut e = Engine::new(
            Config {
                memory_limit: 8 << 20,
                ..base.clone()
            },
            clock,
        )
        .unwrap();
        for i in 0..200_000u32 {
            e.store(&Store::set(format!("k{i}").as_bytes(), b"v"));
            if i % 3 == 0 {
                e.get(format!("k{i}").as_bytes());
            }
        }
        let before = e.slab_stats();
        let src = before.iter().max_by_key(|s| s.total_pages).unwrap().id as i32;
        assert_eq!(e.slabs_reassign(src, src), ReassignOutcome::Same);
        assert_eq!(e.slabs_reassign(src, src + 3), ReassignOutcome::Ok);
        e.validate();
        let after = e.slab_stats();
        let pages = |v: &[cachalot_engine::SlabClassStats], id: i32| {
            v.iter()
                .find(|s| s.id == id as u32)
                .map_or(0, |s| s.total_pages)
        };
        assert_eq!(pages(&after, src), pages(&before, src) - 1);
        assert_eq!(pages(&after, src + 3), 1);
        // Class 0 is the pool of unassigned pages, as in memcached.
        assert_eq!(e.slabs_reassign(src, 0), ReassignOutcome::Ok);
        assert_eq!(e.stats().free_pages, 1);
        assert_eq!(e.slabs_reassign(0, src + 3), ReassignOutcome::NoSpare);
        assert_eq!(e.slabs_reassign(src, 0), ReassignOutcome::Ok);
        assert_eq!(e.slabs_reassign(0, src + 3), ReassignOutcome::Ok);
        assert_eq!(e.slabs_reassign(src, 1000), ReassignOutcome::BadClass);
        assert_eq!(e.stats().slabs_moved, 4);
        e.validate();
    });
}

#[test]
fn delayed_flush_and_expiry_by_reclaimer() {
    each_policy(|base| {
        let clock = Arc::new(Clock::new());
        let mut e = engine(&clock, &base);
        e.store(&Store {
            expiry: clock.expiry(2),
            ..Store::set(b"short", b"1")
        });
        e.store(&Store::set(b"long", b"2"));
        clock.advance(Duration::from_secs(3));
        e.maintain(1000);
        assert_eq!(e.stats().crawler_reclaimed, 1);
        assert_eq!(e.stats().curr_items, 1);
        e.flush_all(Some(clock.now() + 2));
        assert!(e.get(b"long").is_some());
        clock.advance(Duration::from_secs(2));
        assert!(e.get(b"long").is_none());
        e.validate();
    });
}

/// When the index grows into memory that pages hold, whole pages are given
/// back; their items are evictions like any other (memcached's invariant
/// curr_items + evictions = total_items holds when nothing is deleted).
#[test]
fn pages_given_back_to_the_index_count_as_evictions() {
    // The capacity benchmark's fill: 1.5 M items of 14-byte keys and 10-byte
    // values into 64 MB; the index grows after memory is full.
    let clock = Arc::new(Clock::new());
    let mut e = Engine::new(Config::default(), clock).unwrap();
    for i in 0..1_500_000u32 {
        e.store(&Store::set(
            format!("key:{i:010}").as_bytes(),
            b"0123456789",
        ));
    }
    let s = e.stats();
    assert!(s.evictions > 0);
    assert_eq!(s.slab_reassign_evictions, 0);
    assert_eq!(s.curr_items + s.evictions, s.total_items);
}
