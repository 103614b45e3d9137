//! A one-page engine for the eviction policies' victim-by-victim tests
//! (`gdwheel.rs`, `sieve.rs`).

use std::sync::Arc;

use crate::{Clock, Config, DeleteOutcome, Engine, EvictionPolicy, Store, StoreOutcome};

/// Values this long put ~250 items in a 1 MB page.
pub const VALUE_LEN: usize = 4000;
/// With a 10-byte key and the 16-byte header, this fills a 4128-byte chunk
/// exactly: GD-Wheel's trailers and SIEVE's queue links then live in side
/// arrays.
pub const FULL_LEN: usize = 4128 - 16 - 10;

/// One-page engine with this policy; returns it and its capacity in items.
pub fn one_page(eviction: EvictionPolicy) -> (Engine, usize) {
    let clock = Arc::new(Clock::new());
    let mut e = Engine::new(
        Config {
            memory_limit: 3 << 19,
            eviction,
            // The policy's own victims: none demoted (items of this size
            // would now be stored apart by the Z-zone, not evicted).
            zzone: false,
            ..Config::default()
        },
        clock,
    )
    .unwrap();
    let v = vec![b'v'; VALUE_LEN];
    assert!(matches!(
        e.store(&Store::set(b"probe", &v)),
        StoreOutcome::Stored { .. }
    ));
    let cap = e.slab_stats()[0].chunks_per_page as usize;
    assert_eq!(e.slab_stats()[0].chunk_size as usize, 16 + 10 + FULL_LEN);
    assert_eq!(e.delete(b"probe", 0), DeleteOutcome::Deleted);
    (e, cap)
}
