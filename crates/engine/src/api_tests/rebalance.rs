//! Rebalancing through the engine's public API: pages drain incrementally
//! (bounded work per `maintain`, invariants hold mid-move, stores and
//! deletes keep working), a move keeps the hot items of its page, `flush_all`
//! and `slabs reassign` meet a page in transit correctly, and SAS and mrc
//! move pages towards the class whose evicted keys come back (capacity
//! misses), for every eviction policy. The rules themselves are unit-tested in
//! `src/rebalance/*.rs`; the calcification measurements are in docs/cost.md.

use std::sync::Arc;
use std::time::Duration;

use crate::engine::ReassignOutcome;
use crate::rebalance::Tuning;
use crate::{Clock, Config, Engine, EvictionPolicy, RebalancePolicy, Store};

const EVICTIONS: [EvictionPolicy; 2] = [EvictionPolicy::Lru, EvictionPolicy::GdWheel];

fn engine(memory: usize, eviction: EvictionPolicy, rebalance: RebalancePolicy) -> Engine {
    let config = Config {
        memory_limit: memory,
        eviction,
        rebalance,
        rebalance_tuning: Tuning {
            sas_misses: 200,
            ..Tuning::default()
        },
        // The N-zone alone: these test the slab engine's page moves.
        zzone: false,
        ..Config::default()
    };
    Engine::new(config, Arc::new(Clock::new())).unwrap()
}

fn key(prefix: &str, i: u32) -> Vec<u8> {
    format!("{prefix}:{i:08}").into_bytes()
}

fn pages(e: &Engine, class_id: u32) -> u64 {
    e.slab_stats()
        .iter()
        .find(|s| s.id == class_id)
        .map_or(0, |s| s.total_pages)
}

/// The class id (1-based) holding the most items.
fn busiest(e: &Engine) -> u32 {
    e.slab_stats().iter().max_by_key(|s| s.number).unwrap().id
}

/// Fill class "small" (10-byte values) with `n` items.
fn fill_small(e: &mut Engine, n: u32) {
    for i in 0..n {
        e.store(&Store::set(&key("s", i), b"0123456789"));
    }
}

#[test]
fn a_page_drains_a_bounded_number_of_chunks_per_call() {
    for eviction in EVICTIONS {
        let mut e = engine(16 << 20, eviction, RebalancePolicy::Off);
        // 10-byte values: tens of thousands of items per page, memory full.
        fill_small(&mut e, 600_000);
        assert!(e.stats().evictions > 0);
        let src = busiest(&e);
        let class = src + 3;
        let before = pages(&e, src);
        assert!(before >= 4, "{before}");
        // A move through the rebalancer's path: start it, then drain.
        assert!(e.start_page_move(src as usize - 1, Some(class as usize - 1)));
        let (page, _, _, at) = e.page_in_transit().unwrap();
        assert_eq!(at, 0);
        let budget = 100;
        let mut calls = 0;
        let mut last = 0;
        while let Some((p, _, _, next)) = e.page_in_transit() {
            assert_eq!(p, page);
            // One maintain call (its budget) and one store (8 chunks) per
            // round: never the whole page at once.
            assert!(next <= last + budget as u32 + 8, "{last} -> {next}");
            last = next;
            e.maintain(budget);
            if calls % 32 == 0 {
                e.validate();
            }
            // Requests keep working mid-move: new items, deletes, reads.
            e.store(&Store::set(&key("mid", calls), b"0123456789"));
            e.delete(&key("s", 599_999 - calls), 0);
            assert!(e.get(&key("mid", calls)).is_some());
            calls += 1;
        }
        assert!(calls > 10, "{calls} maintain calls for a page");
        assert_eq!(pages(&e, src), before - 1);
        assert_eq!(pages(&e, class), 1);
        assert_eq!(e.stats().slabs_moved, 1);
        e.validate();
    }
}

/// A page that leaves a class whose other pages have room loses no item,
/// hot or cold: they all move to free chunks, as in memcached (no
/// `slab_reassign_evictions` while the class has memory).
#[test]
fn a_move_loses_nothing_while_its_class_has_room() {
    for eviction in EVICTIONS {
        let mut e = engine(64 << 20, eviction, RebalancePolicy::Off);
        let n = 300_000;
        fill_small(&mut e, n);
        assert_eq!(e.stats().evictions, 0);
        // Every other item goes: half of each page is free.
        for i in (0..n).step_by(2) {
            e.delete(&key("s", i), 0);
        }
        let src = busiest(&e);
        let before = pages(&e, src);
        assert!(before >= 3, "{before}");
        let items = e.stats().curr_items;
        assert_eq!(
            e.slabs_reassign(src as i32, src as i32 + 5),
            ReassignOutcome::Ok
        );
        e.validate();
        let s = e.stats();
        assert_eq!(pages(&e, src), before - 1);
        assert_eq!(
            (s.curr_items, s.slab_reassign_evictions),
            (items, 0),
            "{eviction:?}"
        );
        assert!(s.slab_reassign_rescues > 0);
        let missing = (1..n)
            .step_by(2)
            .filter(|&i| e.get(&key("s", i)).is_none())
            .count();
        assert_eq!(missing, 0, "{eviction:?}");
    }
}

#[test]
fn hot_items_survive_their_page_moving() {
    for eviction in EVICTIONS {
        let mut e = engine(8 << 20, eviction, RebalancePolicy::Off);
        let n = 400_000;
        fill_small(&mut e, n);
        let items = e.stats().curr_items as u32;
        let first = n - items;
        // Read every 10th live item: those are hot.
        let hot: Vec<u32> = (first..n).step_by(10).collect();
        for &i in &hot {
            assert!(e.get(&key("s", i)).is_some());
        }
        let src = busiest(&e);
        let per_page = e
            .slab_stats()
            .iter()
            .find(|s| s.id == src)
            .unwrap()
            .chunks_per_page;
        assert_eq!(
            e.slabs_reassign(src as i32, src as i32 + 5),
            ReassignOutcome::Ok
        );
        e.validate();
        // The class lost a page's worth of items, none of them hot: the
        // page's hot items moved over colder ones.
        let lost = items as u64 - e.stats().curr_items;
        assert!(lost <= per_page as u64, "{lost} > {per_page}");
        assert!(lost >= per_page as u64 * 8 / 10, "{lost}");
        let missing = hot
            .iter()
            .filter(|&&i| e.get(&key("s", i)).is_none())
            .count();
        assert_eq!(missing, 0, "{missing} hot items lost ({eviction:?})");
        assert!(e.stats().slab_reassign_rescues > 0);
    }
}

#[test]
fn flush_during_a_move_finishes_it() {
    let mut e = engine(16 << 20, EvictionPolicy::Lru, RebalancePolicy::Off);
    fill_small(&mut e, 200_000);
    let src = busiest(&e);
    let before = pages(&e, src);
    assert!(e.start_page_move(src as usize - 1, Some(src as usize + 3)));
    e.maintain(10);
    assert!(e.page_in_transit().is_some());
    // Another move is refused while one runs, as memcached's BUSY.
    assert_eq!(
        e.slabs_reassign(src as i32, src as i32 + 1),
        ReassignOutcome::Busy
    );
    e.flush_all(None);
    assert!(e.page_in_transit().is_none());
    assert_eq!(pages(&e, src), before - 1);
    assert_eq!(pages(&e, src + 4), 1);
    e.validate();
    fill_small(&mut e, 1000);
    e.validate();
    assert_eq!(e.stats().curr_items, 1000);
}

/// Class "big" (2000-byte values) is filled first and then never read;
/// class "small" then cycles over more keys than its memory holds, so its
/// evicted keys come back: capacity misses. SAS must move pages from big to
/// small; without rebalancing the hit ratio stays lower.
fn capacity_miss_scenario(eviction: EvictionPolicy, rebalance: RebalancePolicy) -> (f64, u64) {
    let clock = Arc::new(Clock::new());
    let config = Config {
        memory_limit: 16 << 20,
        eviction,
        rebalance,
        slab_automove: 2,
        rebalance_tuning: Tuning {
            sas_misses: 500,
            ..Tuning::default()
        },
        // The N-zone alone (its capacity misses).
        zzone: false,
        ..Config::default()
    };
    let mut e = Engine::new(config, clock.clone()).unwrap();
    let big = vec![7u8; 2000];
    for i in 0..6000 {
        e.store(&Store::set(&key("b", i), &big));
    }
    let value = [5u8; 40];
    let keys = 120_000u32;
    let (mut hits, mut gets) = (0u64, 0u64);
    let mut x = 12345u64;
    for round in 0..40u32 {
        for _ in 0..20_000 {
            // A skewed choice: half of the requests go to a tenth of the keys.
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let k = if x & 1 == 0 {
                (x >> 8) as u32 % (keys / 10)
            } else {
                (x >> 8) as u32 % keys
            };
            let kk = key("s", k);
            gets += 1;
            if e.get(&kk).is_some() {
                if round >= 30 {
                    hits += 1;
                }
            } else {
                e.store(&Store::set(&kk, &value));
            }
        }
        if round == 29 {
            gets = 20_000 * 30;
        }
        clock.advance(Duration::from_secs(1));
        for _ in 0..50 {
            e.maintain(512);
        }
        e.validate();
    }
    let measured = gets - 20_000 * 30;
    (hits as f64 / measured as f64, e.stats().slabs_moved)
}

#[test]
fn sas_and_mrc_move_pages_towards_capacity_misses() {
    for eviction in EVICTIONS {
        let (off, moved_off) = capacity_miss_scenario(eviction, RebalancePolicy::Off);
        assert_eq!(moved_off, 0);
        for rule in [RebalancePolicy::Sas, RebalancePolicy::Mrc] {
            let (hit, moved) = capacity_miss_scenario(eviction, rule);
            assert!(moved >= 3, "{eviction:?} {rule:?}: {moved} pages moved");
            assert!(
                hit > off + 0.03,
                "{eviction:?}: hit ratio {hit:.3} with {rule:?}, {off:.3} without"
            );
        }
    }
}

#[test]
fn capacity_misses_are_counted_per_class_and_ghost_memory_in_the_budget() {
    let mut e = engine(4 << 20, EvictionPolicy::Lru, RebalancePolicy::Sas);
    let s = e.stats();
    assert!(s.rebalance_bytes >= 64 << 10, "{}", s.rebalance_bytes);
    fill_small(&mut e, 200_000);
    let evicted = e.stats().evictions as u32;
    assert!(evicted > 1000);
    // Without reads CLOCK evicts in write order: keys 0..evicted are gone.
    // Missing the last ones evicted is a capacity miss of their class; a
    // key never stored is not.
    let class = busiest(&e);
    for i in evicted - 100..evicted {
        assert!(e.get(&key("s", i)).is_none());
        e.store(&Store {
            cost: Some(10),
            ..Store::set(&key("s", i), b"0123456789")
        });
    }
    assert!(e.get(b"never-stored").is_none());
    let st = e.slab_stats();
    let c = st.iter().find(|s| s.id == class).unwrap();
    assert_eq!(c.capacity_misses, 100);
    assert_eq!(c.cost_capacity_misses, 1000);
    assert_eq!(e.stats().capacity_misses, 100);
    e.validate();
    // memory: pages + index + eviction structures + ghost within -m.
    let s = e.stats();
    assert!(s.total_malloced + s.hash_bytes + s.eviction_bytes + s.rebalance_bytes <= 4 << 20);
}
