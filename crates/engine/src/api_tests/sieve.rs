//! SIEVE (`-o eviction=sieve`) against a reference implementation.
//!
//! The reference is SIEVE as the NSDI'24 paper writes it (section 3.1,
//! Algorithm 1), kept as plain as possible so that a disagreement is the
//! engine's fault: a Vec from the oldest object to the newest with a visited
//! flag each, and a hand index. A hit sets the flag; an insert appends with
//! the flag clear; an eviction starts at the hand, clears flags until it
//! finds an object without one (wrapping from the newest to the oldest),
//! removes it and leaves the hand on the next newer object.
//!
//! The engine runs with one slab class of one page (every item the same
//! class, a memory limit with room for one page), so its capacity in items
//! is the page's chunk count and every eviction is a SIEVE decision. Its
//! stores follow the engine's order: when the class is full, evict first
//! (never the item being replaced: the hand passes over it and leaves its
//! flag), then drop the old item, then link the new one as the newest,
//! visited if it replaced one (an overwrite is an access).

use crate::engine::Lookup;
use crate::{DeleteOutcome, EvictionPolicy, Store, StoreOutcome};
use proptest::prelude::*;

use super::one_page;
use one_page::{FULL_LEN, VALUE_LEN};

/// Odd keys fill their chunk, even ones leave room (same class): both
/// places of the links are exercised.
fn value_of(k: u32, full: &[u8]) -> &[u8] {
    if k % 2 == 1 {
        full
    } else {
        &full[..VALUE_LEN]
    }
}

fn key(k: u32) -> Vec<u8> {
    format!("key:{k:06}").into_bytes()
}

/// SIEVE, Algorithm 1.
struct Model {
    cap: usize,
    /// Oldest first: (key, visited).
    queue: Vec<(u32, bool)>,
    /// Index of the next object the hand looks at (queue.len() = wrap).
    hand: usize,
}

impl Model {
    fn new(cap: usize) -> Model {
        Model {
            cap,
            queue: Vec::new(),
            hand: 0,
        }
    }

    fn find(&self, k: u32) -> Option<usize> {
        self.queue.iter().position(|&(x, _)| x == k)
    }

    fn contains(&self, k: u32) -> bool {
        self.find(k).is_some()
    }

    fn hit(&mut self, k: u32) {
        if let Some(i) = self.find(k) {
            self.queue[i].1 = true;
        }
    }

    fn remove(&mut self, k: u32) -> bool {
        let Some(i) = self.find(k) else {
            return false;
        };
        self.queue.remove(i);
        // The hand keeps pointing at the same object (or, if it was on the
        // removed one, at the next newer one).
        if i < self.hand {
            self.hand -= 1;
        }
        true
    }

    /// Evict one object, never `keep`.
    fn evict(&mut self, keep: u32) -> u32 {
        loop {
            if self.hand >= self.queue.len() {
                self.hand = 0;
            }
            let (k, visited) = self.queue[self.hand];
            if k == keep {
                self.hand += 1;
            } else if visited {
                self.queue[self.hand].1 = false;
                self.hand += 1;
            } else {
                self.queue.remove(self.hand);
                return k;
            }
        }
    }

    /// A store the engine's way; returns the victim. Overwriting a cached
    /// key is an access: the new item starts visited.
    fn store(&mut self, k: u32) -> Option<u32> {
        let victim = (self.queue.len() == self.cap).then(|| self.evict(k));
        let was_cached = self.remove(k);
        self.queue.push((k, was_cached));
        victim
    }
}

#[derive(Clone, Copy, Debug)]
enum Op {
    /// Look-aside read: GET, and on a miss SET.
    Get(u32),
    /// SET whether present or not.
    Set(u32),
    Delete(u32),
}

/// Run `ops` through the engine and the model: they must agree on every
/// hit, miss and victim. Returns the misses.
fn run(ops: &[Op], keys: u32) -> u64 {
    let (mut e, cap) = one_page::one_page(EvictionPolicy::Sieve);
    let mut m = Model::new(cap);
    let full = vec![b'v'; FULL_LEN];
    let mut misses = 0;
    for (i, &op) in ops.iter().enumerate() {
        let evictions = e.stats().evictions;
        let mut victim = None;
        match op {
            Op::Get(k) => {
                let hit = e.get(&key(k)).is_some();
                assert_eq!(hit, m.contains(k), "op {i}: get {k}");
                if hit {
                    m.hit(k);
                } else {
                    misses += 1;
                    let stored = e.store(&Store::set(&key(k), value_of(k, &full)));
                    assert!(matches!(stored, StoreOutcome::Stored { .. }));
                    victim = m.store(k);
                }
            }
            Op::Set(k) => {
                let stored = e.store(&Store::set(&key(k), value_of(k, &full)));
                assert!(matches!(stored, StoreOutcome::Stored { .. }));
                victim = m.store(k);
            }
            Op::Delete(k) => {
                let deleted = e.delete(&key(k), 0) == DeleteOutcome::Deleted;
                assert_eq!(deleted, m.remove(k), "op {i}: delete {k}");
            }
        }
        let evicted = e.stats().evictions - evictions;
        assert_eq!(evicted, victim.is_some() as u64, "op {i}: evictions");
        if let Some(k) = victim {
            assert!(
                e.lookup(&key(k), Lookup::PEEK).is_none(),
                "op {i}: SIEVE evicts {k}, the engine kept it"
            );
        }
        if i % 97 == 0 || i + 1 == ops.len() {
            for k in 0..keys {
                assert_eq!(
                    e.lookup(&key(k), Lookup::PEEK).is_some(),
                    m.contains(k),
                    "op {i}: key {k} present"
                );
            }
            e.validate();
        }
    }
    assert_eq!(e.stats().curr_items, m.queue.len() as u64);
    misses
}

/// Skewed key choice: squares of uniforms favour small keys.
fn ops_strategy(keys: u32, len: usize) -> impl Strategy<Value = Vec<Op>> {
    let k = (0.0f64..1.0).prop_map(move |u| ((u * u) * keys as f64) as u32);
    proptest::collection::vec(
        prop_oneof![
            20 => k.clone().prop_map(Op::Get),
            1 => k.clone().prop_map(Op::Set),
            1 => k.prop_map(Op::Delete),
        ],
        len,
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// The engine evicts exactly what SIEVE evicts.
    #[test]
    fn sieve_evicts_what_the_paper_evicts(ops in ops_strategy(700, 2500)) {
        run(&ops, 700);
    }
}

/// Hot keys read twice a round (so visited) and a scan of new keys, a
/// quarter of the capacity, between rounds: the hand clears the hot keys'
/// flags at most once a round and evicts the scan's keys, so after the
/// first round no hot key misses.
#[test]
fn scans_do_not_flush_the_hot_set() {
    let (mut e, cap) = one_page::one_page(EvictionPolicy::Sieve);
    let hot = (cap / 2) as u32;
    let full = vec![b'v'; FULL_LEN];
    let mut hot_misses = 0;
    let mut next_cold = 1_000_000u32;
    for round in 0..20 {
        for _ in 0..2 {
            for k in 0..hot {
                if e.get(&key(k)).is_none() {
                    if round > 0 {
                        hot_misses += 1;
                    }
                    e.store(&Store::set(&key(k), value_of(k, &full)));
                }
            }
        }
        for _ in 0..cap / 4 {
            let k = next_cold;
            next_cold += 1;
            assert!(e.get(&key(k)).is_none());
            e.store(&Store::set(&key(k), value_of(k, &full)));
        }
    }
    e.validate();
    assert_eq!(hot_misses, 0, "hot keys evicted by scans");
    assert!(e.stats().evictions > 0, "the scans filled the page");
}
