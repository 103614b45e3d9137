//! Property tests: the engine against its reference model
//! (`crate::testing`, shared with the operation fuzzer in
//! crates/engine/fuzz).
//!
//! With a memory limit far above what the operations store nothing is
//! evicted, so every reply and every read must agree exactly (page moves may
//! still evict, and the model allows exactly what the engine counts);
//! `validate()` checks the engine's internal invariants after each step.
//! Every test runs with each eviction policy (and with learned costs), see
//! `POLICIES`.

use std::sync::Arc;
use std::time::Duration;

use crate::engine::Lookup;
use crate::testing::{self, CasArg, Op};
use crate::{
    ArithOutcome, Clock, Config, Engine, EvictionPolicy, RebalancePolicy, Store, StoreMode,
    StoreOutcome,
};
use proptest::prelude::*;

fn cas() -> impl Strategy<Value = CasArg> {
    prop_oneof![Just(CasArg::None), Just(CasArg::Last), Just(CasArg::Wrong)]
}

fn ttl() -> impl Strategy<Value = i64> {
    prop_oneof![Just(0i64), 1i64..5, Just(-1i64)]
}

fn op() -> impl Strategy<Value = Op> {
    let key = 0u8..24;
    let mode = prop_oneof![
        Just(StoreMode::Set),
        Just(StoreMode::Add),
        Just(StoreMode::Replace),
        Just(StoreMode::Append),
        Just(StoreMode::Prepend),
    ];
    prop_oneof![
        4 => (mode, key.clone(), 0usize..300, prop_oneof![Just(0u32), any::<u32>()], ttl(), cas(), proptest::option::of(1u32..100_000))
            .prop_map(|(mode, key, len, flags, ttl, cas, cost)| Op::Store { mode, key, len, flags, ttl, cas, cost }),
        4 => (key.clone(), any::<bool>()).prop_map(|(key, bump)| Op::Get { key, bump }),
        1 => (key.clone(), cas()).prop_map(|(key, cas)| Op::Delete { key, cas }),
        1 => (key.clone(), any::<bool>(), prop_oneof![0u64..10, Just(u64::MAX)], cas(), proptest::option::of(any::<u64>()))
            .prop_map(|(key, incr, delta, cas, vivify)| Op::Arith { key, incr, delta, cas, vivify }),
        1 => (key.clone(), ttl()).prop_map(|(key, ttl)| Op::Touch { key, ttl }),
        1 => (0u64..3).prop_map(|secs| Op::Advance { secs }),
        1 => proptest::option::of(0u32..4).prop_map(|delay| Op::Flush { delay }),
        1 => (1usize..1000).prop_map(|budget| Op::Maintain { budget }),
    ]
}

/// (eviction, learn_costs, rebalance, repartition): the engine must behave the same
/// under each. Without a rebalancer that samples or counts keys, plain
/// SETs go without the engine lock (`Cache::store`, in place or into
/// reserved chunks).
/// The last flag turns Cavast's re-partitioning within pages on.
const POLICIES: [(EvictionPolicy, bool, RebalancePolicy, bool, bool); 6] = [
    (
        EvictionPolicy::Lru,
        false,
        RebalancePolicy::Off,
        false,
        false,
    ),
    (
        EvictionPolicy::Lru,
        false,
        RebalancePolicy::Sas,
        false,
        true,
    ),
    (
        EvictionPolicy::Lru,
        false,
        RebalancePolicy::Mrc,
        true,
        false,
    ),
    (
        EvictionPolicy::GdWheel,
        false,
        RebalancePolicy::CostPerByte,
        false,
        true,
    ),
    (
        EvictionPolicy::GdWheelLazy,
        true,
        RebalancePolicy::Mrc,
        false,
        false,
    ),
    (
        EvictionPolicy::Sieve,
        true,
        RebalancePolicy::Sas,
        false,
        true,
    ),
];

/// Run `test` once per policy with a default config using it.
fn each_policy(test: impl Fn(Config)) {
    for (eviction, learn_costs, rebalance, repartition, zzone) in POLICIES {
        test(Config {
            eviction,
            learn_costs,
            rebalance,
            repartition,
            zzone,
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

/// An 8 MB engine without a Z-zone: page counts of the N-zone alone (the
/// Z-zone would hold half of `-m`).
fn small_n_zone(base: &Config) -> Engine {
    let config = Config {
        memory_limit: 8 << 20,
        zzone: false,
        ..base.clone()
    };
    Engine::new(config, Arc::new(Clock::new())).unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]
    #[test]
    fn engine_matches_model(ops in proptest::collection::vec(op(), 1..300)) {
        each_policy(|base| {
            testing::run(&ops, Config { memory_limit: 64 << 20, ..base });
        });
    }
}

/// Operations over more keys and larger values (of two slab classes), for
/// a memory small enough that items leave it for the flash tier: about
/// 15 items go to flash in a case, and some 70 GETs of the 48 cases are
/// served from there (counted when this test was written).
fn flash_op() -> impl Strategy<Value = Op> {
    let key = 0u8..128;
    prop_oneof![
        6 => (key.clone(), 30_000usize..40_000, any::<u32>(), ttl(), cas())
            .prop_map(|(key, len, flags, ttl, cas)| Op::Store { mode: StoreMode::Set, key, len, flags, ttl, cas, cost: None }),
        1 => (key.clone(), 30_000usize..40_000, ttl(), cas())
            .prop_map(|(key, len, ttl, cas)| Op::Store { mode: StoreMode::Add, key, len, flags: 0, ttl, cas, cost: None }),
        6 => (key.clone(), any::<bool>()).prop_map(|(key, bump)| Op::Get { key, bump }),
        1 => (key.clone(), cas()).prop_map(|(key, cas)| Op::Delete { key, cas }),
        1 => (key, ttl()).prop_map(|(key, ttl)| Op::Touch { key, ttl }),
        1 => (0u64..3).prop_map(|secs| Op::Advance { secs }),
        1 => proptest::option::of(0u32..4).prop_map(|delay| Op::Flush { delay }),
        3 => (1usize..1000).prop_map(|budget| Op::Maintain { budget }),
    ]
}

/// A flash file for one test case, removed after it.
struct FlashFile(std::path::PathBuf);

impl FlashFile {
    fn new() -> FlashFile {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let name = format!("cachalot-model-flash-{}-{n}", std::process::id());
        FlashFile(std::env::temp_dir().join(name))
    }
}

impl Drop for FlashFile {
    fn drop(&mut self) {
        for suffix in ["", ".index", ".journal"] {
            let mut p = self.0.clone().into_os_string();
            p.push(suffix);
            let _ = std::fs::remove_file(p);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]
    /// With the flash tier under a small memory: a GET that answers gives
    /// the latest bytes, flags, CAS and expiry, whether memory or flash
    /// has the item (never a stale or damaged copy); a key deleted,
    /// overwritten or flushed never comes back from flash; `validate()`
    /// checks both tiers after every step. With and without the Z-zone
    /// between them.
    #[test]
    fn engine_with_flash_matches_model(ops in proptest::collection::vec(flash_op(), 1..800)) {
        for zzone in [false, true] {
            let file = FlashFile::new();
            let mut flash = crate::flash::FlashConfig::new(file.0.clone(), 8 << 20);
            flash.stage_bytes = 256 << 10;
            testing::run(&ops, Config {
                memory_limit: 3 << 20,
                zzone,
                flash: Some(flash),
                ..Config::default()
            });
        }
    }
}

/// The harness stores as the server does: new keys go into chunks
/// reserved for the thread, without the engine lock, but the first of each
/// class after a flush (which takes reserved chunks back): so the model
/// checks that path too.
#[test]
fn the_harness_stores_new_keys_without_the_engine_lock() {
    let mut ops = Vec::new();
    for _ in 0..4 {
        ops.extend((0..24).map(|key| Op::Store {
            mode: StoreMode::Set,
            key,
            len: 40,
            flags: 0,
            ttl: 0,
            cas: CasArg::None,
            cost: None,
        }));
        ops.push(Op::Flush { delay: None });
    }
    let config = Config {
        memory_limit: 64 << 20,
        rebalance: RebalancePolicy::Off,
        // New keys skip the engine lock only without a Z-zone.
        zzone: false,
        ..Config::default()
    };
    // Of 96 stores, all but the first of each class in each round: the
    // values put even keys, odd keys and key 15 (a 250-byte key) in three
    // classes, and the flush takes the reserved chunks back.
    let h = testing::run(&ops, config.clone());
    assert_eq!(h.unlocked_stores, 4 * (24 - 3));
    let h = testing::run(
        &ops,
        Config {
            lockfree_inserts: false,
            ..config
        },
    );
    assert_eq!(h.unlocked_stores, 0);
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
        // The last 10% written are all still there (2% with a Z-zone: the
        // N-zone has half the memory, and the Z-zone's sweep evicts by
        // reads, not age).
        let recent = if base.zzone { n / 50 } else { n / 10 };
        for i in (n - recent)..n {
            let key = format!("key:{i:010}");
            assert!(e.get(key.as_bytes()).is_some(), "recent {key} evicted");
        }
        // The first ones are gone (not so with a Z-zone, whose sweep evicts
        // the unread items of a block whatever their age), and every lost
        // item counts as an eviction (including those on pages given back
        // as the index grew).
        if !base.zzone {
            assert!(e.get(b"key:0000000000").is_none());
        }
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
fn a_store_over_the_limit_by_less_than_a_page_evicts_no_page_at_once() {
    each_policy(|base| {
        let mut e = small_n_zone(&base);
        // The index grows as the keys come, past `-m` by a few bytes now
        // and then: a page then drains a few chunks per store, not all of
        // its thousands of items in one store.
        let mut most = 0;
        for i in 0..300_000u32 {
            let before = e.stats().evictions;
            e.store(&Store::set(format!("k{i}").as_bytes(), b"v"));
            most = most.max(e.stats().evictions - before);
            if i % 50_000 == 0 {
                e.validate();
            }
        }
        let s = e.stats();
        assert!(s.evictions > 100_000, "the cache filled: {}", s.evictions);
        assert!(most <= 64, "a store evicted {most} items at once");
        assert_eq!(s.curr_items + s.evictions, s.total_items);
        e.validate();
    });
}

#[test]
fn slabs_reassign_moves_a_page_and_keeps_items_consistent() {
    each_policy(|base| {
        use crate::engine::ReassignOutcome;
        let mut e = small_n_zone(&base);
        for i in 0..200_000u32 {
            e.store(&Store::set(format!("k{i}").as_bytes(), b"v"));
            if i % 3 == 0 {
                e.get(format!("k{i}").as_bytes());
            }
        }
        // Also finishes a page draining because the index grew a little
        // over `-m` (the engine's own housekeeping, never BUSY).
        assert_eq!(e.slabs_reassign(1, 1), ReassignOutcome::Same);
        let before = e.slab_stats();
        let src = before.iter().max_by_key(|s| s.total_pages).unwrap().id as i32;
        assert_eq!(e.slabs_reassign(src, src), ReassignOutcome::Same);
        assert_eq!(e.slabs_reassign(src, src + 3), ReassignOutcome::Ok);
        e.validate();
        let after = e.slab_stats();
        let pages = |v: &[crate::SlabClassStats], id: i32| {
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

/// A delayed flush that came due is not cancelled by a later `flush_all`
/// with a delay, even if nothing looked at the cache in between (found by
/// the model: the second flush used to replace the first).
#[test]
fn a_due_delayed_flush_survives_a_new_delay() {
    each_policy(|base| {
        let clock = Arc::new(Clock::new());
        let mut e = engine(&clock, &base);
        e.store(&Store::set(b"k", b"v"));
        e.flush_all(Some(clock.now() + 1));
        clock.advance(Duration::from_secs(1));
        e.flush_all(Some(clock.now() + 1));
        assert!(e.get(b"k").is_none(), "flushed item came back");
        e.validate();
    });
}

/// When the index grows into memory that pages hold, whole pages are given
/// back; their items are evictions like any other (memcached's invariant
/// curr_items + evictions = total_items holds when nothing is deleted).
#[test]
fn pages_given_back_to_the_index_count_as_evictions() {
    // The capacity benchmark's fill: 1.5 M items of 14-byte keys and 10-byte
    // values into 64 MB; the index grows after memory is full. (Without
    // the Z-zone: compressed, these items all fit.)
    let clock = Arc::new(Clock::new());
    let config = Config {
        zzone: false,
        ..Config::default()
    };
    let mut e = Engine::new(config, clock).unwrap();
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

/// An item lost to a page move, then vivified by a decrement whose result
/// reads the same as decrementing the lost item would (0): the model must
/// tell them apart by the stored bytes (no padding), not by the number
/// (found by the engine_ops fuzzer).
#[test]
fn vivified_after_eviction_is_not_the_lost_item() {
    let config = Config {
        memory_limit: 2 << 20,
        item_size_max: 64 << 10,
        ..Config::default()
    };
    let decr = |delta, vivify| Op::Arith {
        key: 9,
        incr: false,
        delta,
        cas: CasArg::None,
        vivify: Some(vivify),
    };
    testing::run(
        &[
            decr(1 << 63, 69_514_384_078_653_897),
            // A second class needs a page: the only one moves, evicting key 9.
            Op::Store {
                mode: StoreMode::Set,
                key: 0,
                len: 0,
                flags: 0,
                ttl: 1,
                cas: CasArg::None,
                cost: Some(2),
            },
            decr(u64::MAX, 0),
        ],
        config,
    );
}

/// A page drain that evicts a victim on the page itself to make room for a
/// hot item, then runs out of budget: the victim's chunk, ahead of the
/// cursor, is freed rather than left neither live nor free (found by the
/// engine_ops fuzzer through `validate()`).
#[test]
fn drain_victim_on_the_draining_page_is_freed() {
    let config = Config {
        memory_limit: 4 << 20,
        evict: false,
        eviction: EvictionPolicy::GdWheel,
        rebalance: RebalancePolicy::Mrc,
        rebalance_tuning: crate::rebalance::Tuning {
            mrc_period: 1,
            ..Default::default()
        },
        ..Config::default()
    };
    let set = |key, len, ttl, cost| Op::Store {
        mode: StoreMode::Set,
        key,
        len,
        flags: 0,
        ttl,
        cas: CasArg::None,
        cost,
    };
    testing::run(
        &[
            set(10, 0, 0, Some(100)),
            set(31, 2048, -1, None),
            set(13, 2048, 1, Some(1)),
            set(0, 0, 4, Some(65535)),
            Op::Get {
                key: 13,
                bump: true,
            },
            set(13, 2048, -1, Some(65535)),
            Op::Get {
                key: 13,
                bump: true,
            },
            // The rule moves the small items' page: its hot item needs a
            // chunk, the class's victim is on the page, the budget is 1.
            Op::Maintain { budget: 1 },
            Op::Maintain { budget: 1000 },
        ],
        config,
    );
}

/// incr/decr with a stale CAS on an empty or a chained value: memcached's
/// `do_add_delta` answers "non-numeric" before it compares the CAS
/// (checked against memcached 1.6.18: `ma k C999` on an empty value). The
/// engine compared the CAS first for empty values; the model did for both
/// (found by the engine_ops fuzzer).
#[test]
fn arith_refuses_empty_and_chained_values_before_the_cas() {
    let set = |key, len| Op::Store {
        mode: StoreMode::Set,
        key,
        len,
        flags: 1,
        ttl: 0,
        cas: CasArg::None,
        cost: None,
    };
    let decr = |key| Op::Arith {
        key,
        incr: false,
        delta: 1,
        cas: CasArg::Wrong,
        vivify: None,
    };
    // Key 3: empty (odd keys hold letters); key 25: 600,000 bytes, over
    // the 512 KB chunk limit.
    testing::run(
        &[set(3, 0), decr(3), set(25, 600_000), decr(25)],
        Config {
            memory_limit: 8 << 20,
            ..Config::default()
        },
    );
    let clock = Arc::new(Clock::new());
    let mut e = engine(&clock, &Config::default());
    let cas = match e.store(&Store::set(b"k", b"")) {
        StoreOutcome::Stored { cas } => cas,
        other => panic!("{other:?}"),
    };
    let arith = |cas| crate::engine::Arith {
        incr: true,
        delta: 1,
        cas,
        autovivify: None,
        new_expiry: None,
    };
    assert_eq!(e.arith(b"k", &arith(cas + 1)), ArithOutcome::NonNumeric);
    assert_eq!(e.arith(b"k", &arith(cas)), ArithOutcome::NonNumeric);
}

/// Like `vivified_after_eviction_is_not_the_lost_item`, but the bytes agree
/// too ("1" + 2^64-1 wraps to "0"): the flags tell them apart.
#[test]
fn vivified_item_has_no_flags_of_the_lost_one() {
    let set = |key, len, flags| Op::Store {
        mode: StoreMode::Set,
        key,
        len,
        flags,
        ttl: 0,
        cas: CasArg::None,
        cost: Some(1),
    };
    testing::run(
        &[
            set(0, 0, 1),
            // A second class needs a page: the only one moves, evicting key 0.
            set(31, 2048, 0),
            Op::Advance { secs: 3 },
            Op::Arith {
                key: 0,
                incr: true,
                delta: u64::MAX,
                cas: CasArg::None,
                vivify: Some(0),
            },
        ],
        Config {
            memory_limit: 2 << 20,
            item_size_max: 64 << 10,
            slab_automove: 2,
            eviction: EvictionPolicy::GdWheel,
            rebalance: RebalancePolicy::CostPerByte,
            ..Config::default()
        },
    );
}

/// Under GD-Wheel a class's first item allocates its wheels (about 145 KB),
/// memory counted in `-m`: a new page for a class without wheels must leave
/// room for them, or the engine ends up over its limit (found by the
/// engine_ops fuzzer through validate(); its sequence).
#[test]
fn a_new_class_page_leaves_room_for_its_wheels() {
    let store = |mode, key, len, flags, ttl, cost| Op::Store {
        mode,
        key,
        len,
        flags,
        ttl,
        cas: CasArg::None,
        cost: Some(cost),
    };
    use StoreMode::{Append, Set};
    testing::run(
        &[
            store(Set, 28, 195, u32::MAX, 0, 65_535),
            store(Set, 1, 33, 1, 3, 100),
            store(Append, 1, 33, 1, 3, 100),
            store(Append, 1, 33, 1, 3, 65_535),
            Op::Arith {
                key: 26,
                incr: true,
                delta: u64::MAX,
                cas: CasArg::None,
                vivify: Some(7_782_220_156_079_500_799),
            },
            Op::Flush { delay: None },
            store(Set, 0, 84, 0, 2_592_001, 1),
            store(Set, 26, 48, 0, 1_000_000_000, 65_535),
            store(Set, 31, 2048, u32::MAX, -1, 65_535),
        ],
        Config {
            memory_limit: 8 << 20,
            item_size_max: 64 << 10,
            evict: false,
            eviction: EvictionPolicy::GdWheel,
            rebalance: RebalancePolicy::Sas,
            learn_costs: true,
            // The fuzzer's small tables, so the seventh page fits but not
            // its class's wheels.
            rebalance_tuning: crate::rebalance::Tuning {
                sas_misses: 1,
                ghost_pages: 1,
                ghost_bytes: 4 << 10,
                mrc_period: 1,
                mrc_bytes: 16 << 10,
                ..Default::default()
            },
            ..Config::default()
        },
    );
}

/// Found by `engine_ops`: GD-Wheel's side array for a page, allocated when an
/// item first fills its chunk, must stay inside `-m` (validate: "memory
/// budget").
#[test]
fn side_arrays_stay_inside_the_memory_limit() {
    testing::fuzz_ops(&[
        81, 10, 41, 73, 0, 0, 255, 255, 0, 0, 0, 0, 101, 121, 58, 48, 57, 0, 0, 0, 0, 0, 0, 0, 0,
        1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 255, 1, 0, 0, 0,
    ]);
}

/// Found by `engine_ops`: a chained item under GD-Wheel and cost-per-byte
/// rebalancing must not vanish without an eviction counted.
#[test]
fn chained_item_is_not_lost_uncounted() {
    testing::fuzz_ops(&[
        239, 150, 121, 58, 48, 255, 255, 61, 60, 48, 204, 34, 255, 41, 0, 0, 204, 57, 246, 246,
        255, 255, 108, 204, 91, 204, 110, 204, 34, 0, 0, 0, 0, 0, 37, 101, 121, 255, 108, 204, 91,
        204, 0, 0, 0, 204, 252, 0, 6, 11, 0, 0, 4, 252, 252, 249, 255, 41, 0, 0, 205, 252, 0, 246,
        246, 246, 51, 51, 136, 0, 204, 204, 204, 204, 132, 204, 8, 204, 34, 0, 34, 204, 0, 0, 204,
        204, 204, 204, 204, 132, 208, 204, 204, 204, 37, 37, 37, 37,
    ]);
}

/// A stored key, or a multi-get (keys, and how many of them the caller
/// takes before stopping the batch).
#[derive(Clone, Debug)]
enum BatchOp {
    Set { key: u16, len: usize },
    Gets { keys: Vec<u16>, stop: usize },
}

fn batch_op() -> impl Strategy<Value = BatchOp> {
    prop_oneof![
        3 => (0u16..600, 30_000usize..40_000).prop_map(|(key, len)| BatchOp::Set { key, len }),
        1 => (proptest::collection::vec(0u16..700, 0..40), 0usize..45)
            .prop_map(|(keys, stop)| BatchOp::Gets { keys, stop }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]
    /// `lookup_batch` (prefetching multi-get) is `lookup` of each key in
    /// order: same items, and the same engine afterwards (hits, access
    /// bits, eviction order, rebalancer samples), also when the caller stops
    /// the batch early. Two engines get the same operations; one answers
    /// multi-gets with lookup_batch, the other key by key. Small memory, so
    /// keys are also evicted and missed. Without learned costs: they come
    /// from the wall clock, which the two engines do not read at the same
    /// instants.
    #[test]
    fn lookup_batch_is_lookup_in_order(ops in proptest::collection::vec(batch_op(), 1..400)) {
        each_policy(|base| {
            let clock = Arc::new(Clock::new());
            let config = Config { memory_limit: 2 << 20, learn_costs: false, ..base };
            let mut batched = Engine::new(config.clone(), clock.clone()).unwrap();
            let mut single = Engine::new(config, clock.clone()).unwrap();
            for op in &ops {
                match op {
                    BatchOp::Set { key, len } => {
                        let k = format!("key:{key}");
                        let v = vec![*key as u8; *len];
                        for e in [&mut batched, &mut single] {
                            e.store(&Store::set(k.as_bytes(), &v));
                        }
                    }
                    BatchOp::Gets { keys, stop } => {
                        let names: Vec<String> = keys.iter().map(|k| format!("key:{k}")).collect();
                        let keys: Vec<&[u8]> = names.iter().map(|k| k.as_bytes()).collect();
                        let mut got = Vec::new();
                        batched.lookup_batch(&keys, Lookup::GET, |i, key, _, item| {
                            assert_eq!(key, keys[i]);
                            got.push(item.map(|it| (it.cas, it.value.to_vec())));
                            if got.len() >= *stop {
                                std::ops::ControlFlow::Break(())
                            } else {
                                std::ops::ControlFlow::Continue(())
                            }
                        });
                        let taken = (*stop).clamp(1, keys.len().max(1)).min(keys.len());
                        assert_eq!(got.len(), taken, "stopped after the key that said so");
                        for (key, g) in keys.iter().zip(&got) {
                            let want = single.lookup(key, Lookup::GET).map(|it| (it.cas, it.value.to_vec()));
                            assert_eq!(g, &want, "{:?}", String::from_utf8_lossy(key));
                        }
                    }
                }
                batched.validate();
            }
            assert_eq!(format!("{:?}", batched.stats()), format!("{:?}", single.stats()));
            assert_eq!(format!("{:?}", batched.slab_stats()), format!("{:?}", single.slab_stats()));
        });
    }
}
